package operations

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/failure"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

// Kind is what the operations reconciler needs to know of one kind of object whose runs start
// async operations; the loop itself (Reconciler) is the same for all.
//
// An operation is anything with a Progress and a Cancel, found by the name recorded in the
// operations file (tracker): a plugin action's snapshot today, and a volume copy by the node
// agent (a PodVolumeBackup, DESIGN.md section 16) next. The backup's run records each
// PodVolumeBackup it creates as one more backup.Operation in its operations file, and the
// backup kind's tracker resolves that operation's name to a tracker whose Progress reads the
// PodVolumeBackup's status (phase, bytesDone/bytesTotal) and whose Cancel asks the node agent
// to stop it: the poll, itemOperationTimeout, cancel, delete, the phase timeout and restart
// recovery then apply to volume copies with no change here. Only SetupWithManager gains a
// watch on PodVolumeBackups (mapped to their backup by label), so a volume that ends is seen
// at once rather than at the next SyncFrequency.
type Kind[T client.Object, P ~string] struct {
	// owner names the reconciler: in Config.Controllers, and as the owner in the phase tables.
	owner phases.Owner
	// noun names the kind in events ("Backup", "Restore").
	noun string
	// afterCancel says, in the Cancelling event, what becomes of a cancelled object's work.
	afterCancel string
	// new returns an empty object of the kind.
	new func() T
	// waiting and waitingPartiallyFailed are the phases the reconciler owns;
	// finalizingPartiallyFailed is where an object goes without the operations that could not
	// be followed, finalizingCancelled where a cancelled one goes.
	waiting, waitingPartiallyFailed, finalizingPartiallyFailed, finalizingCancelled P
	// next is the phase after a poll, given the operations (backup.NextAfterOperations,
	// restore.NextAfterOperations).
	next func(P, []backup.Operation) P
	// cancellation says whether the object must stop (spec.cancel, or its deletion), and the
	// failureReason it ends with.
	cancellation func(T) (failureReason string, ok bool)
	// itemOperationTimeout is the object's spec.itemOperationTimeout.
	itemOperationTimeout func(T) time.Duration
	// tracker binds the action named action to the object; nil when none has that name.
	tracker func(action string, obj T) backup.OperationTracker
	// file finds where the object's operations are kept; it is called within a bounded
	// storage call.
	file func(ctx context.Context, st stores.Stores, obj T) (operationsFile, error)
	// status reads the part of the object's status that the reconciler owns.
	status func(T) operationsStatus[P]
	// patch writes that part of the object's status, as owner (lifecycle.PatchBackupStatus,
	// lifecycle.PatchRestoreStatus).
	patch func(ctx context.Context, c client.Client, clk clock.PassiveClock, obj T, mutate func(*operationsStatus[P])) error
}

// owns reports whether an object in phase p is the reconciler's.
func (k Kind[T, P]) owns(p P) bool { return p == k.waiting || p == k.waitingPartiallyFailed }

// operationsStatus is the part of a status the operations reconciler writes, the same for
// every Kind: the phase, the operation counts, and the error count.
type operationsStatus[P ~string] struct {
	Phase                        P
	Attempted, Completed, Failed int32
	Errors                       int32
	// BytesDone and BytesTotal are the operations' bytes (backup.OperationBytes): the volume
	// copies' progress; both 0 when no operation counts bytes.
	BytesDone, BytesTotal int64
	// Hooks are the hook counts (status.hookStatus): the run's, to which the hooks the
	// operations ran are added once, by the write that leaves the reconciler's phases
	// (withOperationHooks).
	Hooks backup.HookCounts
	// Warnings is status.warnings: the run's, to which the hooks that failed and continued
	// in the operations are added with the hook counts.
	Warnings int32
}

// withOperationHooks adds the hooks the operations ran to s once s leaves the phases k owns:
// that write is the last this reconciler makes, so a write that fails and is made again
// from the object as it was never counts them twice.
func withOperationHooks[T client.Object, P ~string](k Kind[T, P], s *operationsStatus[P], ops []backup.Operation) {
	if !k.owns(s.Phase) {
		hooks, continued := backup.HookCountsOf(ops)
		s.Hooks = s.Hooks.Add(hooks)
		s.Warnings += continued
	}
}

