package velerofmt

import (
	"fmt"
	"io"
	"slices"

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

// CopiedVolumes says, for the pod namespace/name as backed up, which of its volumes Velero's
// file-system backup copied (a completed PodVolumeBackup with a snapshot), sorted, each with
// the uploader and snapshot: the data Cairn does not restore (docs/migrating-from-velero.md,
// "Volume data").
func CopiedVolumes(pvbs []PodVolumeBackup, namespace, name string) []string {
	var out []string
	for _, p := range pvbs {
		if p.Spec.Pod.Namespace != namespace || p.Spec.Pod.Name != name || p.Status.SnapshotID == "" {
			continue
		}
		uploader := p.Spec.UploaderType
		if uploader == "" {
			uploader = "restic"
		}
		out = append(out, fmt.Sprintf("%s (Velero %s snapshot %s)", p.Spec.Volume, uploader, p.Status.SnapshotID))
	}
	slices.Sort(out)
	return out
}
