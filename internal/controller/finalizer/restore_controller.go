package finalizer

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/storage"
)

// RestoreReconciler ends restores and removes deleted ones' files (DESIGN.md section
// 9). It owns Finalizing → Completed, FinalizingPartiallyFailed → PartiallyFailed and
// FinalizingCancelled → Failed ("Restore cancelled by user", condition Cancelled); a restore
// that does not complete has its volume restores still running cancelled first. For a
// terminal restore with a deletion timestamp it removes the restore's files (log, results,
// resource list, operations) from its storage location and then the restore-data finalizer;
// the objects the restore created are never touched.
type RestoreReconciler struct {
	client.Client
	Namespace string
	Stores    stores.Stores
	Clock     clock.Clock
	Recorder  events.EventRecorder
	Gate      interface {
		Wait(ctx context.Context) error
	}
	// Files are the cancelled restores whose run is storing its files after its
	// FinalizingCancelled write (lifecycle.FileStores, shared with the restore reconciler
	// through setup.go): such a restore is ended once they are stored.
	Files *lifecycle.FileStores
}

// filesStoreWait is how soon a cancelled restore whose run is still storing its files (each
// call bounded by the storage timeout) is looked at again.
const filesStoreWait = 100 * time.Millisecond

// Reconcile finalizes or removes one restore.
func (r *RestoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rs cairnv1.Restore
	if found, err := lifecycle.Fetch(ctx, r.Gate, r.Client, req, &rs); !found {
		return ctrl.Result{}, err
	}
	if next, ok := finalizedRestorePhase(rs.Status.Phase); ok {
		if _, _, cancelled := lifecycle.Restores.Cancellation(&rs); cancelled {
			// A cancel that came while the restore was finalizing: it ends cancelled.
			next = cairnv1.RestorePhaseFailed
		}
		if rs.Status.Phase == cairnv1.RestorePhaseFinalizingCancelled && r.Files.InFlight(rs.UID) {
			// Its run is storing its files: end it after, saying whether they were stored.
			return ctrl.Result{RequeueAfter: filesStoreWait}, nil
		}
		return ctrl.Result{}, r.finalize(ctx, &rs, next)
	}
	if rs.DeletionTimestamp != nil && rs.Status.Phase.IsTerminal() && controllerutil.ContainsFinalizer(&rs, cairnv1.RestoreDataFinalizer) {
		return ctrl.Result{}, r.removeFiles(ctx, &rs)
	}
	return ctrl.Result{}, nil
}

// finalizedRestorePhase is the terminal phase a Finalizing* restore ends in.
func finalizedRestorePhase(p cairnv1.RestorePhase) (cairnv1.RestorePhase, bool) {
	switch p {
	case cairnv1.RestorePhaseFinalizing:
		return cairnv1.RestorePhaseCompleted, true
	case cairnv1.RestorePhaseFinalizingPartiallyFailed:
		return cairnv1.RestorePhasePartiallyFailed, true
	case cairnv1.RestorePhaseFinalizingCancelled:
		return cairnv1.RestorePhaseFailed, true
	}
	return "", false
}

func (r *RestoreReconciler) finalize(ctx context.Context, rs *cairnv1.Restore, next cairnv1.RestorePhase) error {
	if next != cairnv1.RestorePhaseCompleted {
		if err := r.cancelVolumeRestores(ctx, rs); err != nil {
			return err
		}
	}
	now := metav1.NewTime(r.Clock.Now())
	_, failureReason, cancelled := lifecycle.Restores.Cancellation(rs)
	if rs.Status.Phase == cairnv1.RestorePhaseFinalizingCancelled && !cancelled {
		failureReason, cancelled = cairnv1.FailureReasonRestoreCancelled, true
	}
	err := lifecycle.PatchRestoreStatus(ctx, r.Client, r.Clock, phases.OwnerRestoreFinalizer, rs, func(s *cairnv1.RestoreStatus) {
		s.Phase = next
		s.CompletionTimestamp = &now
		if cancelled {
			s.FailureReason = failureReason
			meta.SetStatusCondition(&s.Conditions, lifecycle.Restores.CancelledCondition(rs, "the restore was stopped; the objects it created stay (its resource list names them)", now))
		}
		if c := meta.FindStatusCondition(s.Conditions, cairnv1.RestoreConditionFilesStored); c != nil && c.Status == metav1.ConditionUnknown {
			meta.SetStatusCondition(&s.Conditions, r.cancelledFilesCondition(rs, *c, now))
		}
	})
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	r.Files.Forget(rs.UID)
	// The phase change's event (with the items, warnings and errors) is PhaseWatcher's.
	return nil
}

