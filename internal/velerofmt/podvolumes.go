package velerofmt

import (
	"io"
	"slices"
	"strings"

	"github.com/cairn-backup/cairn/internal/storage"
)

// PodVolumeBackupsSuffix ends the name of the file in which Velero records a backup's
// PodVolumeBackups (its file-system backups of pod volumes): <name>-podvolumebackups.json.gz.
const PodVolumeBackupsSuffix = "-podvolumebackups.json.gz"

// PodVolumeBackup is the part of a Velero PodVolumeBackup (velero.io/v1) Cairn reads: which
// volume of which pod Velero copied, with which uploader, into which snapshot.
type PodVolumeBackup struct {
	Spec struct {
		Pod struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"pod"`
		Volume       string `json:"volume"`
		UploaderType string `json:"uploaderType,omitempty"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase,omitempty"`
		SnapshotID string `json:"snapshotID,omitempty"`
	} `json:"status"`
}

// ReadPodVolumeBackups decodes a backup's <name>-podvolumebackups.json.gz (key names it in
// errors), its decompressed size capped as every side file's.
func ReadPodVolumeBackups(r io.Reader, key string) ([]PodVolumeBackup, error) {
	var pvbs []PodVolumeBackup
	if err := storage.DecodeGzipJSON(r, key, 0, &pvbs); err != nil {
		return nil, err
	}
	return pvbs, nil
}

// UploaderKopia is the uploader of Velero's kopia file-system backups; restic is the other
// (Velero's default before 1.10, when PodVolumeBackups named no uploader).
const UploaderKopia = "kopia"

// Uploader is the uploader that copied the volume: kopia or restic.
func (p PodVolumeBackup) Uploader() string {
	if p.Spec.UploaderType == "" {
		return "restic"
	}
	return p.Spec.UploaderType
}

// CopiedVolumes are the PodVolumeBackups of the pod namespace/name as backed up whose volume
// Velero's file-system backup copied (a completed PodVolumeBackup with a snapshot), sorted by
// volume.
func CopiedVolumes(pvbs []PodVolumeBackup, namespace, name string) []PodVolumeBackup {
	var out []PodVolumeBackup
	for _, p := range pvbs {
		if p.Spec.Pod.Namespace != namespace || p.Spec.Pod.Name != name || p.Status.SnapshotID == "" || p.Status.Phase != "Completed" {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b PodVolumeBackup) int { return strings.Compare(a.Spec.Volume, b.Spec.Volume) })
	return out
}

// SnapshotSourcePrefix begins the source path of every kopia snapshot Velero's node agent
// (v1.17 and later) takes of a volume of the pod namespace/name:
// snapshot-pod-volume/kopia/<namespace>/<pod>/<volume, or its claim's name>. The snapshot's
// manifest, which holds it, is encrypted and authenticated by the repository's key.
func SnapshotSourcePrefix(namespace, name string) string {
	return "snapshot-pod-volume/" + UploaderKopia + "/" + namespace + "/" + name + "/"
}

// SnapshotTags are tags every kopia snapshot of a volume of the pod namespace/name carries
// when Velero's node agent v1.12 to v1.16 took it: the PodVolumeBackup's spec.tags (ns, pod,
// pod-uid, volume, backup, backup-uid) are recorded on the snapshot, whose source is then the
// node agent's path of the volume (/host_pods/<pod UID>/volumes/...), which does not name the
// pod. (From v1.17 the source names the pod and the snapshot carries no such tags.)
func SnapshotTags(namespace, name string) map[string]string {
	return map[string]string{"ns": namespace, "pod": name}
}
