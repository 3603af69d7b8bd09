package controller

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// The operator's permission to restore is checked when a restore is validated, so that an
// operator installed to back up only (the chart's rbac.mode backupOnly: it reads everything and
// writes only Cairn's own kinds) fails the restore with a message at once, instead of failing
// halfway through it on the first object it cannot create.

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=selfsubjectaccessreviews,verbs=create

// restoreAccessReview is the question asked of the API server for rs: may the operator create
// every kind of resource where rs restores? A team's restore restores into its own namespace;
// an administrator's restore may restore anywhere, cluster-scoped items included.
func restoreAccessReview(rs *cairnv1.Restore, operatorNamespace string) *authorizationv1.SelfSubjectAccessReview {
	namespace := "" // every namespace, and cluster-scoped resources
	if rs.Namespace != operatorNamespace {
		namespace = rs.Namespace
	}
	return &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "create", Group: "*", Resource: "*"},
	}}
}

// restoreAccessProblem is the validation error of a restore the operator is not allowed to
// carry out, or "" when the API server allows it.
func restoreAccessProblem(review *authorizationv1.SelfSubjectAccessReview) string {
	if review.Status.Allowed {
		return ""
	}
	where := "in any namespace"
	if ns := review.Spec.ResourceAttributes.Namespace; ns != "" {
		where = "in namespace " + ns
	}
	why := ""
	if review.Status.Reason != "" {
		why = " (" + review.Status.Reason + ")"
	}
	return fmt.Sprintf("the operator is not allowed to create the resources a restore creates %s%s: it is installed to back up only (the chart's rbac.mode backupOnly); restoring needs rbac.mode full", where, why)
}

// restoreAccess is BackupQueueReconciler.RestoreAccess: it asks the API server
// restoreAccessReview's question with the operator's own identity and returns
// restoreAccessProblem's answer.
func restoreAccess(c client.Client, operatorNamespace string) func(context.Context, *cairnv1.Restore) (string, error) {
	return func(ctx context.Context, rs *cairnv1.Restore) (string, error) {
		review := restoreAccessReview(rs, operatorNamespace)
		if err := c.Create(ctx, review); err != nil {
			return "", fmt.Errorf("asking the API server whether the operator may restore: %w", err)
		}
		return restoreAccessProblem(review), nil
	}
}
