package backup

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/selection"
)

// ItemSource is how an item came to a backup; the label selectors apply only to listed items.
type ItemSource int

const (
	// Listed items were found by a LIST of a selected resource.
	Listed ItemSource = iota
	// Additional items were named by an action for an item being backed up (a pod's PVCs, a
	// PVC's PV, a custom resource's CRD).
	Additional
	// PostOperation items were named by an async operation once it completed (a
	// VolumeSnapshot and its content).
	PostOperation
)

// clusterScope is what a backup holds of cluster-scoped resources.
type clusterScope int

const (
	// clusterNeeded: only the cluster-scoped items that selected items need (includeClusterResources unset).
	clusterNeeded clusterScope = iota
	// clusterAll: every cluster-scoped item (includeClusterResources: true).
	clusterAll
	// clusterNone: none (includeClusterResources: false, and every team's backup).
	clusterNone
)

// Selection decides which items a backup holds. It is the one place that decides, for items
// found by LIST, additional items that actions name, and post-operation items alike: a
// team's backup never holds a cluster-scoped item (DESIGN.md section 2), however it reached it.
type Selection struct {
	namespaces selection.NamespaceFilter
	// resolved is namespaces resolved against the cluster's namespaces when the backup started.
	resolved  selection.NamespaceSet
	resources ResourceFilter
	// selectors are labelSelector, or the orLabelSelectors (any one matching); none means every item.
	selectors []labels.Selector
	cluster   clusterScope
}

// NewSelection builds a backup's selection from its spec, the operator's namespace (tenancy),
// the cluster's resources and its namespaces. The warnings name included or excluded resources
// that the cluster does not serve.
func NewSelection(b *cairnv1.Backup, operatorNamespace string, resources []Resource, clusterNamespaces []string) (Selection, []string, error) {
	return NewFilterSelection(b.Namespace, b.Spec.Filters(), operatorNamespace, resources, clusterNamespaces)
}

// NewFilterSelection builds the selection of the item filters f of a Backup or a Restore in
// namespace own: the one place where both kinds' filters get their meaning. Outside the
// operator's namespace it selects only own's items, and never a cluster-scoped one.
func NewFilterSelection(own string, f cairnv1.ItemFilters, operatorNamespace string, resources []Resource, clusterNamespaces []string) (Selection, []string, error) {
	s := Selection{namespaces: selection.For(own, f.IncludedNamespaces, f.ExcludedNamespaces, operatorNamespace)}
	s.resolved = s.namespaces.Resolve(clusterNamespaces)
	var warnings []string
	s.resources, warnings = NewResourceFilter(f.IncludedResources, f.ExcludedResources, resources)
	switch {
	case own != operatorNamespace:
		s.cluster = clusterNone // tenancy: a team never reaches cluster-scoped items
	case f.IncludeClusterResources == nil:
		s.cluster = clusterNeeded
	case *f.IncludeClusterResources:
		s.cluster = clusterAll
	default:
		s.cluster = clusterNone
	}
	selectors := f.OrLabelSelectors
	if f.LabelSelector != nil {
		selectors = []*metav1.LabelSelector{f.LabelSelector}
	}
	for _, ls := range selectors {
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			return Selection{}, warnings, fmt.Errorf("label selector: %w", err)
		}
		s.selectors = append(s.selectors, sel)
	}
	return s, warnings, nil
}

// Includes reports whether the backup holds the item name of res in namespace ("" for a
// cluster-scoped item) with these labels, reached through src.
func (s Selection) Includes(res Resource, namespace, name string, itemLabels map[string]string, src ItemSource) bool {
	if itemLabels[cairnv1.ExcludeFromBackupLabel] == "true" {
		return false
	}
	gr := res.GroupResource()
	if !s.resources.Includes(gr) {
		return false
	}
	switch {
	case res.Namespaced:
		if !s.namespaces.Matches(namespace) {
			return false
		}
	case gr == nsGR:
		if !s.IncludesNamespaceObject(name) {
			return false
		}
	case !s.includesClusterScoped(src):
		return false
	}
	if src != Listed || len(s.selectors) == 0 {
		return true
	}
	set := labels.Set(itemLabels)
	for _, sel := range s.selectors {
		if sel.Matches(set) {
			return true
		}
	}
	return false
}

// IncludesNamespaceObject reports whether the backup holds the Namespace object named ns
// (cluster-scoped: never in a team's backup, nor with includeClusterResources: false).
func (s Selection) IncludesNamespaceObject(ns string) bool {
	return s.cluster != clusterNone && s.namespaces.Matches(ns)
}

// includesClusterScoped decides for a cluster-scoped item other than a Namespace by how it was
// reached: with includeClusterResources unset, only the items that selected items need
// (additional and post-operation items) are held.
func (s Selection) includesClusterScoped(src ItemSource) bool {
	switch s.cluster {
	case clusterNone:
		return false
	case clusterAll:
		return true
	}
	return src != Listed
}

// ListTask is one collection to LIST: a resource in one namespace, or everywhere ("").
type ListTask struct {
	Resource  Resource
	Namespace string
}

// ListTasks says which LISTs find the backup's items: every selected namespaced resource in
// each selected namespace (or once across all of them when every namespace is selected), the
// Namespace objects when the backup may hold any, and every cluster-scoped resource only with
// includeClusterResources: true.
func (s Selection) ListTasks(resources []Resource) []ListTask {
	var tasks []ListTask
	for _, res := range resources {
		gr := res.GroupResource()
		if !s.resources.Includes(gr) {
			continue
		}
		switch {
		case gr == nsGR:
			if s.cluster != clusterNone {
				tasks = append(tasks, ListTask{Resource: res})
			}
		case !res.Namespaced:
			if s.cluster == clusterAll {
				tasks = append(tasks, ListTask{Resource: res})
			}
		case s.resolved.All:
			tasks = append(tasks, ListTask{Resource: res})
		default:
			for _, ns := range s.resolved.Names {
				tasks = append(tasks, ListTask{Resource: res, Namespace: ns})
			}
		}
	}
	return tasks
}

// ServerSideSelector is the label selector a LIST can send to the API server: the one
// labelSelector (or a single orLabelSelector); "" when there is none or several, which are
// matched here.
func (s Selection) ServerSideSelector() string {
	if len(s.selectors) == 1 {
		return s.selectors[0].String()
	}
	return ""
}
