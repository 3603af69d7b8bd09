package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/failure"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/restore"
)

// errOperationsLost means a restore's operations were kept only in the memory of a manager
// that has stopped since (the restore had no storage for its files).
var errOperationsLost = failure.Permanent(errors.New("the restore's async operations were kept only in memory (no ReadWrite location for its files), and the operator restarted since"))

// RestoreOperationsReconciler follows the async operations that RestoreItemActions started
// (DESIGN.md section 9), with the same decision code as the backups' operations reconciler
// (backup.Advance, backup.Cancel, pollFailureOutcome). It owns a restore's
// WaitingForPluginOperations and WaitingForPluginOperationsPartiallyFailed: it polls each
// unfinished operation's Progress, cancels those past spec.itemOperationTimeout, keeps the
// restore's -itemoperations.json.gz and its operation counts up to date, and moves it to
// Finalizing[PartiallyFailed] once none runs. A cancelled or deleted restore has every
// unfinished operation cancelled and goes to FinalizingCancelled. The operations object is its
// state, so a restarted manager resumes where it was.
type RestoreOperationsReconciler struct {
	client.Client
	Namespace string
	Actions   *restore.Actions
	stores    stores
	Clock     clock.Clock
	Recorder  events.EventRecorder
	Gate      interface {
		Wait(ctx context.Context) error
	}
	// SyncFrequency is how often unfinished operations are polled.
	SyncFrequency time.Duration
	// CallTimeout bounds each Progress and Cancel call; 0 means backup.OperationCallTimeout.
	CallTimeout time.Duration
	// PhaseTimeout bounds how long the operations may stay unreadable (storage failing) since
	// the last successful poll; 0 means DefaultPhaseTimeout.
	PhaseTimeout time.Duration
	// Operations are the operations of restores without storage for their files, handed over
	// by the restore reconciler.
	Operations *uidMap[[]backup.Operation]

	polled uidMap[time.Time]
}

// restoreOperationsStore is where a restore's operations are kept: its files' location, or
// (none) the reconcilers' memory.
type restoreOperationsStore struct {
	store *location.Store
	key   string
}

