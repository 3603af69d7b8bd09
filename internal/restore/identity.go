package restore

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cairn-backup/cairn/internal/backup"
)

// An archive is untrusted input (DESIGN.md section 15): whoever can write the bucket can put
// any item at any path, with a commit marker that matches. The restore selects, maps and
// checks tenancy on an item by its path (resources/<resource>[.<group>]/namespaces/<ns>/<name>.json
// or .../cluster/<name>.json); VerifyIdentity makes sure the item is what its path says, so
// that what was decided on is what is written.

// VerifyIdentity checks that obj is the item its place in the archive (ref) says it is:
//   - its metadata.name is ref's name, and its metadata.namespace ref's namespace (none for a
//     cluster-scoped path);
//   - its apiVersion is of ref's group, with a version;
//   - its kind is the kind this cluster serves ref's resource as;
//   - the resource's scope in this cluster is the path's placement: a cluster-scoped resource
//     (a Namespace, a PersistentVolume) at a namespaced path, or a namespaced one at a cluster
//     path, is refused.
//
// served is what discovery says of ref's resource, nil when this cluster does not serve it
// (a custom resource whose CRD is in the backup, or a group discovery failed on). Then only
// the name, namespace and group can be checked, and the kind must merely be there: the
// restore writes such an item to the endpoint its path places it at (a namespaced path to
// /namespaces/<ns>/<resource>), and the API server refuses a scope or kind that does not
// match the resource it serves by then.
func VerifyIdentity(ref ItemRef, obj *unstructured.Unstructured, served *backup.Resource) error {
	if obj == nil {
		return fmt.Errorf("%s: the item is empty", ref)
	}
	md, ok := obj.Object["metadata"].(map[string]any)
	if !ok {
		return fmt.Errorf("%s: the item has no metadata object", ref)
	}
	if name, _ := md["name"].(string); name != ref.Name {
		return fmt.Errorf("%s: the item is named %q, not as its path in the archive says", ref, fmt.Sprint(md["name"]))
	}
	ns, found := md["namespace"]
	nsString, isString := ns.(string)
	switch {
	case found && ns != nil && !isString:
		return fmt.Errorf("%s: the item's namespace is not a string", ref)
	case nsString != ref.Namespace:
		return fmt.Errorf("%s: the item is in namespace %q, not as its path in the archive says", ref, nsString)
	}
	apiVersion, _ := obj.Object["apiVersion"].(string)
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || gv.Version == "" || gv.Group != ref.GR.Group {
		return fmt.Errorf("%s: the item's apiVersion %q is not of group %q, as its path in the archive says", ref, fmt.Sprint(obj.Object["apiVersion"]), ref.GR.Group)
	}
	kind, _ := obj.Object["kind"].(string)
	if kind == "" {
		return fmt.Errorf("%s: the item has no kind", ref)
	}
	if served == nil {
		return nil
	}
	if kind != served.Kind {
		return fmt.Errorf("%s: the item is a %s, but %s holds %s objects in this cluster", ref, kind, ref.GR, served.Kind)
	}
	switch {
	case served.Namespaced && ref.Namespace == "":
		return fmt.Errorf("%s: %s is namespaced in this cluster, but the item is at a cluster-scoped path", ref, ref.GR)
	case !served.Namespaced && ref.Namespace != "":
		return fmt.Errorf("%s: %s is cluster-scoped in this cluster, but the item is at a path in namespace %s", ref, ref.GR, ref.Namespace)
	}
	return nil
}
