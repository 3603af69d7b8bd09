package requester

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

// Acting as the requester (DESIGN.md section 15): in a team's namespace the operator never does
// for anyone what they could not do themselves. A backup reads only what its requester may
// list (SubjectAccessReviews); a restore writes as its requester (impersonation); a download
// is answered only when the requester may read what it hands out.

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Resolver finds whom the operator acts for, and acts for them.
type Resolver struct {
	// Client creates the SubjectAccessReviews.
	Client client.Client
	// Config is the operator's own; restores impersonate their requester from a copy of it.
	Config *rest.Config
	// OperatorNamespace is where the operator acts with its own rights, unless Everywhere.
	OperatorNamespace string
	// Everywhere applies the requester rule in the operator's namespace too
	// (--act-as-requester=all-namespaces).
	Everywhere bool
	// Parse reads the requester an object's annotations record (internal/requester).
	Parse func(metav1.Object) (authenticationv1.UserInfo, error)
	// Trust says why the recorded requesters cannot be trusted ("" when they can: the
	// admission policies that write them and keep them from changing are installed).
	Trust func(ctx context.Context) (problem string, err error)
	// Clock times how long an answer of Trust is kept (trustTTL); nil means the real clock.
	Clock clock.Clock

	// trust is Trust's last answer and when it was given: the queue, the backup and restore
	// reconcilers and the downloads each ask for every team object, and the policies change
	// rarely, so the answer is reused for trustTTL instead of reading four objects each time.
	mu        sync.Mutex
	distrust  string
	trustedAt time.Time
}

// trustTTL is how long an answer of Resolver.Trust is reused: a policy removed (or
// installed) is seen within it.
const trustTTL = 5 * time.Second

// distrusted is Trust's answer, reused for trustTTL.
func (q *Resolver) distrusted(ctx context.Context) (string, error) {
	if q.Trust == nil {
		return "", nil
	}
	now := clock.RealClock{}.Now()
	if q.Clock != nil {
		now = q.Clock.Now()
	}
	q.mu.Lock()
	if !q.trustedAt.IsZero() && now.Sub(q.trustedAt) < trustTTL {
		defer q.mu.Unlock()
		return q.distrust, nil
	}
	q.mu.Unlock()
	distrust, err := q.Trust(ctx)
	if err != nil {
		return "", err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.distrust, q.trustedAt = distrust, now
	return distrust, nil
}

// actingFor decides whom the operator acts for on an object in namespace: nil for itself (an
// administrator's object in the operator's namespace), else the recorded requester. problem,
// when not empty, says why the object cannot run at all: it is in a namespace where the
// requester rule applies and has no requester that can be trusted. It is never run with the
// operator's own rights instead.
func actingFor(namespace, operatorNamespace string, everywhere bool, distrust string, user authenticationv1.UserInfo, parseErr error) (actAs *authenticationv1.UserInfo, problem string) {
	if !everywhere && namespace == operatorNamespace {
		return nil, ""
	}
	switch {
	case distrust != "":
		return nil, "no trustworthy requester: " + distrust + "; install Cairn's admission policies (docs/security.md), then create the object again"
	case parseErr != nil:
		return nil, "no trustworthy requester: " + parseErr.Error() + "; create the object again so that the admission policy records who created it (docs/security.md)"
	case user.Username == "":
		return nil, "no trustworthy requester: the requester has no username; create the object again (docs/security.md)"
	}
	return &user, ""
}

// For returns whom the operator acts for on obj (nil: itself), or why obj cannot run
// (problem); err is a passing failure to find out.
func (q *Resolver) For(ctx context.Context, obj metav1.Object) (actAs *authenticationv1.UserInfo, problem string, err error) {
	if q == nil {
		return nil, "", nil
	}
	if !q.Everywhere && obj.GetNamespace() == q.OperatorNamespace {
		return nil, "", nil
	}
	distrust, err := q.distrusted(ctx)
	if err != nil {
		return nil, "", err
	}
	var user authenticationv1.UserInfo
	parseErr := fmt.Errorf("the manager cannot read requesters")
	if q.Parse != nil {
		user, parseErr = q.Parse(obj)
	}
	actAs, problem = actingFor(obj.GetNamespace(), q.OperatorNamespace, q.Everywhere, distrust, user, parseErr)
	return actAs, problem, nil
}

// accessReview is the question "may user verb gr (named name, "" for any) in namespace ("" for
// a cluster-scoped resource)?".
func accessReview(user authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) *authorizationv1.SubjectAccessReview {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: &attrs, User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
	}}
}

