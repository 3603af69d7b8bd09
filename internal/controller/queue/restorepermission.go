package queue

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/requester"
)

// The operator's permission to restore is checked when a restore is validated, so that an
// operator installed to back up only (the chart's rbac.mode backupOnly: it reads everything and
// writes only Cairn's own kinds) fails the restore with a message at once, instead of failing
// halfway through it on the first object it cannot create.

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=selfsubjectaccessreviews,verbs=create

// restoreAccessReviews are the questions asked of the API server for rs: may the operator
// create where rs restores (ConfigMaps stand for every kind: RBAC's "*" would also match
// subresources, so no role of Cairn's grants it, and the question names a kind the full mode
// grants and backupOnly does not), and, for a restore that writes as its requester, may it
// impersonate them? A team's restore restores into its own namespace; an administrator's may
// restore anywhere.
func restoreAccessReviews(rs *cairnv1.Restore, operatorNamespace string, asRequester bool) []*authorizationv1.SelfSubjectAccessReview {
	namespace := "" // every namespace
	if rs.Namespace != operatorNamespace {
		namespace = rs.Namespace
	}
	questions := []authorizationv1.ResourceAttributes{{Namespace: namespace, Verb: "create", Resource: "configmaps"}}
	if asRequester {
		questions = append(questions, authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users"})
	}
	reviews := make([]*authorizationv1.SelfSubjectAccessReview, len(questions))
	for i := range questions {
		reviews[i] = &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &questions[i]}}
	}
	return reviews
}

// restoreAccessProblem is the validation error of a restore the operator is not allowed to
// carry out, as review answered, or "" when the API server allows it.
func restoreAccessProblem(review *authorizationv1.SelfSubjectAccessReview) string {
	if review.Status.Allowed {
		return ""
	}
	why := ""
	if review.Status.Reason != "" {
		why = " (" + review.Status.Reason + ")"
	}
	if review.Spec.ResourceAttributes.Verb == "impersonate" {
		return fmt.Sprintf("the operator is not allowed to act as the restore's requester%s: a restore outside its namespace writes as the person who created it, and it is installed to back up only (the chart's rbac.mode backupOnly); restoring needs rbac.mode full", why)
	}
	where := "in any namespace"
	if ns := review.Spec.ResourceAttributes.Namespace; ns != "" {
		where = "in namespace " + ns
	}
	return fmt.Sprintf("the operator is not allowed to create the resources a restore creates %s%s: it is installed to back up only (the chart's rbac.mode backupOnly); restoring needs rbac.mode full", where, why)
}

// RestoreAccess is Reconciler.RestoreAccess: it asks the API server
// restoreAccessReviews' questions with the operator's own identity and returns the first
// problem restoreAccessProblem finds. requesters says which restores write as their requester.
func RestoreAccess(c client.Client, operatorNamespace string, requesters *requester.Resolver) func(context.Context, *cairnv1.Restore) (string, error) {
	return func(ctx context.Context, rs *cairnv1.Restore) (string, error) {
		asRequester := requesters != nil && (requesters.Everywhere || rs.Namespace != operatorNamespace)
		for _, review := range restoreAccessReviews(rs, operatorNamespace, asRequester) {
			if err := c.Create(ctx, review); err != nil {
				return "", fmt.Errorf("asking the API server whether the operator may restore: %w", err)
			}
			if problem := restoreAccessProblem(review); problem != "" {
				return problem, nil
			}
		}
		return "", nil
	}
}
