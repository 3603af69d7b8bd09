package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/unittest"
)

func TestRestoreAccessReviews(t *testing.T) {
	impersonate := authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users"}
	tests := []struct {
		name, namespace string
		asRequester     bool
		want            []authorizationv1.ResourceAttributes
	}{
		{"an administrator's restore may restore anywhere", "cairn-system", false,
			[]authorizationv1.ResourceAttributes{{Verb: "create", Resource: "configmaps"}}},
		{"a team's restore restores into its own namespace, as its requester", "team-a", true,
			[]authorizationv1.ResourceAttributes{{Namespace: "team-a", Verb: "create", Resource: "configmaps"}, impersonate}},
		{"an administrator's restore as its requester (--act-as-requester=all-namespaces)", "cairn-system", true,
			[]authorizationv1.ResourceAttributes{{Verb: "create", Resource: "configmaps"}, impersonate}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reviews := restoreAccessReviews(unittest.Restore(tt.namespace, "r", 0, ""), "cairn-system", tt.asRequester)
			if len(reviews) != len(tt.want) {
				t.Fatalf("%d reviews, want %d", len(reviews), len(tt.want))
			}
			for i, review := range reviews {
				if got := *review.Spec.ResourceAttributes; got != tt.want[i] {
					t.Errorf("review %d: %+v, want %+v", i, got, tt.want[i])
				}
				if review.Spec.ResourceAttributes.Resource == "*" || review.Spec.ResourceAttributes.Group == "*" {
					t.Errorf("review %d asks about *: no role of Cairn's grants it", i)
				}
			}
		})
	}
}

func TestRestoreAccessProblem(t *testing.T) {
	tests := []struct {
		name      string
		namespace string
		status    authorizationv1.SubjectAccessReviewStatus
		want      []string // parts of the message; nil: no problem
	}{
		{"allowed", "", authorizationv1.SubjectAccessReviewStatus{Allowed: true}, nil},
		{"denied everywhere", "", authorizationv1.SubjectAccessReviewStatus{},
			[]string{"not allowed to create the resources a restore creates in any namespace:", "rbac.mode backupOnly", "rbac.mode full"}},
		{"denied in a namespace, with the authorizer's reason", "team-a", authorizationv1.SubjectAccessReviewStatus{Reason: "no RBAC policy matched"},
			[]string{"in namespace team-a (no RBAC policy matched)"}},
		{"may not impersonate", "impersonate", authorizationv1.SubjectAccessReviewStatus{},
			[]string{"not allowed to act as the restore's requester", "rbac.mode full"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			attrs := &authorizationv1.ResourceAttributes{Namespace: tt.namespace, Verb: "create"}
			if tt.namespace == "impersonate" {
				attrs = &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users"}
			}
			review := &authorizationv1.SelfSubjectAccessReview{
				Spec:   authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs},
				Status: tt.status,
			}
			got := restoreAccessProblem(review)
			if tt.want == nil && got != "" {
				t.Errorf("problem %q, want none", got)
			}
			if tt.want != nil && got == "" {
				t.Errorf("no problem, want one")
			}
			for _, part := range tt.want {
				if !strings.Contains(got, part) {
					t.Errorf("problem %q does not say %q", got, part)
				}
			}
		})
	}
}

// TestRestoreQueueFailsARestoreTheOperatorMayNotCarryOut: the API server answers the queue's
// SelfSubjectAccessReview; a new restore the operator may not carry out is FailedValidation
// with the reason, one it may carry out is queued.
func TestRestoreQueueFailsARestoreTheOperatorMayNotCarryOut(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
	// The operator may create in team-a only, as a Role there would let it.
	authorizer := interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		review, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
		if !ok {
			return c.Create(ctx, obj, opts...)
		}
		review.Status.Allowed = review.Spec.ResourceAttributes.Namespace == "team-a"
		return nil
	}}
	c := unittest.NewClient(t, authorizer, unittest.DefaultLocation(t.TempDir()),
		unittest.CompletedBackup("cairn-system", "b"), unittest.CompletedBackup("team-a", "b"),
		adminRestore("everywhere", 1, ""), unittest.Restore("team-a", "own", 2, ""))
	r := newRestoreQueue(c, clk, 1)
	r.RestoreAccess = RestoreAccess(c, r.Namespace, nil)
	if _, err := r.Reconcile(context.Background(), queueRequest); err != nil {
		t.Fatal(err)
	}

	rs := unittest.GetRestore(t, c, "cairn-system", "everywhere")
	if rs.Status.Phase != cairnv1.RestorePhaseFailedValidation || len(rs.Status.ValidationErrors) != 1 ||
		!strings.Contains(rs.Status.ValidationErrors[0], "rbac.mode backupOnly") {
		t.Errorf("everywhere: phase %s, validationErrors %q; want FailedValidation saying the operator may only back up",
			rs.Status.Phase, rs.Status.ValidationErrors)
	}
	rs = unittest.GetRestore(t, c, "team-a", "own")
	if rs.Status.Phase == cairnv1.RestorePhaseFailedValidation {
		t.Errorf("own: FailedValidation %q, want it queued", rs.Status.ValidationErrors)
	}
}