// denialReason is why a review said no, for messages.
func denialReason(review *authorizationv1.SubjectAccessReview) string {
	if review.Status.Reason != "" {
		return review.Status.Reason
	}
	return "no RBAC rule allows it"
}

// May asks the API server whether user may do what attrs say; reason says why not.
func (q *Resolver) May(ctx context.Context, user authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (allowed bool, reason string, err error) {
	review := accessReview(user, attrs)
	if err := q.Client.Create(ctx, review); err != nil {
		return false, "", fmt.Errorf("asking the API server what %s may do: %w", user.Username, err)
	}
	if review.Status.Allowed {
		return true, "", nil
	}
	return false, denialReason(review), nil
}

// BackupAccess is backup.Request.Access for a backup acting for user: it reads what user may
// list and get.
func (q *Resolver) BackupAccess(user authenticationv1.UserInfo) backup.Access {
	return func(ctx context.Context, gr schema.GroupResource, namespace, verb string) (bool, string, error) {
		return q.May(ctx, user, authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: gr.Group, Resource: gr.Resource})
	}
}

// ExecAccess says whether owner, a Backup or Restore, may run hooks in pods of namespace
// (DESIGN.md section 17): one acting for its requester may only where the requester may
// create pods/exec, the power to run commands in pods; denied names them and the API server's
// reason. The exec itself is then made with the operator's rights, as the reads of a team's
// backup are (a SubjectAccessReview, not impersonation, which backupOnly never holds). An
// object with no trustworthy requester never runs (its reconciler refuses it); denied says
// why all the same.
func (q *Resolver) ExecAccess(ctx context.Context, owner client.Object, namespace string) (denied string, err error) {
	actAs, problem, err := q.For(ctx, owner)
	switch {
	case err != nil:
		return "", err
	case problem != "":
		return problem, nil
	case actAs == nil:
		return "", nil
	}
	ok, reason, err := q.May(ctx, *actAs, authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "create", Resource: "pods", Subresource: "exec"})
	if err != nil || ok {
		return "", err
	}
	kind := "backup"
	if _, isRestore := owner.(*cairnv1.Restore); isRestore {
		kind = "restore"
	}
	return fmt.Sprintf("Forbidden: the %s's requester %s may not create pods/exec in namespace %s, so it may not run hooks there (%s)", kind, actAs.Username, namespace, reason), nil
}

// Writer is restore.Request.Writer for a restore acting for user: a dynamic client whose every
// request impersonates user, so that the API server applies user's RBAC and admission.
func (q *Resolver) Writer(user authenticationv1.UserInfo) (dynamic.Interface, error) {
	cfg := rest.CopyConfig(q.Config)
	extra := make(map[string][]string, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = v
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra}
	return dynamic.NewForConfig(cfg)
}

// ReadAll reports whether user may get every kind of object in items ("resource.group" →
// "namespace/name", or "name" for a cluster-scoped item: a backup's resource list); denied
// names every kind they may not read, and where, for messages.
func (q *Resolver) ReadAll(ctx context.Context, user authenticationv1.UserInfo, items map[string][]string) (denied string, err error) {
	var refused []string
	reason := ""
	for _, k := range readQuestions(items) {
		ok, why, err := q.May(ctx, user, authorizationv1.ResourceAttributes{Namespace: k.namespace, Verb: "get", Group: k.gr.Group, Resource: k.gr.Resource})
		if err != nil {
			return "", err
		}
		if ok {
			continue
		}
		where := "cluster-scoped"
		if k.namespace != "" {
			where = "in namespace " + k.namespace
		}
		refused = append(refused, k.gr.String()+" "+where)
		reason = why
	}
	if len(refused) == 0 {
		return "", nil
	}
	return fmt.Sprintf("%s may not get %s (%s)", user.Username, strings.Join(refused, ", "), reason), nil
}

// readQuestion is one (kind, namespace) pair of a resource list.
type readQuestion struct {
	gr        schema.GroupResource
	namespace string
}

// readQuestions are the distinct (kind, namespace) pairs of a resource list, sorted, so
// that a download asks each once and in a stable order.
func readQuestions(items map[string][]string) []readQuestion {
	seen := map[readQuestion]bool{}
	for resource, names := range items {
		gr := schema.ParseGroupResource(resource)
		for _, n := range names {
			ns, _, namespaced := strings.Cut(n, "/")
			if !namespaced {
				ns = ""
			}
			seen[readQuestion{gr: gr, namespace: ns}] = true
		}
	}
	out := make([]readQuestion, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].gr.String() != out[j].gr.String() {
			return out[i].gr.String() < out[j].gr.String()
		}
		return out[i].namespace < out[j].namespace
	})
	return out
}
