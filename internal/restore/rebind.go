package restore

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// ReleasedToItsClaim reports whether existing is a Released PersistentVolume whose claimRef
// names the claim that desired (the same PV from the backup, prepared) is restored for: the
// claim it was bound to was deleted and the volume kept its data (Retain), as after a
// namespace is deleted and restored. Freeing its claimRef (RebindPatch) lets the restored
// claim bind to it again, instead of being provisioned a new, empty volume.
func ReleasedToItsClaim(existing, desired *unstructured.Unstructured) bool {
	if existing == nil || desired == nil {
		return false
	}
	if phase, _, _ := unstructured.NestedString(existing.Object, "status", "phase"); phase != "Released" {
		return false
	}
	uid, _, _ := unstructured.NestedString(existing.Object, "spec", "claimRef", "uid")
	ns, _, _ := unstructured.NestedString(existing.Object, "spec", "claimRef", "namespace")
	name, _, _ := unstructured.NestedString(existing.Object, "spec", "claimRef", "name")
	wantNS, _, _ := unstructured.NestedString(desired.Object, "spec", "claimRef", "namespace")
	wantName, _, _ := unstructured.NestedString(desired.Object, "spec", "claimRef", "name")
	return uid != "" && ns != "" && name != "" && ns == wantNS && name == wantName
}

// RebindPatch is the merge patch that frees a Released PV for its restored claim: the claim
// reference keeps the claim's namespace and name and loses the deleted claim's uid.
var RebindPatch = []byte(`{"spec":{"claimRef":{"uid":null,"resourceVersion":null}}}`)
