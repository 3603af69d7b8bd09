package restore

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultPriorities is DESIGN.md section 9's order after CRDs: namespaces, storageclasses(.storage.k8s.io), volumesnapshotclasses/volumesnapshotcontents/volumesnapshots (.snapshot.storage.k8s.io), persistentvolumes, persistentvolumeclaims, RBAC (clusterroles, clusterrolebindings, roles, rolebindings), serviceaccounts, secrets, configmaps, limitranges, priorityclasses(.scheduling.k8s.io), pods, replicasets(.apps), endpoints, services — named "resource" for the core group or "resource.group".
//
// What others need comes first: the namespaces items go into, the volumes and claims pods
// mount, the roles bindings grant and the service accounts pods run as. Pods come before
// replicasets, and replicasets before the deployments among everything else, so that each
// owner adopts the items it selects instead of making new ones.
var DefaultPriorities = []string{
	"namespaces",
	"storageclasses.storage.k8s.io",
	"volumesnapshotclasses.snapshot.storage.k8s.io",
	"volumesnapshotcontents.snapshot.storage.k8s.io",
	"volumesnapshots.snapshot.storage.k8s.io",
	"persistentvolumes",
	"persistentvolumeclaims",
	"clusterroles.rbac.authorization.k8s.io",
	"clusterrolebindings.rbac.authorization.k8s.io",
	"roles.rbac.authorization.k8s.io",
	"rolebindings.rbac.authorization.k8s.io",
	"serviceaccounts",
	"secrets",
	"configmaps",
	"limitranges",
	"priorityclasses.scheduling.k8s.io",
	"pods",
	"replicasets.apps",
	"endpoints",
	"services",
}

// ParsePriorities parses --restore-resource-priorities ("a,b.group,..."): a clear error for an empty or malformed entry or a duplicate.
// An entry is a resource as the API serves it, lower case and plural, followed by its group
// unless it is in the core group. Spaces around entries are ignored.
func ParsePriorities(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("no resources given: list resources separated by commas, such as %q", "namespaces,persistentvolumes,replicasets.apps")
	}
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	seen := map[string]int{}
	for i, p := range parts {
		entry := strings.TrimSpace(p)
		if entry == "" {
			return nil, fmt.Errorf("entry %d is empty", i+1)
		}
		if err := checkPriorityEntry(entry); err != nil {
			return nil, fmt.Errorf("entry %d %q: %w", i+1, entry, err)
		}
		if first, dup := seen[entry]; dup {
			return nil, fmt.Errorf("entry %d %q repeats entry %d", i+1, entry, first)
		}
		seen[entry] = i + 1
		out = append(out, entry)
	}
	return out, nil
}

// checkPriorityEntry checks that entry is "resource" or "resource.group", as GroupResource's
// String writes it.
func checkPriorityEntry(entry string) error {
	resource, group, _ := strings.Cut(entry, ".")
	if errs := validation.IsDNS1123Label(resource); len(errs) > 0 {
		return fmt.Errorf("the resource must be a resource name such as configmaps: %s", strings.Join(errs, "; "))
	}
	if group == "" && strings.Contains(entry, ".") {
		return fmt.Errorf("the group after the dot is empty")
	}
	if group != "" {
		if errs := validation.IsDNS1123Subdomain(group); len(errs) > 0 {
			return fmt.Errorf("the group must be an API group such as apps: %s", strings.Join(errs, "; "))
		}
	}
	return nil
}

// Order splits the group/resources present in a backup into groups restored one after another: CRDs
// (customresourcedefinitions.apiextensions.k8s.io) alone first, then one group per priority entry present, in order,
// then everything else together as the last group (sorted, for determinism). Empty groups are left out.
// A priority entry naming CRDs is ignored (they are always first); a resource present twice
// is ordered once.
func Order(present []schema.GroupResource, priorities []string) [][]schema.GroupResource {
	remaining := map[schema.GroupResource]bool{}
	for _, gr := range present {
		remaining[gr] = true
	}
	var groups [][]schema.GroupResource
	take := func(gr schema.GroupResource) {
		if remaining[gr] {
			groups = append(groups, []schema.GroupResource{gr})
			delete(remaining, gr)
		}
	}
	take(crdsGR)
	for _, p := range priorities {
		take(schema.ParseGroupResource(p))
	}
	if len(remaining) > 0 {
		rest := make([]schema.GroupResource, 0, len(remaining))
		for gr := range remaining {
			rest = append(rest, gr)
		}
		sort.Slice(rest, func(i, j int) bool {
			if rest[i].Group != rest[j].Group {
				return rest[i].Group < rest[j].Group
			}
			return rest[i].Resource < rest[j].Resource
		})
		groups = append(groups, rest)
	}
	return groups
}
