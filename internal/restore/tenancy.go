package restore

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

// Tenancy of a team restore (a Restore in a namespace other than the operator's), decided on
// each item's final identity: after namespaceMapping, after the restore item actions, right
// before it is written (DESIGN.md section 15). The archive is untrusted input, so nothing the
// archive says is taken for the cluster's own record.

// TeamMayWrite decides whether a restore in the team namespace own may write an object of gr
// named name to namespace target ("" for a cluster-scoped write), whose own metadata says
// objNamespace: only into own, never a cluster-scoped object, and only an object that says it
// is where it is written.
func TeamMayWrite(own string, gr schema.GroupResource, target, objNamespace, name string) error {
	switch {
	case target == "":
		return fmt.Errorf("%s: a restore in namespace %s never creates or changes a cluster-scoped object", describe(gr, "", name), own)
	case target != own:
		return fmt.Errorf("%s: a restore in namespace %s may only restore into its own namespace", describe(gr, target, name), own)
	case objNamespace != target:
		return fmt.Errorf("%s: the object says it is in namespace %q, not where it would be written", describe(gr, target, name), objNamespace)
	}
	return nil
}

// snapshotRecord is what this cluster itself knows of the CSI snapshots of one backup: the
// snapshot handles a team restore may make a VolumeSnapshotContent for. It is read from the
// cluster, never from storage: the VolumeSnapshots the operator created for the backup (in the
// backup's namespace, labelled with its Backup object's UID, backup.BackupUIDLabel), each with
// the VolumeSnapshotContent bound to it, which must point back at it. A tenant can label a
// VolumeSnapshot of theirs, but cannot make another team's content point at it: a
// VolumeSnapshotContent is cluster-scoped, and only the snapshotter and administrators write
// them. So the handles are those of snapshots taken in the backup's own namespace.
type snapshotRecord struct {
	backup string
	// syncedFrom is the location a backup known only from storage was synced from: this
	// cluster did not take its snapshots, and holds no record of them.
	syncedFrom string
	// operatorNamespace is where an administrator's restore can restore such a backup.
	operatorNamespace string
	handles           map[string]bool
}

// allows decides whether a team restore may make a VolumeSnapshotContent for handle.
func (r snapshotRecord) allows(handle string) error {
	switch {
	case r.syncedFrom != "":
		return fmt.Errorf("backup %s is known only from storage (synced from location %s): this cluster has no record of its CSI snapshots, "+
			"and a team restore restores a volume only from a snapshot handle this cluster's own record of the backup holds; "+
			"its volumes can be restored by a Restore in %s", r.backup, r.syncedFrom, r.operatorNamespace)
	case !r.handles[handle]:
		return fmt.Errorf("snapshot handle %q is not one this cluster took for backup %s (no VolumeSnapshot it made for the backup is bound to it): "+
			"a team restore restores a volume only from a snapshot handle this cluster's own record of the backup holds", handle, r.backup)
	}
	return nil
}

var backupsGVR = cairnv1.GroupVersion.WithResource("backups")

// readSnapshotRecord reads this cluster's record of the CSI snapshots of backup namespace/name
// with the operator's own client.
func readSnapshotRecord(ctx context.Context, dyn dynamic.Interface, namespace, name, operatorNamespace string) (snapshotRecord, error) {
	rec := snapshotRecord{backup: namespace + "/" + name, operatorNamespace: operatorNamespace, handles: map[string]bool{}}
	b, err := dyn.Resource(backupsGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return rec, fmt.Errorf("reading backup %s for its snapshots: %w", rec.backup, err)
	}
	if from := b.GetAnnotations()[cairnv1.SyncedFromAnnotation]; from != "" {
		rec.syncedFrom = from
		return rec, nil
	}
	vss, err := dyn.Resource(volumeSnapshotsGVR).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: backup.BackupUIDLabel + "=" + string(b.GetUID())})
	if apierrors.IsNotFound(err) {
		return rec, nil // no snapshot CRDs: no snapshots
	}
	if err != nil {
		return rec, fmt.Errorf("listing the VolumeSnapshots of backup %s: %w", rec.backup, err)
	}
	for _, vs := range vss.Items {
		content, _, _ := unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
		if content == "" {
			continue
		}
		vsc, err := dyn.Resource(volumeSnapshotContentsGVR).Get(ctx, content, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return rec, fmt.Errorf("reading VolumeSnapshotContent %s: %w", content, err)
		}
		if handle := boundHandle(&vs, vsc); handle != "" {
			rec.handles[handle] = true
		}
	}
	return rec, nil
}

// boundHandle is the snapshot handle of vsc when it is bound to vs both ways ("" otherwise).
func boundHandle(vs, vsc *unstructured.Unstructured) string {
	ref, _, _ := unstructured.NestedStringMap(vsc.Object, "spec", "volumeSnapshotRef")
	if ref["namespace"] != vs.GetNamespace() || ref["name"] != vs.GetName() || (ref["uid"] != "" && ref["uid"] != string(vs.GetUID())) {
		return ""
	}
	handle, _, _ := unstructured.NestedString(vsc.Object, "status", "snapshotHandle")
	return handle
}

// snapshotRecordCache reads a run's snapshotRecord once (a failed read is tried again by the
// next claim that needs it).
type snapshotRecordCache struct {
	mu     sync.Mutex
	record *snapshotRecord
}

// snapshotAllowed answers Facts.SnapshotAllowed: a restore in the operator's namespace acts
// with the operator's rights and may use any handle its backup holds; a team restore only one
// of this cluster's own record of the backup.
func (ru *run) snapshotAllowed(ctx context.Context, handle string) error {
	if !ru.team {
		return nil
	}
	c := &ru.snapshotRecords
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.record == nil {
		rec, err := readSnapshotRecord(ctx, ru.Dynamic, ru.restore.Namespace, ru.restore.Status.BackupName, ru.req.OperatorNamespace)
		if err != nil {
			return err
		}
		c.record = &rec
	}
	return c.record.allows(handle)
}

// verifyItem checks an item of the archive before anything is decided on its contents: its
// identity against its path (VerifyIdentity, with what discovery says of its resource).
func (ru *run) verifyItem(gr schema.GroupResource, item SpooledItem, obj *unstructured.Unstructured) error {
	var served *backup.Resource
	if res, ok := ru.resources[gr]; ok && res.Kind != "" {
		served = &res
	}
	return VerifyIdentity(ItemRef{GR: gr, Namespace: item.Namespace, Name: item.Name}, obj, served)
}

// teamMayWrite is TeamMayWrite for a team restore, on the item about to be written; nil for a
// restore in the operator's namespace.
func (ru *run) teamMayWrite(gr schema.GroupResource, target string, desired *unstructured.Unstructured) error {
	if !ru.team {
		return nil
	}
	return TeamMayWrite(ru.restore.Namespace, gr, target, desired.GetNamespace(), desired.GetName())
}
