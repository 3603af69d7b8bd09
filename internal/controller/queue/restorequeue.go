package queue

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/queue"
)

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
	problems := queue.CapValidationErrors(c.validationErrors)
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
