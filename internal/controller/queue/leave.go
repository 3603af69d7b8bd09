package queue

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/queue"
)

// Leaving the queue without running: a cancelled or deleted backup (→ Failed), a new one that
// does not validate (→ FailedValidation). restorequeue.go has the same for a restore.

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
		problems := queue.CapValidationErrors(c.validationErrors)
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
