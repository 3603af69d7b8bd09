// Package podvolume is the backup side of volume data (DESIGN.md section 16) as the backup
// sees it: the BackupItemAction that starts one PodVolumeBackup per copied pod volume and
// follows it as an async operation, the record of each volume snapshot a backup keeps in its
// operations file (so a second cluster knows them), and the repository passwords. The node
// agent, which does the copying, is internal/controller/nodeagent.
package podvolume

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

// ActionName is the name of the action in a backup's recorded operations.
const ActionName = "cairn.dev/pod-volume-backup"

// BackupAnnotation on a PodVolumeBackup is "<namespace>/<name>" of its backup, so a change of
// the copy wakes the backup's operations (labels cannot hold a '/').
const BackupAnnotation = "cairn.dev/backup"

// Snapshot is what a backup remembers of one copied volume: its operation's Result, kept in
// the backup's operations file. A restore finds the data of a pod's volume by it.
type Snapshot struct {
	Pod                      cairnv1.PodReference        `json:"pod"`
	Volume                   string                      `json:"volume"`
	PersistentVolumeClaim    string                      `json:"persistentVolumeClaim,omitempty"`
	PersistentVolumeClaimUID types.UID                   `json:"persistentVolumeClaimUID,omitempty"`
	Repository               cairnv1.RepositoryReference `json:"repository"`
	SnapshotID               string                      `json:"snapshotID"`
	// Source and SourceTags say what the snapshot must be of for a restore to write it
	// (PodVolumeRestoreSpec.SnapshotSource and SnapshotTags): for the snapshots of Velero's
	// file-system backups, from Velero's own record; for Cairn's, the restore sets them from
	// the volume (Tags), never from a record a bucket writer could change.
	Source     string            `json:"source,omitempty"`
	SourceTags map[string]string `json:"sourceTags,omitempty"`
	Bytes      int64             `json:"bytes"`
	Files      int64             `json:"files"`
}

// SnapshotOf is the record of a completed PodVolumeBackup.
func SnapshotOf(pvb *cairnv1.PodVolumeBackup) Snapshot {
	return Snapshot{
		Pod: pvb.Spec.Pod, Volume: pvb.Spec.Volume,
		PersistentVolumeClaim: pvb.Spec.PersistentVolumeClaim, PersistentVolumeClaimUID: pvb.Spec.PersistentVolumeClaimUID,
		Repository: pvb.Spec.Repository, SnapshotID: pvb.Status.SnapshotID,
		Bytes: pvb.Status.BytesTotal, Files: pvb.Status.Files,
	}
}

// Snapshots returns the volume snapshots a backup's operations recorded: those of completed
// copies. A record that cannot be decoded is an error, never skipped: deleting a backup must
// not forget a snapshot it holds.
func Snapshots(ops []backup.Operation) ([]Snapshot, error) {
	var out []Snapshot
	for _, op := range ops {
		if op.Action != ActionName || op.Phase != backup.OperationCompleted || len(op.Result) == 0 {
			continue
		}
		var s Snapshot
		if err := json.Unmarshal(op.Result, &s); err != nil {
			return nil, fmt.Errorf("the record of volume copy %s cannot be read: %w", op.OperationID, err)
		}
		if s.SnapshotID == "" || s.Repository.StorageLocation == "" || s.Repository.Namespace == "" {
			return nil, fmt.Errorf("the record of volume copy %s names no snapshot or repository", op.OperationID)
		}
		out = append(out, s)
	}
	return out, nil
}

// Tags are the tags of a volume's snapshots, which make the latest earlier snapshot of the
// same volume its parent: a claim's UID (whichever pod mounts it), or, for an emptyDir, the
// pod's namespace and name and the volume's (a replacement pod of the same name continues
// from its predecessor's data).
func Tags(pod cairnv1.PodReference, volume string, claimUID types.UID) map[string]string {
	if claimUID != "" {
		return map[string]string{"pvc-uid": string(claimUID)}
	}
	return map[string]string{"pod-namespace": pod.Namespace, "pod": pod.Name, "volume": volume}
}

// Name is the name of the PodVolumeBackup of a backup's volume: derived from the backup's UID
// and the volume's identity (the claim's UID, or the pod's UID and the volume name), so the
// same claim mounted by several pods is copied once (the second create finds the first) and a
// retried Execute creates nothing new.
func Name(backupName string, backupUID types.UID, pod cairnv1.PodReference, volume string, claimUID types.UID) string {
	identity := string(backupUID) + "/" + string(claimUID)
	if claimUID == "" {
		identity = string(backupUID) + "/" + string(pod.UID) + "/" + volume
	}
	sum := sha256.Sum256([]byte(identity))
	prefix := backupName
	if len(prefix) > 40 {
		prefix = strings.TrimRight(prefix[:40], ".-") // a label may not end in either
	}
	return prefix + "-" + hex.EncodeToString(sum[:])[:12]
}

// BackupOf is the backup a PodVolumeBackup copies for, from its BackupAnnotation.
func BackupOf(obj client.Object) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(obj.GetAnnotations()[BackupAnnotation], "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}
