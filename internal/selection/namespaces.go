// Package selection decides what a backup selects: which namespaces (with `*` wildcards), and
// whether two backups' selections overlap. Every part of Cairn that resolves a backup's
// namespaces calls this package.
package selection

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// NamespaceFilter is a backup's includedNamespaces and excludedNamespaces, as glob patterns
// (`*` matches any run of characters, `?` one character).
type NamespaceFilter struct {
	Included []string
	Excluded []string
}

// ForBackup returns the namespace filter of a backup. A backup outside the operator's namespace
// with no includedNamespaces selects its own namespace (the tenancy rule).
func ForBackup(b *cairnv1.Backup, operatorNamespace string) NamespaceFilter {
	return For(b.Namespace, b.Spec.IncludedNamespaces, b.Spec.ExcludedNamespaces, operatorNamespace)
}

// For returns the namespace filter of a Backup or Restore in namespace own with these
// includedNamespaces and excludedNamespaces. Outside the operator's namespace, no
// includedNamespaces means the object's own namespace (the tenancy rule).
func For(own string, included, excluded []string, operatorNamespace string) NamespaceFilter {
	f := NamespaceFilter{Included: included, Excluded: excluded}
	if len(f.Included) == 0 && own != operatorNamespace {
		f.Included = []string{own}
	}
	return f
}

// SelectsAll reports whether the filter includes every namespace (no includedNamespaces, or
// `*`), whatever it excludes: such a backup may reach namespaces created while it runs.
func (f NamespaceFilter) SelectsAll() bool {
	if len(f.Included) == 0 {
		return true
	}
	for _, p := range f.Included {
		if p == "*" {
			return true
		}
	}
	return false
}

// Matches reports whether the namespace ns is selected.
func (f NamespaceFilter) Matches(ns string) bool {
	return f.included(ns) && !f.excluded(ns)
}

func (f NamespaceFilter) included(ns string) bool {
	if len(f.Included) == 0 {
		return true
	}
	for _, p := range f.Included {
		if match(p, ns) {
			return true
		}
	}
	return false
}

func (f NamespaceFilter) excluded(ns string) bool {
	for _, p := range f.Excluded {
		if match(p, ns) {
			return true
		}
	}
	return false
}

func match(pattern, ns string) bool {
	ok, err := path.Match(pattern, ns)
	return err == nil && ok
}

// Validate returns one message per pattern that is neither a namespace name nor a valid
// wildcard pattern.
func (f NamespaceFilter) Validate() []string {
	var errs []string
	check := func(field string, patterns []string) {
		for _, p := range patterns {
			if msg := validatePattern(p); msg != "" {
				errs = append(errs, fmt.Sprintf("spec.%s: %q %s", field, p, msg))
			}
		}
	}
	check("includedNamespaces", f.Included)
	check("excludedNamespaces", f.Excluded)
	return errs
}

func validatePattern(p string) string {
	if p == "" {
		return "is empty"
	}
	if _, err := path.Match(p, ""); err != nil {
		return "is not a valid wildcard pattern"
	}
	if !strings.ContainsAny(p, "*?") {
		if errs := validation.IsDNS1123Label(p); len(errs) > 0 {
			return "is not a valid namespace name: " + strings.Join(errs, "; ")
		}
		return ""
	}
	for _, r := range p {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '*' && r != '?' {
			return fmt.Sprintf("may contain only lowercase letters, digits, '-', '*' and '?', not %q", r)
		}
	}
	return ""
}

