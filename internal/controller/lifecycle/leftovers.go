package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/storage"
)

// VolumeSnapshotDeleter deletes snapshots from volume repositories
// (internal/controller/repositories.Service).
type VolumeSnapshotDeleter interface {
	DeleteSnapshots(ctx context.Context, snapshots []podvolume.Snapshot) error
}

// Leftovers removes what a backup's async operations made outside the backup's directory in
// its location: the CSI VolumeSnapshots labelled with its UID and the snapshots of its volume
// copies in their repositories. The finalizer's cleanup of a backup that will not be committed
// and the deletion of a backup both call it, before they remove the operations file that
// records those snapshots. Any part left nil is skipped.
type Leftovers struct {
	Dynamic dynamic.Interface
	Volumes VolumeSnapshotDeleter
	// Client lists the backup's PodVolumeBackups in Namespace (the operator's).
	Client    client.Client
	Namespace string
}

// Remove removes the leftovers of backup uid, whose operations file is opsKey in store (it may
// be missing: a backup that started no operation, or whose file is gone). It returns how many
// snapshots it deleted.
func (l Leftovers) Remove(ctx context.Context, uid types.UID, store storage.ObjectStore, opsKey string) (int, error) {
	deleted := 0
	if l.Volumes != nil {
		snaps, err := l.volumeSnapshots(ctx, uid, store, opsKey)
		if err != nil {
			return 0, err
		}
		if len(snaps) > 0 {
			if err := l.Volumes.DeleteSnapshots(ctx, snaps); err != nil {
				return 0, err
			}
			deleted += len(snaps)
		}
	}
	if l.Dynamic != nil {
		n, err := backup.DeleteSnapshots(ctx, l.Dynamic, uid)
		deleted += n
		if err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// volumeSnapshots are the snapshots the backup's operations file records and those its
// PodVolumeBackups report (a copy that completed just as the backup was cancelled is in the
// latter only), once each.
func (l Leftovers) volumeSnapshots(ctx context.Context, uid types.UID, store storage.ObjectStore, opsKey string) ([]podvolume.Snapshot, error) {
	var snaps []podvolume.Snapshot
	if store != nil && opsKey != "" {
		ops, err := backup.ReadOperations(ctx, store, opsKey)
		switch {
		case errors.Is(err, storage.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("reading the backup's operations for its volume snapshots: %w", err)
		default:
			if snaps, err = podvolume.Snapshots(ops); err != nil {
				return nil, err
			}
		}
	}
	if l.Client != nil {
		var pvbs cairnv1.PodVolumeBackupList
		if err := l.Client.List(ctx, &pvbs, client.InNamespace(l.Namespace), client.MatchingLabels{cairnv1.PodVolumeBackupUIDLabel: string(uid)}); err != nil {
			return nil, fmt.Errorf("listing the backup's PodVolumeBackups: %w", err)
		}
		for i := range pvbs.Items {
			p := &pvbs.Items[i]
			switch {
			case p.Status.Phase == cairnv1.PodVolumePhaseCompleted && p.Status.SnapshotID != "":
				snaps = append(snaps, podvolume.SnapshotOf(p))
			case !p.Status.Phase.IsTerminal():
				// A copy the backup's run started and never handed to the operations (the
				// manager restarted during the run): stopped, it saves nothing. One that
				// completes meanwhile is found here again when the backup is deleted.
				if err := podvolume.CancelCopy(ctx, l.Client, l.Namespace, p.Name); err != nil {
					return nil, fmt.Errorf("cancelling volume copy %s: %w", p.Name, err)
				}
			}
		}
	}
	return dedupe(snaps), nil
}

func dedupe(snaps []podvolume.Snapshot) []podvolume.Snapshot {
	type key struct {
		repo cairnv1.RepositoryReference
		id   string
	}
	seen := map[key]bool{}
	out := snaps[:0]
	for _, s := range snaps {
		k := key{s.Repository, s.SnapshotID}
		if !seen[k] {
			seen[k] = true
			out = append(out, s)
		}
	}
	return out
}

// DeletePodVolumeBackups deletes the PodVolumeBackups of backup uid: the records of its volume
// copies go with the Backup object.
func DeletePodVolumeBackups(ctx context.Context, c client.Client, namespace string, uid types.UID) error {
	err := c.DeleteAllOf(ctx, &cairnv1.PodVolumeBackup{}, client.InNamespace(namespace),
		client.MatchingLabels{cairnv1.PodVolumeBackupUIDLabel: string(uid)})
	if err != nil {
		return fmt.Errorf("deleting the backup's PodVolumeBackups: %w", err)
	}
	return nil
}
