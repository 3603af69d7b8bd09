package requester

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestActingFor(t *testing.T) {
	dev := authenticationv1.UserInfo{Username: "system:serviceaccount:team-a:dev", Groups: []string{"system:serviceaccounts"}}
	tests := []struct {
		name        string
		namespace   string
		everywhere  bool
		distrust    string
		user        authenticationv1.UserInfo
		parseErr    error
		wantUser    string // "" for the operator itself
		wantProblem []string
	}{
		{name: "an administrator's object: the operator's own rights", namespace: "cairn-system", user: dev},
		{name: "an administrator's object without a requester: the operator's own rights", namespace: "cairn-system", parseErr: errors.New("none")},
		{name: "an administrator's object, the rule everywhere", namespace: "cairn-system", everywhere: true, user: dev, wantUser: dev.Username},
		{name: "a team's object acts for its requester", namespace: "team-a", user: dev, wantUser: dev.Username},
		{name: "policies missing: never the operator's rights", namespace: "team-a", user: dev, distrust: "the policy cairn-requester is not installed",
			wantProblem: []string{"no trustworthy requester", "cairn-requester is not installed", "admission policies"}},
		{name: "no requester recorded (created before the upgrade)", namespace: "team-a", parseErr: errors.New("no cairn.dev/requester annotation"),
			wantProblem: []string{"no trustworthy requester", "no cairn.dev/requester annotation", "create the object again"}},
		{name: "an empty username", namespace: "team-a", user: authenticationv1.UserInfo{Groups: []string{"x"}},
			wantProblem: []string{"no username"}},
		{name: "everywhere, policies missing", namespace: "cairn-system", everywhere: true, user: dev, distrust: "missing",
			wantProblem: []string{"no trustworthy requester"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			actAs, problem := actingFor(tt.namespace, "cairn-system", tt.everywhere, tt.distrust, tt.user, tt.parseErr)
			switch {
			case tt.wantProblem != nil:
				if actAs != nil || problem == "" {
					t.Fatalf("acting for %v, problem %q; want no one and a problem", actAs, problem)
				}
				for _, part := range tt.wantProblem {
					if !strings.Contains(problem, part) {
						t.Errorf("problem %q does not say %q", problem, part)
					}
				}
			case tt.wantUser == "":
				if actAs != nil || problem != "" {
					t.Errorf("acting for %v, problem %q; want the operator itself", actAs, problem)
				}
			default:
				if actAs == nil || actAs.Username != tt.wantUser || problem != "" {
					t.Errorf("acting for %v, problem %q; want %s", actAs, problem, tt.wantUser)
				}
			}
		})
	}
}

func TestReadQuestions(t *testing.T) {
	got := readQuestions(map[string][]string{
		"configmaps":        {"team-a/a", "team-a/b", "team-b/c"},
		"secrets":           {"team-a/s"},
		"deployments.apps":  {"team-a/web"},
		"persistentvolumes": {"pv-1", "pv-2"},
		"customresourcedefinitions.apiextensions.k8s.io": {"widgets.example.com"},
	})
	var lines []string
	for _, q := range got {
		lines = append(lines, q.gr.String()+"@"+q.namespace)
	}
	want := "configmaps@team-a configmaps@team-b customresourcedefinitions.apiextensions.k8s.io@ deployments.apps@team-a persistentvolumes@ secrets@team-a"
	if strings.Join(lines, " ") != want {
		t.Errorf("questions\n %s\nwant\n %s", strings.Join(lines, " "), want)
	}
}

func TestAccessReview(t *testing.T) {
	user := authenticationv1.UserInfo{Username: "alice", UID: "u1", Groups: []string{"devs"},
		Extra: map[string]authenticationv1.ExtraValue{"scopes": {"a", "b"}}}
	review := accessReview(user, authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "list", Resource: "secrets"})
	spec := review.Spec
	if spec.User != "alice" || spec.UID != "u1" || fmt.Sprint(spec.Groups) != "[devs]" || fmt.Sprint(spec.Extra["scopes"]) != "[a b]" {
		t.Errorf("review spec %+v: want the requester's whole identity", spec)
	}
	if *spec.ResourceAttributes != (authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "list", Resource: "secrets"}) {
		t.Errorf("attributes %+v", *spec.ResourceAttributes)
	}
}

