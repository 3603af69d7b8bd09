package nodeagent

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/metrics"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/repository"
)

// backups is the kind of PodVolumeBackups: the agent snapshots the pod's volume.
func backups(a *Agent) kind[*cairnv1.PodVolumeBackup] {
	return kind[*cairnv1.PodVolumeBackup]{
		name:  "podvolumebackup",
		table: phases.PodVolumeBackup,
		new:   func() *cairnv1.PodVolumeBackup { return &cairnv1.PodVolumeBackup{} },
		messages: messages{
			restarted:       "the node agent restarted during the copy; nothing was saved",
			cancelledBefore: "cancelled before the copy started",
			cancelled:       "cancelled during the copy; nothing was saved",
			stopped:         "the node agent stopped during the copy; nothing was saved",
		},
		work: a.snapshot,
		completed: func(s *cairnv1.PodVolumeStatus, o outcome) {
			s.SnapshotID, s.ParentSnapshotID = o.SnapshotID, o.ParentSnapshotID
			s.BytesDone, s.BytesTotal, s.Files, s.UploadedBytes = o.Bytes, o.Bytes, o.Files, o.UploadedBytes
			s.Progress = progressSummary(o.Bytes, o.Bytes)
		},
		observe: func(phase cairnv1.PodVolumePhase, d time.Duration, o outcome) {
			metrics.VolumeCopyEnded(string(phase), d, o.Bytes, o.UploadedBytes)
		},
	}
}

// snapshot finds the volume's directory, opens the repository and snapshots the directory.
func (a *Agent) snapshot(ctx context.Context, pvb *cairnv1.PodVolumeBackup, p *progress) (outcome, error) {
	vol, err := a.volumeDir(ctx, pvb.Spec.Pod, pvb.Spec.Volume, backedUpPodReplaced)
	if err != nil {
		return outcome{}, err
	}
	dir := vol.Dir
	total, err := diskUsage(ctx, dir)
	if err != nil {
		return outcome{}, fmt.Errorf("reading volume %s: %w", pvb.Spec.Volume, err)
	}
	p.total.Store(total)
	repo, err := a.open(ctx, pvb.Spec.Repository, false)
	if err != nil {
		return outcome{}, fmt.Errorf("opening the volume repository of location %s for namespace %s: %w",
			pvb.Spec.Repository.StorageLocation, pvb.Spec.Repository.Namespace, err)
	}
	defer func() { _ = repo.Close() }()
	res, err := repo.Snapshot(ctx, dir, pvb.Spec.Tags, func(r repository.Progress) { p.done.Store(r.HashedBytes) })
	return outcome{Bytes: res.Bytes, Files: res.Files, UploadedBytes: res.UploadedBytes, SnapshotID: res.ID, ParentSnapshotID: res.Parent}, err
}

// diskUsage sums the sizes of the regular files under dir (not following symlinks), for the
// copy's bytesTotal; it stops when ctx ends.
func diskUsage(ctx context.Context, dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}
