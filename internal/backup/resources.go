// Package backup turns one backup's spec into an archive: it discovers the cluster's
// resources, selects items with Velero's filter semantics, groups related items into
// ItemBlocks, runs them through BackupItemActions on the backup's own worker pool, and streams
// them into one archive in the backup's storage location (DESIGN.md section 4).
package backup

import (
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resource is one listable resource type at its preferred version.
type Resource struct {
	schema.GroupVersionResource
	Kind       string
	Singular   string
	ShortNames []string
	Namespaced bool
}

// ResourcesFromDiscovery turns discovery's preferred resource lists into the Resources that
// backups take and restores create: only top-level (no subresource) types that Backable
// accepts.
func ResourcesFromDiscovery(lists []*metav1.APIResourceList) []Resource {
	var out []Resource
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !Backable(gv.WithResource(r.Name).GroupResource(), r.Verbs) {
				continue
			}
			out = append(out, Resource{
				GroupVersionResource: gv.WithResource(r.Name),
				Kind:                 r.Kind,
				Singular:             r.SingularName,
				ShortNames:           r.ShortNames,
				Namespaced:           r.Namespaced,
			})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].Resource < out[j].Resource
	})
	return out
}

// RequiredVerbs are the verbs a resource must be served with for backups to take it: list and
// get to read its objects, create for a restore to make them again. What cannot be created
// (componentstatuses, the review kinds, bindings) would only ever fail a restore. Delete,
// patch and update are not required: a restore never deletes, and patches only objects that
// exist already, with existingResourcePolicy update (a refused patch is a warning).
var RequiredVerbs = []string{"list", "get", "create"}

// Backable is the selection rule: a resource is backed up when discovery serves it with every
// one of RequiredVerbs and it is not a cluster-managed kind that backups leave out
// (ClusterManagedResources whose BackedUp is false).
func Backable(gr schema.GroupResource, verbs []string) bool {
	for _, v := range RequiredVerbs {
		if !hasVerb(verbs, v) {
			return false
		}
	}
	m, managed := clusterManaged(gr)
	return !managed || m.BackedUp
}

func hasVerb(verbs []string, v string) bool {
	for _, x := range verbs {
		if x == v {
			return true
		}
	}
	return false
}

// ResourceFilter is includedResources/excludedResources resolved against the cluster's
// resources.
type ResourceFilter struct {
	all      bool
	included map[schema.GroupResource]bool
	excluded map[schema.GroupResource]bool
}

// NewResourceFilter resolves names (plural, singular, short name or kind, optionally
// `.group`) against resources. Names that match nothing are returned as warnings.
func NewResourceFilter(included, excluded []string, resources []Resource) (ResourceFilter, []string) {
	f := ResourceFilter{all: len(included) == 0, included: map[schema.GroupResource]bool{}, excluded: map[schema.GroupResource]bool{}}
	var warnings []string
	for _, name := range included {
		if name == "*" {
			f.all = true
			continue
		}
		grs := resolveResource(name, resources)
		if len(grs) == 0 {
			warnings = append(warnings, fmt.Sprintf("included resource %q is not served by this cluster", name))
		}
		for _, gr := range grs {
			f.included[gr] = true
		}
	}
	for _, name := range excluded {
		grs := resolveResource(name, resources)
		if len(grs) == 0 {
			warnings = append(warnings, fmt.Sprintf("excluded resource %q is not served by this cluster", name))
		}
		for _, gr := range grs {
			f.excluded[gr] = true
		}
	}
	return f, warnings
}

// Includes reports whether items of gr are selected.
func (f ResourceFilter) Includes(gr schema.GroupResource) bool {
	if f.excluded[gr] {
		return false
	}
	return f.all || f.included[gr]
}

// resolveResource finds the resources a name means. Without a group, the core group wins
// when it has a match (as kubectl does); otherwise every group's match counts.
func resolveResource(name string, resources []Resource) []schema.GroupResource {
	base, group, hasGroup := strings.Cut(strings.ToLower(name), ".")
	var matches []schema.GroupResource
	for _, r := range resources {
		if hasGroup && r.Group != group {
			continue
		}
		if base == r.Resource || base == r.Singular || base == strings.ToLower(r.Kind) || contains(r.ShortNames, base) {
			matches = append(matches, r.GroupResource())
		}
	}
	if !hasGroup {
		for _, m := range matches {
			if m.Group == "" {
				return []schema.GroupResource{m}
			}
		}
	}
	return matches
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