// The API server's answer decides; the reason it gives is named.
func TestRequestersMayAndReadAll(t *testing.T) {
	// alice may get everything in team-a but secrets.
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		review, ok := obj.(*authorizationv1.SubjectAccessReview)
		if !ok {
			return c.Create(ctx, obj, opts...)
		}
		a := review.Spec.ResourceAttributes
		review.Status.Allowed = review.Spec.User == "alice" && a.Namespace == "team-a" && a.Resource != "secrets"
		if !review.Status.Allowed {
			review.Status.Reason = "no rule"
		}
		return nil
	}}).Build()
	q := &Resolver{Client: c, OperatorNamespace: "cairn-system"}
	alice := authenticationv1.UserInfo{Username: "alice"}
	ctx := context.Background()

	access := q.BackupAccess(alice)
	if ok, _, err := access(ctx, schema.GroupResource{Resource: "configmaps"}, "team-a", "list"); !ok || err != nil {
		t.Errorf("configmaps: %v, %v; want allowed", ok, err)
	}
	if ok, reason, err := access(ctx, schema.GroupResource{Resource: "secrets"}, "team-a", "list"); ok || reason != "no rule" || err != nil {
		t.Errorf("secrets: %v, %q, %v; want denied with the reason", ok, reason, err)
	}

	denied, err := q.ReadAll(ctx, alice, map[string][]string{"configmaps": {"team-a/a"}, "deployments.apps": {"team-a/web"}})
	if denied != "" || err != nil {
		t.Errorf("ReadAll = %q, %v; want allowed", denied, err)
	}
	denied, err = q.ReadAll(ctx, alice, map[string][]string{"configmaps": {"team-a/a", "team-b/b"}, "secrets": {"team-a/s"}})
	if denied != "alice may not get configmaps in namespace team-b, secrets in namespace team-a (no rule)" || err != nil {
		t.Errorf("ReadAll = %q, %v; want the secrets named", denied, err)
	}
}

// The policies' presence is read once per trustTTL, not for every team object, and a change is
// seen once that has passed; a failure to read them is not remembered.
func TestRequestersReuseTrust(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC))
	asked, answer, fail := 0, "", false
	q := &Resolver{OperatorNamespace: "cairn-system", Clock: clk,
		Parse: func(metav1.Object) (authenticationv1.UserInfo, error) {
			return authenticationv1.UserInfo{Username: "alice"}, nil
		},
		Trust: func(context.Context) (string, error) {
			asked++
			if fail {
				return "", errors.New("API server down")
			}
			return answer, nil
		}}
	obj := &metav1.ObjectMeta{Namespace: "team-a", Name: "b"}
	ctx := context.Background()
	for range 3 {
		if actAs, problem, err := q.For(ctx, obj); actAs == nil || problem != "" || err != nil {
			t.Fatalf("For = %v, %q, %v; want alice", actAs, problem, err)
		}
	}
	if asked != 1 {
		t.Errorf("Trust asked %d times within %s, want 1", asked, trustTTL)
	}
	answer = "the policy cairn-requester is not installed"
	clk.Step(trustTTL)
	if _, problem, _ := q.For(ctx, obj); !strings.Contains(problem, "cairn-requester is not installed") || asked != 2 {
		t.Errorf("after %s: problem %q, asked %d; want the policies read again and missing", trustTTL, problem, asked)
	}
	fail = true
	clk.Step(trustTTL)
	for range 2 {
		if _, _, err := q.For(ctx, obj); err == nil {
			t.Error("no error: a failure to read the policies is returned, and asked again next time")
		}
	}
	if asked != 4 {
		t.Errorf("Trust asked %d times, want 4: failures are not kept", asked)
	}
}
