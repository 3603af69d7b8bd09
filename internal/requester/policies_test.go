package requester

import (
	"context"
	"errors"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// installed are the four objects of config/admission as the API server stores them (with the
// defaults it fills in).
type installed struct {
	policy           *admissionregistrationv1.MutatingAdmissionPolicy
	binding          *admissionregistrationv1.MutatingAdmissionPolicyBinding
	immutable        *admissionregistrationv1.ValidatingAdmissionPolicy
	immutableBinding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

func installedPolicies() installed {
	everything := &admissionregistrationv1.MatchResources{
		NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
		MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
	}
	return installed{
		policy: &admissionregistrationv1.MutatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: cairnv1.RequesterPolicyName},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
				FailurePolicy: ptr.To(admissionregistrationv1.Fail),
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{cairnv1.GroupVersion.Group}, APIVersions: []string{"*"},
							Resources: []string{"backups", "restores", "schedules", "downloadrequests"}},
					},
				}}},
			},
		},
		binding: &admissionregistrationv1.MutatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: cairnv1.RequesterPolicyName},
			Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
				PolicyName: cairnv1.RequesterPolicyName, MatchResources: everything.DeepCopy(),
			},
		},
		immutable: &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: cairnv1.RequesterImmutablePolicyName},
			Spec:       admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: ptr.To(admissionregistrationv1.Fail)},
		},
		immutableBinding: &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: cairnv1.RequesterImmutablePolicyName},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: cairnv1.RequesterImmutablePolicyName, MatchResources: everything.DeepCopy(),
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		},
	}
}

func (i installed) objects() []client.Object {
	var objs []client.Object
	if i.policy != nil {
		objs = append(objs, i.policy)
	}
	if i.binding != nil {
		objs = append(objs, i.binding)
	}
	if i.immutable != nil {
		objs = append(objs, i.immutable)
	}
	if i.immutableBinding != nil {
		objs = append(objs, i.immutableBinding)
	}
	return objs
}

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPoliciesInstalled(t *testing.T) {
	tests := []struct {
		name   string
		change func(*installed)
		want   string // a substring of the problem; "": no problem
	}{
		{name: "as config/admission installs them", change: func(*installed) {}},
		{name: "unset failurePolicy defaults to Fail", change: func(i *installed) { i.policy.Spec.FailurePolicy = nil }},
		{name: "bindings without matchResources", change: func(i *installed) {
			i.binding.Spec.MatchResources, i.immutableBinding.Spec.MatchResources = nil, nil
		}},
		{name: "mutating policy missing", change: func(i *installed) { i.policy = nil },
			want: "MutatingAdmissionPolicy cairn-requester is missing; install Cairn's admission policies"},
		{name: "mutating binding missing", change: func(i *installed) { i.binding = nil },
			want: "MutatingAdmissionPolicyBinding cairn-requester is missing"},
		{name: "validating policy missing", change: func(i *installed) { i.immutable = nil },
			want: "ValidatingAdmissionPolicy cairn-requester-immutable is missing"},
		{name: "validating binding missing", change: func(i *installed) { i.immutableBinding = nil },
			want: "ValidatingAdmissionPolicyBinding cairn-requester-immutable is missing"},
		{name: "mutating policy ignores failures", change: func(i *installed) { i.policy.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore) },
			want: "MutatingAdmissionPolicy cairn-requester does not have failurePolicy Fail"},
		{name: "validating policy ignores failures", change: func(i *installed) { i.immutable.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore) },
			want: "ValidatingAdmissionPolicy cairn-requester-immutable does not have failurePolicy Fail"},
		{name: "mutating binding binds another policy", change: func(i *installed) { i.binding.Spec.PolicyName = "other" },
			want: `MutatingAdmissionPolicyBinding cairn-requester binds "other", not cairn-requester`},
		{name: "validating binding binds another policy", change: func(i *installed) { i.immutableBinding.Spec.PolicyName = "other" },
			want: `ValidatingAdmissionPolicyBinding cairn-requester-immutable binds "other", not cairn-requester-immutable`},
		{name: "mutating binding leaves out a namespace", change: func(i *installed) {
			i.binding.Spec.MatchResources.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"team-a"}}}}
		}, want: "MutatingAdmissionPolicyBinding cairn-requester has matchResources that leave out some objects"},
		{name: "validating binding selects objects by label", change: func(i *installed) {
			i.immutableBinding.Spec.MatchResources.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
		}, want: "ValidatingAdmissionPolicyBinding cairn-requester-immutable has matchResources that leave out some objects"},
		{name: "mutating binding excludes a resource", change: func(i *installed) {
			i.binding.Spec.MatchResources.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{{ResourceNames: []string{"x"}}}
		}, want: "MutatingAdmissionPolicyBinding cairn-requester has matchResources that leave out some objects"},
		{name: "mutating policy from before schedules are re-stamped: creates only", change: func(i *installed) {
			i.policy.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
		}, want: "MutatingAdmissionPolicy cairn-requester does not match updates of schedules"},
		{name: "mutating policy whose updates leave out schedules", change: func(i *installed) {
			i.policy.Spec.MatchConstraints.ResourceRules[0].Resources = []string{"backups", "restores", "downloadrequests"}
		}, want: "MutatingAdmissionPolicy cairn-requester does not match updates of schedules"},
		{name: "mutating policy matching every operation", change: func(i *installed) {
			i.policy.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
		}},
		{name: "validating binding only warns", change: func(i *installed) {
			i.immutableBinding.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
		}, want: "ValidatingAdmissionPolicyBinding cairn-requester-immutable does not have validationActions Deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := installedPolicies()
			tt.change(&i)
			c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(i.objects()...).Build()
			problem, err := PoliciesInstalled(context.Background(), c)
			if err != nil {
				t.Fatalf("PoliciesInstalled: %v", err)
			}
			if tt.want == "" && problem != "" || tt.want != "" && !strings.Contains(problem, tt.want) {
				t.Errorf("PoliciesInstalled = %q, want %q", problem, tt.want)
			}
		})
	}
}

// TestPoliciesInstalledNotServed: a cluster older than 1.36 serves no MutatingAdmissionPolicy,
// a problem that says so, not an error.
func TestPoliciesInstalledNotServed(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}, SearchedVersions: []string{"v1"}}
		},
	}).Build()
	problem, err := PoliciesInstalled(context.Background(), c)
	if err != nil {
		t.Fatalf("PoliciesInstalled: %v", err)
	}
	if want := "the API server does not serve MutatingAdmissionPolicy of admissionregistration.k8s.io/v1 (Kubernetes 1.36+)"; !strings.Contains(problem, want) {
		t.Errorf("PoliciesInstalled = %q, want it to contain %q", problem, want)
	}
}

// TestPoliciesInstalledCannotRead: an error reading (here, RBAC) is an error, not a problem.
func TestPoliciesInstalledCannotRead(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"}, cairnv1.RequesterPolicyName, errors.New("RBAC"))
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return forbidden
		},
	}).Build()
	problem, err := PoliciesInstalled(context.Background(), c)
	if !apierrors.IsForbidden(err) || problem != "" {
		t.Errorf("PoliciesInstalled = %q, %v; want no problem and the Forbidden error", problem, err)
	}
}