// Backups is the operations reconciler's kind for backups: the operations of
// BackupItemActions (registry), kept in the backup's operations file in its location.
func Backups(registry *backup.Registry) Kind[*cairnv1.Backup, cairnv1.BackupPhase] {
	return Kind[*cairnv1.Backup, cairnv1.BackupPhase]{
		owner:                     phases.OwnerOperations,
		noun:                      "Backup",
		afterCancel:               "removing its data",
		new:                       func() *cairnv1.Backup { return &cairnv1.Backup{} },
		waiting:                   cairnv1.BackupPhaseWaitingForPluginOperations,
		waitingPartiallyFailed:    cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed,
		finalizingPartiallyFailed: cairnv1.BackupPhaseFinalizingPartiallyFailed,
		finalizingCancelled:       cairnv1.BackupPhaseFinalizingCancelled,
		next:                      backup.NextAfterOperations,
		cancellation: func(b *cairnv1.Backup) (string, bool) {
			_, failureReason, ok := lifecycle.Backups.Cancellation(b)
			return failureReason, ok
		},
		itemOperationTimeout: func(b *cairnv1.Backup) time.Duration { return b.Spec.GetItemOperationTimeout() },
		tracker:              registry.Tracker,
		file: func(ctx context.Context, st stores.Stores, b *cairnv1.Backup) (operationsFile, error) {
			store, err := st.ForBackup(ctx, b)
			if err != nil {
				return nil, err
			}
			return storedOperations{store: store, key: store.Layout.Backup(b.Namespace, b.Name).ItemOperations}, nil
		},
		status: func(b *cairnv1.Backup) operationsStatus[cairnv1.BackupPhase] {
			return backupOperationsStatus(&b.Status)
		},
		patch: func(ctx context.Context, c client.Client, clk clock.PassiveClock, b *cairnv1.Backup, mutate func(*operationsStatus[cairnv1.BackupPhase])) error {
			return lifecycle.PatchBackupStatus(ctx, c, clk, phases.OwnerOperations, b, func(s *cairnv1.BackupStatus) {
				v := backupOperationsStatus(s)
				mutate(&v)
				s.Phase, s.Errors = v.Phase, v.Errors
				s.BackupItemOperationsAttempted, s.BackupItemOperationsCompleted, s.BackupItemOperationsFailed = v.Attempted, v.Completed, v.Failed
				s.HookStatus, s.Warnings = v.Hooks.Status(), v.Warnings
				if v.BytesTotal > 0 {
					s.Progress = ptr.Deref(s.Progress, cairnv1.BackupProgress{}).WithVolumeBytes(v.BytesDone, v.BytesTotal)
				}
			})
		},
	}
}

func backupOperationsStatus(s *cairnv1.BackupStatus) operationsStatus[cairnv1.BackupPhase] {
	v := operationsStatus[cairnv1.BackupPhase]{Phase: s.Phase, Errors: s.Errors,
		Attempted: s.BackupItemOperationsAttempted, Completed: s.BackupItemOperationsCompleted, Failed: s.BackupItemOperationsFailed,
		Hooks: backup.HookCountsOfStatus(s.HookStatus), Warnings: s.Warnings}
	if s.Progress != nil {
		v.BytesDone, v.BytesTotal = s.Progress.VolumeBytesDone, s.Progress.VolumeBytesTotal
	}
	return v
}

// Restores is the operations reconciler's kind for restores: the operations of
// RestoreItemActions (actions), kept in the restore's operations file in the location of its
// files, or, for a restore without one, in held.
func Restores(actions *restore.Actions, held *Held) Kind[*cairnv1.Restore, cairnv1.RestorePhase] {
	return Kind[*cairnv1.Restore, cairnv1.RestorePhase]{
		owner:                     phases.OwnerRestoreOperations,
		noun:                      "Restore",
		afterCancel:               "the objects it created stay",
		new:                       func() *cairnv1.Restore { return &cairnv1.Restore{} },
		waiting:                   cairnv1.RestorePhaseWaitingForPluginOperations,
		waitingPartiallyFailed:    cairnv1.RestorePhaseWaitingForPluginOperationsPartiallyFailed,
		finalizingPartiallyFailed: cairnv1.RestorePhaseFinalizingPartiallyFailed,
		finalizingCancelled:       cairnv1.RestorePhaseFinalizingCancelled,
		next:                      restore.NextAfterOperations,
		cancellation: func(rs *cairnv1.Restore) (string, bool) {
			_, failureReason, ok := lifecycle.Restores.Cancellation(rs)
			return failureReason, ok
		},
		itemOperationTimeout: func(rs *cairnv1.Restore) time.Duration { return rs.Spec.GetItemOperationTimeout() },
		tracker:              actions.Tracker,
		file: func(ctx context.Context, st stores.Stores, rs *cairnv1.Restore) (operationsFile, error) {
			if rs.Status.StorageLocation == "" {
				return held.file(rs.UID), nil
			}
			var bsl cairnv1.BackupStorageLocation
			err := st.Client.Get(ctx, types.NamespacedName{Namespace: st.Namespace, Name: rs.Status.StorageLocation}, &bsl)
			if apierrors.IsNotFound(err) {
				return nil, failure.Permanent(fmt.Errorf("storage location %s of the restore's operations is gone", rs.Status.StorageLocation))
			}
			if err != nil {
				return nil, err
			}
			store, err := st.Open(ctx, &bsl)
			if err != nil {
				return nil, err
			}
			return storedOperations{store: store, key: store.Layout.Restore(rs.Namespace, rs.Name).ItemOperations}, nil
		},
		status: func(rs *cairnv1.Restore) operationsStatus[cairnv1.RestorePhase] {
			return restoreOperationsStatus(&rs.Status)
		},
		patch: func(ctx context.Context, c client.Client, clk clock.PassiveClock, rs *cairnv1.Restore, mutate func(*operationsStatus[cairnv1.RestorePhase])) error {
			return lifecycle.PatchRestoreStatus(ctx, c, clk, phases.OwnerRestoreOperations, rs, func(s *cairnv1.RestoreStatus) {
				v := restoreOperationsStatus(s)
				mutate(&v)
				s.Phase, s.Errors = v.Phase, v.Errors
				s.RestoreItemOperationsAttempted, s.RestoreItemOperationsCompleted, s.RestoreItemOperationsFailed = v.Attempted, v.Completed, v.Failed
				s.HookStatus, s.Warnings = v.Hooks.Status(), v.Warnings
				if v.BytesTotal > 0 {
					s.Progress = ptr.Deref(s.Progress, cairnv1.RestoreProgress{}).WithVolumeBytes(v.BytesDone, v.BytesTotal)
				}
			})
		},
	}
}

