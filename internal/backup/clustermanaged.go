package backup

import "k8s.io/apimachinery/pkg/runtime/schema"

// ClusterManaged is a kind of object that the cluster makes and keeps itself. A restore never
// creates one: the cluster already has its own, or makes it again from other objects, and
// removes or overwrites a copy. Those that are worth reading in a backup (what the cluster
// looked like) are still backed up; the others are left out of backups too.
type ClusterManaged struct {
	Resource schema.GroupResource
	// BackedUp says that backups keep its objects (to read); a restore still skips them.
	BackedUp bool
	// Why is the reason, as the restore's log says it of a skipped item.
	Why string
}

// ClusterManagedResources are the cluster-managed kinds, in the order docs/restore.md lists
// them (with what Velero does of each).
var ClusterManagedResources = []ClusterManaged{
	{Resource: schema.GroupResource{Resource: "nodes"}, BackedUp: true,
		Why: "nodes are not restored: they belong to the cluster they ran in, where each kubelet registers its own"},
	{Resource: schema.GroupResource{Resource: "events"}, BackedUp: true,
		Why: "events are not restored: they are a record of what happened in the cluster they were made in"},
	// The same objects as core events, served a second time by another group.
	{Resource: schema.GroupResource{Group: "events.k8s.io", Resource: "events"},
		Why: "events are not restored: they are a record of what happened in the cluster they were made in"},
	// Served with get and list only (so the verb rule leaves it out already); listed here so
	// that a backup of an older Cairn that holds its objects restores without an error.
	{Resource: schema.GroupResource{Resource: "componentstatuses"},
		Why: "component statuses are not restored: the API server computes them at each read and cannot create one"},
	{Resource: schema.GroupResource{Group: "networking.k8s.io", Resource: "ipaddresses"},
		Why: "IP addresses are not restored: the API server allocates one for each Service's cluster IP and removes those no Service holds"},
	{Resource: schema.GroupResource{Group: "storage.k8s.io", Resource: "csinodes"}, BackedUp: true,
		Why: "CSI nodes are not restored: the kubelet of each node makes its own"},
	{Resource: schema.GroupResource{Group: "storage.k8s.io", Resource: "volumeattachments"}, BackedUp: true,
		Why: "volume attachments are not restored: the attach/detach controller makes them for the pods it places on nodes"},
}

// clusterManaged finds gr in ClusterManagedResources.
func clusterManaged(gr schema.GroupResource) (ClusterManaged, bool) {
	for _, m := range ClusterManagedResources {
		if m.Resource == gr {
			return m, true
		}
	}
	return ClusterManaged{}, false
}

// NotRestoredReason says why items of gr are never restored because the cluster manages them,
// or "" when it does not.
func NotRestoredReason(gr schema.GroupResource) string {
	m, _ := clusterManaged(gr)
	return m.Why
}