// Reconcile polls one restore's operations.
func (r *RestoreOperationsReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.Gate.Wait(ctx); err != nil {
		return ctrl.Result{}, err
	}
	var rs cairnv1.Restore
	if err := r.Get(ctx, req.NamespacedName, &rs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if rs.Status.Phase != cairnv1.RestorePhaseWaitingForPluginOperations && rs.Status.Phase != cairnv1.RestorePhaseWaitingForPluginOperationsPartiallyFailed {
		return ctrl.Result{}, nil
	}
	if _, seen := r.polled.get(rs.UID); !seen {
		r.polled.set(rs.UID, r.Clock.Now())
	}
	where, ops, err := r.read(ctx, &rs)
	if failureReason, cancelled := restoreCancellation(&rs); cancelled {
		return ctrl.Result{}, r.end(ctx, &rs, where, ops, err == nil, failureReason, cairnv1.RestorePhaseFinalizingCancelled)
	}
	if err != nil {
		since, _ := r.polled.get(rs.UID)
		giveUp, reason := pollFailureOutcome(err, r.Clock.Now().Sub(since), r.phaseTimeout())
		if !giveUp {
			return ctrl.Result{}, err
		}
		r.Recorder.Eventf(&rs, nil, corev1.EventTypeWarning, "OperationsLost", "Poll", "Restore goes on without its unfinished async operations: %s", reason)
		return ctrl.Result{}, r.end(ctx, &rs, where, nil, false, reason, cairnv1.RestorePhaseFinalizingPartiallyFailed)
	}

	now := r.Clock.Now()
	changed := false
	for i, op := range ops {
		callCtx, cancel := context.WithTimeout(ctx, r.callTimeout())
		next := backup.Advance(callCtx, op, r.Actions.Tracker(op.Action, &rs), now, rs.Spec.GetItemOperationTimeout())
		cancel()
		if next.Phase != op.Phase || next.NCompleted != op.NCompleted || next.Description != op.Description {
			changed = true
		}
		if next.Phase == backup.OperationFailed && op.Phase != backup.OperationFailed {
			r.Recorder.Eventf(&rs, nil, corev1.EventTypeWarning, "OperationFailed", "Poll",
				"Operation %s of %s on %s failed: %s", next.OperationID, next.Action, next.Item, next.Error)
		}
		ops[i] = next
	}
	if changed {
		if err := r.write(ctx, &rs, where, ops); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.polled.set(rs.UID, r.Clock.Now())
	running, completed, failed := backup.OperationCounts(ops)
	next := restore.NextAfterOperations(rs.Status.Phase, ops)
	if err := patchRestoreStatus(ctx, r.Client, r.Clock, phases.OwnerRestoreOperations, &rs, func(s *cairnv1.RestoreStatus) {
		s.Phase = next
		s.RestoreItemOperationsAttempted = int32(len(ops))
		s.RestoreItemOperationsCompleted, s.RestoreItemOperationsFailed = int32(completed), int32(failed)
		s.Errors = max(s.Errors, int32(failed))
	}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if running > 0 {
		return ctrl.Result{RequeueAfter: r.SyncFrequency}, nil
	}
	r.forget(rs.UID)
	return ctrl.Result{}, nil
}

// read reads a restore's operations: from its files' location, or from memory.
func (r *RestoreOperationsReconciler) read(ctx context.Context, rs *cairnv1.Restore) (restoreOperationsStore, []backup.Operation, error) {
	if rs.Status.StorageLocation == "" {
		ops, ok := r.memory().get(rs.UID)
		if !ok {
			return restoreOperationsStore{}, nil, errOperationsLost
		}
		return restoreOperationsStore{}, append([]backup.Operation(nil), ops...), nil
	}
	var where restoreOperationsStore
	var ops []backup.Operation
	err := r.stores.call(ctx, func(ctx context.Context) error {
		var bsl cairnv1.BackupStorageLocation
		err := r.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: rs.Status.StorageLocation}, &bsl)
		if apierrors.IsNotFound(err) {
			return failure.Permanent(fmt.Errorf("storage location %s of the restore's operations is gone", rs.Status.StorageLocation))
		}
		if err != nil {
			return err
		}
		store, err := r.stores.open(ctx, &bsl)
		if err != nil {
			return err
		}
		where = restoreOperationsStore{store: store, key: store.Layout.Restore(rs.Namespace, rs.Name).ItemOperations}
		ops, err = readOperations(ctx, store, where.key)
		return err
	})
	return where, ops, err
}

// write records a restore's operations where they are kept.
func (r *RestoreOperationsReconciler) write(ctx context.Context, rs *cairnv1.Restore, where restoreOperationsStore, ops []backup.Operation) error {
	if where.store == nil {
		r.memory().set(rs.UID, ops)
		return nil
	}
	return r.stores.call(ctx, func(ctx context.Context) error { return putOperations(ctx, where.store, where.key, ops) })
}

// end cancels every unfinished operation (each call bounded), records them where that still
// works, and moves the restore to next: FinalizingCancelled for a cancel (reason is the
// failureReason), FinalizingPartiallyFailed when the operations cannot be followed any more.
// Nothing here waits on storage.
func (r *RestoreOperationsReconciler) end(ctx context.Context, rs *cairnv1.Restore, where restoreOperationsStore, ops []backup.Operation, known bool, reason string, next cairnv1.RestorePhase) error {
	running, _, _ := backup.OperationCounts(ops)
	now := r.Clock.Now()
	for i, op := range ops {
		callCtx, cancel := context.WithTimeout(ctx, r.callTimeout())
		ops[i] = backup.Cancel(callCtx, op, r.Actions.Tracker(op.Action, rs), now, reason)
		cancel()
	}
	if known && len(ops) > 0 {
		if err := r.write(ctx, rs, where, ops); err != nil {
			ctrl.LoggerFrom(ctx).Info("Could not record the cancelled operations", "restore", objectName(rs), "error", err.Error())
		}
	}
	attempted, completed, failed := rs.Status.RestoreItemOperationsAttempted, rs.Status.RestoreItemOperationsCompleted, rs.Status.RestoreItemOperationsAttempted-rs.Status.RestoreItemOperationsCompleted
	if known {
		_, c, f := backup.OperationCounts(ops)
		attempted, completed, failed = int32(len(ops)), int32(c), int32(f)
	}
	if err := patchRestoreStatus(ctx, r.Client, r.Clock, phases.OwnerRestoreOperations, rs, func(s *cairnv1.RestoreStatus) {
		s.Phase = next
		s.RestoreItemOperationsAttempted, s.RestoreItemOperationsCompleted, s.RestoreItemOperationsFailed = attempted, completed, max(failed, 0)
		if next == cairnv1.RestorePhaseFinalizingPartiallyFailed {
			s.Errors = max(s.Errors+1, failed)
		}
	}); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.forget(rs.UID)
	if next == cairnv1.RestorePhaseFinalizingCancelled {
		r.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "Cancelling", "Cancel",
			"%s while waiting for async operations: %d cancelled; the objects it created stay", reason, running)
	}
	return nil
}

func (r *RestoreOperationsReconciler) forget(uid types.UID) {
	r.polled.forget(uid)
	r.memory().forget(uid)
}

func (r *RestoreOperationsReconciler) memory() *uidMap[[]backup.Operation] {
	if r.Operations == nil {
		r.Operations = &uidMap[[]backup.Operation]{}
	}
	return r.Operations
}

func (r *RestoreOperationsReconciler) phaseTimeout() time.Duration {
	if r.PhaseTimeout > 0 {
		return r.PhaseTimeout
	}
	return DefaultPhaseTimeout
}

func (r *RestoreOperationsReconciler) callTimeout() time.Duration {
	if r.CallTimeout > 0 {
		return r.CallTimeout
	}
	return backup.OperationCallTimeout
}

// SetupWithManager registers the reconciler for restores in its phases.
func (r *RestoreOperationsReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.memory()
	if r.SyncFrequency <= 0 {
		r.SyncFrequency = DefaultItemOperationSyncFrequency
	}
	owned := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		rs, ok := obj.(*cairnv1.Restore)
		return ok && (rs.Status.Phase == cairnv1.RestorePhaseWaitingForPluginOperations ||
			rs.Status.Phase == cairnv1.RestorePhaseWaitingForPluginOperationsPartiallyFailed)
	})
	return register("restoreoperations", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Restore{}, builder.WithPredicates(owned)).
		WithOptions(crcontroller.Options{RateLimiter: storageRateLimiter()}),
		r)
}