// cancelledFilesCondition is the FilesStored condition of a cancelled restore, whose run stored
// its files after its FinalizingCancelled write (pending says where they went): how that ended,
// as the restore reconciler recorded it; a manager that restarted meanwhile does not know.
func (r *RestoreReconciler) cancelledFilesCondition(rs *cairnv1.Restore, pending metav1.Condition, now metav1.Time) metav1.Condition {
	if filesErr, ok := r.Files.Ended(rs.UID); ok {
		return lifecycle.FilesStoredCondition(pending, filesErr, rs.Generation, now)
	}
	return metav1.Condition{Type: cairnv1.RestoreConditionFilesStored, Status: metav1.ConditionFalse, Reason: cairnv1.ReasonStorageUnavailable,
		Message: "the manager restarted while the cancelled restore's files were being stored: they may be missing", ObservedGeneration: rs.Generation, LastTransitionTime: now}
}

// cancelVolumeRestores stops the restore's volume restores that have not ended, found by label.
// A restore that does not complete may leave some running: its operations, which cancel them
// one by one, could not be read (cancelled while its storage did not answer, or storage
// failing past the phase timeout). Stopped here, none stays InProgress, and each restored pod's
// helper fails saying why instead of waiting for data that never comes.
func (r *RestoreReconciler) cancelVolumeRestores(ctx context.Context, rs *cairnv1.Restore) error {
	var pvrs cairnv1.PodVolumeRestoreList
	if err := r.List(ctx, &pvrs, client.InNamespace(r.Namespace), client.MatchingLabels{cairnv1.PodVolumeRestoreUIDLabel: string(rs.UID)}); err != nil {
		return fmt.Errorf("listing the restore's PodVolumeRestores: %w", err)
	}
	if err := podvolume.CancelRestores(ctx, r.Client, pvrs.Items); err != nil {
		return fmt.Errorf("cancelling the restore's PodVolumeRestores still running: %w", err)
	}
	return nil
}

// removeFiles deletes a deleted restore's files and then its finalizer. A location that is
// gone, or that refuses writes now, leaves the files (a Warning event says where): the restore
// object is never held back for them.
func (r *RestoreReconciler) removeFiles(ctx context.Context, rs *cairnv1.Restore) error {
	if name := rs.Status.StorageLocation; name != "" {
		var bsl cairnv1.BackupStorageLocation
		err := r.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, &bsl)
		switch {
		case client.IgnoreNotFound(err) != nil:
			return err
		case err != nil:
			r.Recorder.Eventf(rs, nil, corev1.EventTypeWarning, "FilesLeft", "Delete", "Storage location %s is gone: the restore's files, if any, were left there", name)
		default:
			removed, err := r.deleteFiles(ctx, rs, &bsl)
			switch {
			case errors.Is(err, storage.ErrReadOnly), errors.Is(err, location.ErrConfig):
				r.Recorder.Eventf(rs, nil, corev1.EventTypeWarning, "FilesLeft", "Delete", "The restore's files were left in storage location %s: %v", name, err)
			case err != nil:
				return err
			default:
				r.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "FilesRemoved", "Delete", "Removed %d files of the restore from storage location %s", removed, name)
			}
		}
	}
	// The records of its volume restores go with the restore (a running one is cancelled by
	// its deletion: the node agent stops it).
	if err := r.DeleteAllOf(ctx, &cairnv1.PodVolumeRestore{}, client.InNamespace(r.Namespace),
		client.MatchingLabels{cairnv1.PodVolumeRestoreUIDLabel: string(rs.UID)}); err != nil {
		return fmt.Errorf("deleting the restore's PodVolumeRestores: %w", err)
	}
	patch := client.MergeFrom(rs.DeepCopy())
	controllerutil.RemoveFinalizer(rs, cairnv1.RestoreDataFinalizer)
	return client.IgnoreNotFound(r.Patch(ctx, rs, patch))
}

func (r *RestoreReconciler) deleteFiles(ctx context.Context, rs *cairnv1.Restore, bsl *cairnv1.BackupStorageLocation) (int, error) {
	var removed int
	err := r.Stores.Call(ctx, func(ctx context.Context) error {
		store, err := r.Stores.Open(ctx, bsl)
		if err != nil {
			return err
		}
		keys, err := store.List(ctx, store.Layout.Restore(rs.Namespace, rs.Name).Dir)
		if err != nil {
			return fmt.Errorf("listing the restore's files: %w", err)
		}
		for _, key := range keys {
			if err := store.Delete(ctx, key); err != nil {
				return fmt.Errorf("deleting %s: %w", key, err)
			}
			removed++
		}
		return nil
	})
	return removed, err
}

// SetupWithManager registers the reconciler for Finalizing* restores and deleted terminal ones.
func (r *RestoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	owned := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		rs, ok := obj.(*cairnv1.Restore)
		if !ok {
			return false
		}
		_, finalizing := finalizedRestorePhase(rs.Status.Phase)
		return finalizing || (rs.DeletionTimestamp != nil && rs.Status.Phase.IsTerminal())
	})
	if r.Files == nil {
		r.Files = &lifecycle.FileStores{}
	}
	return lifecycle.Register("restorefinalizer", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Restore{}, builder.WithPredicates(owned)).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 2, RateLimiter: lifecycle.StorageRateLimiter()}),
		r)
}