func restoreOperationsStatus(s *cairnv1.RestoreStatus) operationsStatus[cairnv1.RestorePhase] {
	v := operationsStatus[cairnv1.RestorePhase]{Phase: s.Phase, Errors: s.Errors,
		Attempted: s.RestoreItemOperationsAttempted, Completed: s.RestoreItemOperationsCompleted, Failed: s.RestoreItemOperationsFailed,
		Hooks: backup.HookCountsOfStatus(s.HookStatus), Warnings: s.Warnings}
	if s.Progress != nil {
		v.BytesDone, v.BytesTotal = s.Progress.VolumeBytesDone, s.Progress.VolumeBytesTotal
	}
	return v
}

// operationsFile is where one object's operations are kept between polls.
type operationsFile interface {
	read(ctx context.Context) ([]backup.Operation, error)
	write(ctx context.Context, ops []backup.Operation) error
	// forget lets go of them once the object has left the phases that wait for them.
	forget()
}

// storedOperations is an operations file in a storage location (backup.ReadOperations,
// backup.PutOperations): it outlives the manager, so a restarted one resumes from it.
type storedOperations struct {
	store storage.ObjectStore
	key   string
}

func (s storedOperations) read(ctx context.Context) ([]backup.Operation, error) {
	return backup.ReadOperations(ctx, s.store, s.key)
}

func (s storedOperations) write(ctx context.Context, ops []backup.Operation) error {
	return backup.PutOperations(ctx, s.store, s.key, ops)
}

func (storedOperations) forget() {}

// Held holds the operations of restores that have no storage location for their
// files (the backup's location is ReadOnly and no default ReadWrite one is Available): the
// restore reconciler hands them over when its run ends (Hold), and the restore operations
// reconciler follows them from here instead of from an operations file. It is the one state
// these two reconcilers share, made in setup.go and passed to both, because nothing else can
// carry it: there is no location to write the file to, and the Restore's API has no field for
// the operations. It lives as long as the process: after a restart such a restore goes on
// without its operations (lifecycle.ErrOperationsLost, FinalizingPartiallyFailed); restores with a
// location resume from their file.
type Held struct {
	m lifecycle.UIDMap[[]backup.Operation]
}

// Hold keeps the operations of the restore uid for the operations reconciler.
func (h *Held) Hold(uid types.UID, ops []backup.Operation) {
	h.m.Set(uid, append([]backup.Operation(nil), ops...))
}

// file is the operations "file" of the restore uid in h.
func (h *Held) file(uid types.UID) operationsFile { return heldFile{h, uid} }

type heldFile struct {
	h   *Held
	uid types.UID
}

func (f heldFile) read(context.Context) ([]backup.Operation, error) {
	ops, ok := f.h.m.Get(f.uid)
	if !ok {
		return nil, lifecycle.ErrOperationsLost
	}
	// A copy: the poll changes its operations in place before it writes them back.
	return append([]backup.Operation(nil), ops...), nil
}

func (f heldFile) write(_ context.Context, ops []backup.Operation) error {
	f.h.m.Set(f.uid, ops)
	return nil
}

func (f heldFile) forget() { f.h.m.Forget(f.uid) }
