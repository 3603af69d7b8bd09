package requester

import (
	"context"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// installHint ends every problem PoliciesInstalled reports.
const installHint = "install Cairn's admission policies (the chart's admissionPolicies.enabled, or config/admission; docs/install.md)"

// PoliciesInstalled reports whether the requester annotations can be trusted: whether the
// admission policies that write them on create and keep them from changing
// (cairnv1.RequesterPolicyName, cairnv1.RequesterImmutablePolicyName) and their bindings exist,
// fail closed, and apply to every namespace. It returns "" when they do, else the problem, in
// words fit for a FailedValidation message. An error is a failure to read them (the manager may
// lack RBAC for admissionregistration.k8s.io), not an answer.
//
// A cluster older than Kubernetes 1.36 serves no MutatingAdmissionPolicy: that is a problem, not
// an error, as no admission plugin of Cairn's records a requester there.
func PoliciesInstalled(ctx context.Context, c client.Reader) (problem string, err error) {
	var policy admissionregistrationv1.MutatingAdmissionPolicy
	var binding admissionregistrationv1.MutatingAdmissionPolicyBinding
	var immutable admissionregistrationv1.ValidatingAdmissionPolicy
	var immutableBinding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, o := range []struct {
		kind string
		name string
		obj  client.Object
	}{
		{"MutatingAdmissionPolicy", cairnv1.RequesterPolicyName, &policy},
		{"MutatingAdmissionPolicyBinding", cairnv1.RequesterPolicyName, &binding},
		{"ValidatingAdmissionPolicy", cairnv1.RequesterImmutablePolicyName, &immutable},
		{"ValidatingAdmissionPolicyBinding", cairnv1.RequesterImmutablePolicyName, &immutableBinding},
	} {
		err := c.Get(ctx, types.NamespacedName{Name: o.name}, o.obj)
		switch {
		case meta.IsNoMatchError(err):
			return fmt.Sprintf("the API server does not serve %s of admissionregistration.k8s.io/v1 (Kubernetes 1.36+), "+
				"so nothing records who created Cairn's objects; upgrade the cluster or add an admission webhook that does (docs/install.md)", o.kind), nil
		case apierrors.IsNotFound(err):
			return fmt.Sprintf("%s %s is missing; %s", o.kind, o.name, installHint), nil
		case err != nil:
			return "", fmt.Errorf("reading %s %s: %w", o.kind, o.name, err)
		}
	}
	return policyProblem(&policy, &binding, &immutable, &immutableBinding), nil
}

// policyProblem is what is wrong with policies and bindings that exist: a policy that does not
// fail closed, a binding bound to another policy or narrowed to some objects, or a validating
// binding that does not deny. "" when nothing is.
func policyProblem(policy *admissionregistrationv1.MutatingAdmissionPolicy,
	binding *admissionregistrationv1.MutatingAdmissionPolicyBinding,
	immutable *admissionregistrationv1.ValidatingAdmissionPolicy,
	immutableBinding *admissionregistrationv1.ValidatingAdmissionPolicyBinding,
) string {
	switch {
	case !failsClosed(policy.Spec.FailurePolicy):
		return fmt.Sprintf("MutatingAdmissionPolicy %s does not have failurePolicy Fail; %s", policy.Name, installHint)
	case !stampsScheduleUpdates(policy.Spec.MatchConstraints):
		return fmt.Sprintf("MutatingAdmissionPolicy %s does not match updates of schedules, so a changed Schedule would still act as whoever created it (an install from before Schedules act as whoever last defined them); %s", policy.Name, installHint)
	case !failsClosed(immutable.Spec.FailurePolicy):
		return fmt.Sprintf("ValidatingAdmissionPolicy %s does not have failurePolicy Fail; %s", immutable.Name, installHint)
	case binding.Spec.PolicyName != policy.Name:
		return fmt.Sprintf("MutatingAdmissionPolicyBinding %s binds %q, not %s; %s", binding.Name, binding.Spec.PolicyName, policy.Name, installHint)
	case immutableBinding.Spec.PolicyName != immutable.Name:
		return fmt.Sprintf("ValidatingAdmissionPolicyBinding %s binds %q, not %s; %s", immutableBinding.Name, immutableBinding.Spec.PolicyName, immutable.Name, installHint)
	case narrows(binding.Spec.MatchResources):
		return fmt.Sprintf("MutatingAdmissionPolicyBinding %s has matchResources that leave out some objects; %s", binding.Name, installHint)
	case narrows(immutableBinding.Spec.MatchResources):
		return fmt.Sprintf("ValidatingAdmissionPolicyBinding %s has matchResources that leave out some objects; %s", immutableBinding.Name, installHint)
	case !slices.Contains(immutableBinding.Spec.ValidationActions, admissionregistrationv1.Deny):
		return fmt.Sprintf("ValidatingAdmissionPolicyBinding %s does not have validationActions Deny; %s", immutableBinding.Name, installHint)
	}
	return ""
}

// stampsScheduleUpdates reports whether the mutating policy's match constraints take the
// updates of Schedules (DESIGN.md section 21), as config/admission's do.
func stampsScheduleUpdates(m *admissionregistrationv1.MatchResources) bool {
	if m == nil {
		return false
	}
	for _, r := range m.ResourceRules {
		ops := r.Operations
		if (slices.Contains(ops, admissionregistrationv1.Update) || slices.Contains(ops, admissionregistrationv1.OperationAll)) &&
			(slices.Contains(r.Resources, "schedules") || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.APIGroups, cairnv1.GroupVersion.Group) || slices.Contains(r.APIGroups, "*")) {
			return true
		}
	}
	return false
}

// failsClosed: an unset failurePolicy defaults to Fail.
func failsClosed(p *admissionregistrationv1.FailurePolicyType) bool {
	return p == nil || *p == admissionregistrationv1.Fail
}

// narrows reports whether a binding's matchResources match fewer objects than its policy does.
// The API server fills in empty selectors and the match policy; only a selector with terms or
// resource rules narrow.
func narrows(m *admissionregistrationv1.MatchResources) bool {
	if m == nil {
		return false
	}
	return hasTerms(m.NamespaceSelector) || hasTerms(m.ObjectSelector) ||
		len(m.ResourceRules) > 0 || len(m.ExcludeResourceRules) > 0
}

func hasTerms(s *metav1.LabelSelector) bool {
	return s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0)
}
