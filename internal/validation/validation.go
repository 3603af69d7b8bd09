// Package validation holds what is checked of a backup, a restore's filters and a schedule's
// template before they run: the spec, the tenancy rule (DESIGN.md section 2), and the storage
// location. Each is a pure function returning every problem as a message for
// status.validationErrors; the queue, the backup and restore reconcilers and the schedule
// reconciler call them.
package validation

import (
	"fmt"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/selection"
)

// Backup checks what can be checked of a backup before it runs: its spec, the tenancy rule
// (Tenancy), that its storage location exists, and the limits that location sets for team
// backups (LocationLimits, with facts). It returns every problem, as messages
// for status.validationErrors (bound them with Cap before writing), and the
// name of the backup's storage location (its own, or the default).
//
// It is a pure function of its arguments: the queue calls it on new backups, and any other
// reconciler may call it again (on a backup about to start, say) with the locations it sees.
func Backup(b *cairnv1.Backup, operatorNamespace string, locations []cairnv1.BackupStorageLocation, facts LimitFacts) (errs []string, locationName string) {
	errs = Filters("backup", b.Namespace, b.Spec.Filters(), operatorNamespace)

	loc, err := location.Resolve(locations, operatorNamespace, b.Spec.StorageLocation)
	if err != nil {
		errs = append(errs, "spec.storageLocation: "+err.Error())
	} else {
		locationName = loc.Name
		if loc.Spec.Format == cairnv1.LocationFormatVelero {
			errs = append(errs, fmt.Sprintf("spec.storageLocation: storage location %s holds Velero's backups, which Cairn reads and never writes: back up to a location of format cairn", loc.Name))
		}
		errs = append(errs, LocationLimits(b, loc, operatorNamespace, facts)...)
	}
	return errs, locationName
}

// verbs say what each kind does to the namespaces it selects, for messages.
var verbs = map[string]string{"backup": "back up", "restore": "restore"}

// Filters checks the item filters of a Backup or a Restore (kind says which, for the
// messages) in namespace own: namespace patterns, resource names, label selectors, and the
// tenancy rule (Tenancy). The one check of filters, for both kinds.
func Filters(kind, own string, f cairnv1.ItemFilters, operatorNamespace string) []string {
	filter := selection.NamespaceFilter{Included: f.IncludedNamespaces, Excluded: f.ExcludedNamespaces}
	errs := filter.Validate()
	errs = append(errs, Tenancy(kind, own, f, operatorNamespace)...)

	errs = append(errs, validateResources("includedResources", f.IncludedResources)...)
	errs = append(errs, validateResources("excludedResources", f.ExcludedResources)...)
	if containsStar(f.ExcludedResources) {
		errs = append(errs, `spec.excludedResources: "*" would exclude every resource`)
	}

	if f.LabelSelector != nil && len(f.OrLabelSelectors) > 0 {
		errs = append(errs, "spec.labelSelector and spec.orLabelSelectors cannot be used together")
	}
	if f.LabelSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(f.LabelSelector); err != nil {
			errs = append(errs, fmt.Sprintf("spec.labelSelector: %v", err))
		}
	}
	for i, sel := range f.OrLabelSelectors {
		if sel == nil {
			errs = append(errs, fmt.Sprintf("spec.orLabelSelectors[%d]: must not be null", i))
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			errs = append(errs, fmt.Sprintf("spec.orLabelSelectors[%d]: %v", i, err))
		}
	}
	return errs
}

// Tenancy returns what breaks the tenancy rule (DESIGN.md section 2) in the filters f of
// a Backup or a Restore (kind) in namespace own: outside the operator's namespace it may
// select only its own namespace (an empty includedNamespaces means just that) and no
// cluster-scoped resources. It returns nil in the operator's namespace, which may select
// anything. ValidateFilters calls it; a reconciler that re-checks tenancy when a backup or
// restore starts calls it too.
func Tenancy(kind, own string, f cairnv1.ItemFilters, operatorNamespace string) []string {
	if own == operatorNamespace {
		return nil
	}
	var errs []string
	for _, ns := range f.IncludedNamespaces {
		if ns != own {
			errs = append(errs, fmt.Sprintf("spec.includedNamespaces: a %s in namespace %s may only %s its own namespace, not %q (only %ss in %s may select other namespaces)",
				kind, own, verbs[kind], ns, kind, operatorNamespace))
			break
		}
	}
	if f.IncludeClusterResources != nil && *f.IncludeClusterResources {
		errs = append(errs, fmt.Sprintf("spec.includeClusterResources: a %s in namespace %s cannot include cluster-scoped resources (only %ss in %s can)",
			kind, own, kind, operatorNamespace))
	}
	return errs
}

// Cap bounds messages for status.validationErrors, so that a spec with many
// bad entries still makes a status the API server accepts: at most
// cairnv1.MaxValidationErrors messages, the last of them saying how many more problems there
// were, each at most cairnv1.MaxValidationErrorLength bytes (a longer one is cut at a
// character boundary and ends in "…"). The messages it keeps are unchanged.
func Cap(errs []string) []string {
	if len(errs) == 0 {
		return nil
	}
	kept := errs
	if len(errs) > cairnv1.MaxValidationErrors {
		kept = errs[:cairnv1.MaxValidationErrors-1]
	}
	out := make([]string, 0, min(len(errs), cairnv1.MaxValidationErrors))
	for _, e := range kept {
		out = append(out, capMessage(e, cairnv1.MaxValidationErrorLength))
	}
	if more := len(errs) - len(kept); more > 0 {
		out = append(out, fmt.Sprintf("and %d more problems", more))
	}
	return out
}

// capMessage cuts s to at most limit bytes, ellipsis included, without splitting a character.
func capMessage(s string, limit int) string {
	const ellipsis = "…"
	if len(s) <= limit {
		return s
	}
	cut := limit - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
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
