package restore

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

// The items of a backup come from its archive: whoever can write the bucket can write any JSON
// there, with a matching checksum. Everything in this file and in the built-in actions reads
// items with the unstructured accessors, which report a field of an unexpected type as absent
// instead of panicking, and changes an item only where it has the shape the change expects.
// What is malformed is left as it is, for the API server to reject with its own message.

// ItemRef names one backed-up item: its group/resource (from the archive path), backed-up namespace ("" cluster-scoped) and name.
type ItemRef struct {
	GR              schema.GroupResource
	Namespace, Name string
}

func (r ItemRef) String() string {
	if r.Namespace == "" {
		return r.GR.String() + "/" + r.Name
	}
	return r.GR.String() + "/" + r.Namespace + "/" + r.Name
}

// Options are what preparing an item needs from its restore.
type Options struct {
	// BackupName and RestoreName are the values (through backup.LabelValue) of the labels
	// cairn.dev/backup-name and cairn.dev/restore-name on every restored item.
	BackupName, RestoreName string
	// NamespaceMapping maps backed-up namespaces to the namespaces they are restored into; a
	// namespace that is not a key is restored into itself.
	NamespaceMapping  map[string]string
	PreserveNodePorts bool
	RestorePVs        bool
	// KeepStatus says that restoreStatus selected this item's resource: its status is kept, to
	// be written after the item is created.
	KeepStatus bool
}

// MapNamespace is the namespace the items of the backed-up namespace ns are restored into
// ("" stays "": cluster-scoped items have no namespace).
func (o Options) MapNamespace(ns string) string {
	if ns == "" {
		return ""
	}
	if to := o.NamespaceMapping[ns]; to != "" {
		return to
	}
	return ns
}

var (
	podsGR        = schema.GroupResource{Resource: "pods"}
	jobsGR        = schema.GroupResource{Group: "batch", Resource: "jobs"}
	namespacesGR  = schema.GroupResource{Resource: "namespaces"}
	crdsGR        = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
	namespaceKind = schema.GroupKind{Kind: "Namespace"}
)

// mirrorPodAnnotation marks a pod that the kubelet made for a static pod: the kubelet owns it
// and makes it again on its node; the API server refuses to create one.
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// namespaceNameLabel is the label the API server sets on every Namespace to its name.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// SkipReason says why an item is never restored ("" = restore it): the cluster-managed kinds
// (backup.ClusterManagedResources: nodes, events, component statuses, IP addresses, ...);
// every cairn.dev kind; pods whose status.phase is Succeeded or Failed; jobs that finished (Complete or Failed
// condition True, or completionTime set); mirror pods (annotation kubernetes.io/config.mirror).
//
// The cluster makes its cluster-managed objects itself, and removes or overwrites a copy;
// Cairn's own objects are restored by Cairn's sync, never as items. A finished pod or job
// would run its work again if it were created.
func SkipReason(gr schema.GroupResource, obj *unstructured.Unstructured) string {
	if reason := backup.NotRestoredReason(gr); reason != "" {
		return reason
	}
	switch {
	case gr.Group == cairnv1.GroupVersion.Group:
		return "Cairn's own objects are not restored as items"
	case gr == volumeSnapshotsGR || gr == volumeSnapshotContentsGR:
		return "a backed-up snapshot is restored by the CSI restore action, with the claim made from it"
	}
	if obj == nil {
		return ""
	}
	switch gr {
	case podsGR:
		if hasKey(obj.Object, mirrorPodAnnotation, "metadata", "annotations") {
			return "mirror pods are made by the kubelet of their node, not restored"
		}
		switch phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase"); phase {
		case "Succeeded", "Failed":
			return fmt.Sprintf("the pod had finished (phase %s)", phase)
		}
	case jobsGR:
		if reason := jobFinished(obj); reason != "" {
			return "the job had finished (" + reason + ")"
		}
	}
	return ""
}

// hasKey reports whether the map at fields holds key, whatever the key's value (GetAnnotations
// returns none at all when one of them is not a string).
func hasKey(obj map[string]any, key string, fields ...string) bool {
	m, ok := nestedMap(obj, fields...)
	if !ok {
		return false
	}
	_, ok = m[key]
	return ok
}

