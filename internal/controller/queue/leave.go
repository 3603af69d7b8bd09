package queue

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/validation"
)

// Leaving the queue without running: a cancelled or deleted backup (→ Failed), a new one that
// does not validate (→ FailedValidation). leaveRestore (below) is the same for a restore.

// leave fails a New or Queued backup or restore that was cancelled or deleted, and a New one
// that does not validate. It reports whether it left the queue.
func (r *Reconciler) leave(ctx context.Context, pass *queuePass, c candidate) (bool, error) {
	if c.restore != nil {
		return r.leaveRestore(ctx, pass, c)
	}
	b := c.backup
	now := metav1.NewTime(pass.now)
	switch {
	case leavesQueue(b):
		if err := lifecycle.Backups.EndBeforeStart(ctx, r.Client, r.Clock, r.Recorder, phases.OwnerQueue, b); err != nil {
			return true, err
		}
		pass.wrote(b, true)
		return true, nil
	case len(c.validationErrors) > 0:
		if err := addFinalizer(ctx, r.Client, b, cairnv1.BackupDataFinalizer); err != nil {
			return true, err
		}
		problems := validation.Cap(c.validationErrors)
		err := r.patchBackupStatus(ctx, pass, b, func(s *cairnv1.BackupStatus) {
			s.Phase = cairnv1.BackupPhaseFailedValidation
			s.ValidationErrors = problems
			s.QueuePosition = 0
			s.CompletionTimestamp = &now
		})
		return true, err
	}
	return false, nil
}

// leavesQueue: a cancelled or deleted backup that has not started leaves the queue at once.
func leavesQueue(b *cairnv1.Backup) bool {
	_, _, cancelled := lifecycle.Backups.Cancellation(b)
	return cancelled
}

// syncNameConflict is the validation error of a new backup, bound for location name, when
// that location holds a committed backup of the same name that another Backup object made
// (backupsync.NameConflict, from the sync's catalog); nil when there is none.
func syncNameConflict(catalog *backupsync.Catalog, b *cairnv1.Backup, name string, locations []cairnv1.BackupStorageLocation) []string {
	if name == "" {
		return nil
	}
	for i := range locations {
		if l := &locations[i]; l.Name == name {
			held := catalog.Holds(name, client.ObjectKeyFromObject(b))
			if msg := backupsync.NameConflict(b, name, l.Spec.AccessMode, held); msg != "" {
				return []string{"metadata.name: " + msg}
			}
		}
	}
	return nil
}

// addFinalizer puts finalizer on a new backup (cairn.dev/backup-data) or restore
// (cairn.dev/restore-data), before anything can be written for it: deleting the object then
// waits until its data or files are removed. A conflict is retried by the next pass.
func addFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) error {
	if controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(obj, finalizer)
	if err := c.Patch(ctx, obj, patch); err != nil && !apierrors.IsNotFound(err) {
		controllerutil.RemoveFinalizer(obj, finalizer)
		return fmt.Errorf("adding the finalizer to %s %s: %w", kindOf(obj), lifecycle.ObjectName(obj), err)
	}
	return nil
}

// leaveRestore is leave for a restore: a New one gets its finalizer first (the restore
// finalizer removes its files before the object goes), then a cancelled or deleted one →
// Failed (lifecycle.RunKind.EndBeforeStart), one that does not validate → FailedValidation
// with the backup it names. It reports whether the restore left the queue.
func (r *Reconciler) leaveRestore(ctx context.Context, pass *queuePass, c candidate) (bool, error) {
	rs := c.restore
	if rs.EffectivePhase() == cairnv1.RestorePhaseNew && rs.DeletionTimestamp == nil {
		if err := addFinalizer(ctx, r.Client, rs, cairnv1.RestoreDataFinalizer); err != nil {
			return true, err
		}
	}
	if _, _, cancelled := lifecycle.Restores.Cancellation(rs); cancelled {
		if err := lifecycle.Restores.EndBeforeStart(ctx, r.Client, r.Clock, r.Recorder, phases.OwnerQueue, rs); err != nil {
			return true, err
		}
		pass.wrote(rs, true)
		return true, nil
	}
	if len(c.validationErrors) == 0 {
		return false, nil
	}
	problems := validation.Cap(c.validationErrors)
	now := metav1.NewTime(pass.now)
	err := r.patchRestoreStatus(ctx, pass, rs, func(s *cairnv1.RestoreStatus) {
		s.Phase = cairnv1.RestorePhaseFailedValidation
		s.BackupName = c.backupName
		s.ValidationErrors = problems
		s.QueuePosition = 0
		s.CompletionTimestamp = &now
	})
	return true, err
}

// restoreTrigger passes the restore events that can change the queue: creations and
// deletions, phase changes, a cancel, a deletion request, and any update of a New restore (not
// a running restore's progress).
func restoreTrigger() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*cairnv1.Restore)
			cur, ok2 := e.ObjectNew.(*cairnv1.Restore)
			if !ok1 || !ok2 {
				return false
			}
			return old.Status.Phase != cur.Status.Phase || old.Spec.Cancel != cur.Spec.Cancel ||
				(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) || cur.EffectivePhase() == cairnv1.RestorePhaseNew
		},
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}
