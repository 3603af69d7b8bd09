package queue

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/scope"
)

// Validate checks what can be checked of a new backup before it is queued: its spec, the
// tenancy rule (DESIGN.md section 2), and that its storage location exists. It returns every
// problem, as messages for status.validationErrors, and the name of the backup's storage
// location (its own, or the default).
func Validate(b *cairnv1.Backup, operatorNamespace string, locations []cairnv1.BackupStorageLocation) (errs []string, locationName string) {
	filter := scope.NamespaceFilter{Included: b.Spec.IncludedNamespaces, Excluded: b.Spec.ExcludedNamespaces}
	errs = append(errs, filter.Validate()...)

	if b.Namespace != operatorNamespace {
		for _, ns := range b.Spec.IncludedNamespaces {
			if ns != b.Namespace {
				errs = append(errs, fmt.Sprintf("spec.includedNamespaces: a backup in namespace %s may only back up its own namespace, not %q (only backups in %s may select other namespaces)",
					b.Namespace, ns, operatorNamespace))
				break
			}
		}
		if b.Spec.IncludeClusterResources != nil && *b.Spec.IncludeClusterResources {
			errs = append(errs, fmt.Sprintf("spec.includeClusterResources: a backup in namespace %s cannot include cluster-scoped resources (only backups in %s can)",
				b.Namespace, operatorNamespace))
		}
	}

	errs = append(errs, validateResources("includedResources", b.Spec.IncludedResources)...)
	errs = append(errs, validateResources("excludedResources", b.Spec.ExcludedResources)...)
	if containsStar(b.Spec.ExcludedResources) {
		errs = append(errs, `spec.excludedResources: "*" would exclude every resource`)
	}

	if b.Spec.LabelSelector != nil && len(b.Spec.OrLabelSelectors) > 0 {
		errs = append(errs, "spec.labelSelector and spec.orLabelSelectors cannot be used together")
	}
	if b.Spec.LabelSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(b.Spec.LabelSelector); err != nil {
			errs = append(errs, fmt.Sprintf("spec.labelSelector: %v", err))
		}
	}
	for i, sel := range b.Spec.OrLabelSelectors {
		if sel == nil {
			errs = append(errs, fmt.Sprintf("spec.orLabelSelectors[%d]: must not be null", i))
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			errs = append(errs, fmt.Sprintf("spec.orLabelSelectors[%d]: %v", i, err))
		}
	}

	loc, err := location.Resolve(locations, operatorNamespace, b.Spec.StorageLocation)
	if err != nil {
		errs = append(errs, "spec.storageLocation: "+err.Error())
	} else {
		locationName = loc.Name
	}
	return errs, locationName
}

// validateResources checks the syntax of resource names (plural, singular or short name,
// optionally `.group`); discovery resolves them when the backup runs.
func validateResources(field string, names []string) []string {
	var errs []string
	for _, n := range names {
		switch {
		case n == "*":
		case n == "" || strings.TrimSpace(n) != n:
			errs = append(errs, fmt.Sprintf("spec.%s: %q is not a resource name", field, n))
		case strings.ContainsAny(n, "/ *"):
			errs = append(errs, fmt.Sprintf("spec.%s: %q is not a resource name (write resource or resource.group, such as deployments.apps)", field, n))
		case strings.ToLower(n) != n:
			errs = append(errs, fmt.Sprintf("spec.%s: %q must be lowercase (resource names are, such as configmaps)", field, n))
		}
	}
	return errs
}

func containsStar(list []string) bool {
	for _, s := range list {
		if s == "*" {
			return true
		}
	}
	return false
}