// LiteralNames returns the namespaces the filter selects when it includes only names, no
// patterns: those of them not excluded, sorted, with no repeats. What such a filter selects
// does not depend on which namespaces exist. ok is false when the filter includes every
// namespace or any pattern.
func (f NamespaceFilter) LiteralNames() (names []string, ok bool) {
	if f.SelectsAll() {
		return nil, false
	}
	for _, p := range f.Included {
		if isPattern(p) {
			return nil, false
		}
		if !f.excluded(p) {
			names = append(names, p)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), true
}

// NamespaceSet is the namespaces a backup selects, resolved against the cluster's namespaces.
type NamespaceSet struct {
	// All means every namespace, including those not created yet.
	All bool
	// Names are the selected namespaces, sorted, when All is false.
	Names []string
}

// Resolve resolves the filter against the cluster's namespaces, given in any order. Sorted,
// they are faster to resolve against: a pattern with a literal prefix (`team-a-*`) is then
// matched only against the namespaces that start with that prefix.
func (f NamespaceFilter) Resolve(clusterNamespaces []string) NamespaceSet {
	if f.SelectsAll() {
		return NamespaceSet{All: true}
	}
	selected := map[string]bool{}
	checked, sorted := false, false
	for _, p := range f.Included {
		if !isPattern(p) {
			// A namespace named outright is selected even if it does not exist yet: it may
			// be created before the backup runs.
			if !f.excluded(p) {
				selected[p] = true
			}
			continue
		}
		candidates := clusterNamespaces
		if prefix := literalPrefix(p); prefix != "" {
			if !checked {
				checked, sorted = true, slices.IsSorted(clusterNamespaces)
			}
			if sorted {
				candidates = withPrefix(clusterNamespaces, prefix)
			}
		}
		for _, ns := range candidates {
			if !selected[ns] && match(p, ns) && !f.excluded(ns) {
				selected[ns] = true
			}
		}
	}
	var names []string
	for ns := range selected {
		names = append(names, ns)
	}
	sort.Strings(names)
	return NamespaceSet{Names: names}
}

// literalPrefix is what every name that pattern p matches starts with.
func literalPrefix(p string) string {
	if i := strings.IndexAny(p, `*?[\`); i >= 0 {
		return p[:i]
	}
	return p
}

// withPrefix is the run of sorted names that start with prefix.
func withPrefix(sorted []string, prefix string) []string {
	lo := sort.SearchStrings(sorted, prefix)
	hi := lo
	for hi < len(sorted) && strings.HasPrefix(sorted[hi], prefix) {
		hi++
	}
	return sorted[lo:hi]
}

// isPattern reports whether p may match anything but itself.
func isPattern(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// Claims are namespace sets recorded in order (the running backups, say, or those queued
// ahead). FirstOverlap answers what checking each recorded set in turn for a shared namespace
// would, with one map lookup per namespace of the set asked about instead of a walk over every
// recorded set. The zero value holds no set.
type Claims struct {
	count int
	// firstAll is 1 + the index of the first set that selects every namespace; 0 if none.
	firstAll int
	// owner maps a namespace to the index of the first recorded set that holds it.
	owner map[string]int
}

// Add records s after the sets already recorded and returns its index.
func (c *Claims) Add(s NamespaceSet) int {
	i := c.count
	c.count++
	if s.All {
		if c.firstAll == 0 {
			c.firstAll = i + 1
		}
		return i
	}
	if c.owner == nil {
		c.owner = map[string]int{}
	}
	for _, ns := range s.Names {
		if _, held := c.owner[ns]; !held {
			c.owner[ns] = i
		}
	}
	return i
}

// FirstOverlap returns the index of the first recorded set that overlaps s, and what they
// share (the first shared namespace, or "" when one of them selects every namespace). ok is
// false when none overlaps.
func (c *Claims) FirstOverlap(s NamespaceSet) (index int, shared string, ok bool) {
	if c.count == 0 {
		return 0, "", false
	}
	if s.All {
		return 0, "", true
	}
	index = c.count
	if c.firstAll > 0 {
		index = c.firstAll - 1
	}
	// Names are sorted, so the first namespace seen for the lowest owner is the first one
	// that owner shares with s (any namespace it holds has no earlier owner).
	for _, ns := range s.Names {
		if o, held := c.owner[ns]; held && o < index {
			index, shared = o, ns
		}
	}
	if index == c.count {
		return 0, "", false
	}
	if c.firstAll > 0 && index == c.firstAll-1 {
		shared = ""
	}
	return index, shared, true
}