// jobFinished says how a job finished, or "" when it had not. Besides the Complete and Failed
// conditions, SuccessCriteriaMet and FailureTarget say the job is finishing: its pods are being
// ended, and the job controller will add Complete or Failed.
func jobFinished(obj *unstructured.Unstructured) string {
	if ct, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "status", "completionTime"); found && ct != nil && ct != "" {
		return "completionTime is set"
	}
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		cm, ok := c.(map[string]any)
		if !ok {
			continue
		}
		t, _, _ := unstructured.NestedString(cm, "type")
		status, _, _ := unstructured.NestedString(cm, "status")
		if status != "True" {
			continue
		}
		switch t {
		case "Complete", "Failed", "SuccessCriteriaMet", "FailureTarget":
			return "condition " + t
		}
	}
	return ""
}

// serverSetMetadata are the metadata fields the API server sets on an object it stores: an
// object created from a backup gets its own. generateName goes too: the name is set, and a
// restored object keeps it.
var serverSetMetadata = []string{
	"uid", "resourceVersion", "generation", "selfLink", "creationTimestamp",
	"deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "ownerReferences", "generateName",
}

// Prepare returns a copy of the backed-up obj ready to create: metadata reset as Velero does (uid, resourceVersion,
// generation, selfLink, creationTimestamp, deletionTimestamp, deletionGracePeriodSeconds, ownerReferences,
// managedFields and generateName removed), status removed unless opts.KeepStatus, namespace mapped (and the
// name of a Namespace), the two labels added. obj is not modified; a nil obj gives nil.
//
// What is kept, and why:
//   - name, labels and annotations: they are the object (selectors, configuration).
//   - finalizers: each names a controller that must clean up before the object goes; a
//     restored object that is deleted still waits for it, as it did where it was backed up.
//   - ownerReferences are removed: they name owners by uid, which the restored owners do not
//     have. Restored owners (a ReplicaSet of its pods, a Deployment of its ReplicaSets) adopt
//     the items their selectors match, which is why pods are restored before replicasets.
//   - managedFields are removed: they record the writes made where the object was backed up.
//     Velero writes them back with a second request per item; Cairn creates each item with
//     one request, and the API server records that create as the object's one write.
func Prepare(obj *unstructured.Unstructured, opts Options) *unstructured.Unstructured {
	if obj == nil {
		return nil
	}
	out := obj.DeepCopy()
	if out.Object == nil {
		out.Object = map[string]any{}
	}
	if !opts.KeepStatus {
		delete(out.Object, "status")
	}
	md, ok := out.Object["metadata"].(map[string]any)
	if !ok {
		// No metadata, or metadata that is not an object: nothing to reset, and nothing the
		// API server would create.
		return out
	}
	for _, f := range serverSetMetadata {
		delete(md, f)
	}
	if ns, ok := md["namespace"].(string); ok && ns != "" {
		md["namespace"] = opts.MapNamespace(ns)
	}
	if out.GroupVersionKind().GroupKind() == namespaceKind {
		if name, ok := md["name"].(string); ok && name != "" {
			to := opts.MapNamespace(name)
			md["name"] = to
			if labels, ok := md["labels"].(map[string]any); ok {
				if _, set := labels[namespaceNameLabel]; set {
					labels[namespaceNameLabel] = to
				}
			}
		}
	}
	addLabels(md, map[string]string{
		cairnv1.BackupNameLabel:  backup.LabelValue(opts.BackupName),
		cairnv1.RestoreNameLabel: backup.LabelValue(opts.RestoreName),
	})
	return out
}

// addLabels sets labels in the metadata md, keeping the labels that are there. Labels that
// are not an object are left alone (the API server rejects the item).
func addLabels(md map[string]any, add map[string]string) {
	labels, found := md["labels"]
	if found && labels != nil {
		if _, ok := labels.(map[string]any); !ok {
			return
		}
	}
	m, _ := labels.(map[string]any)
	if m == nil {
		m = map[string]any{}
		md["labels"] = m
	}
	for k, v := range add {
		m[k] = v
	}
}

// nestedMap is the map at fields, or false when any of them is missing or not a map.
func nestedMap(obj map[string]any, fields ...string) (map[string]any, bool) {
	m := obj
	for _, f := range fields {
		next, ok := m[f].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	return m, true
}
