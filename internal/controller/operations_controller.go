package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/cairn-backup/cairn/internal/storage"
)

// DefaultItemOperationSyncFrequency is how often unfinished async operations are polled.
const DefaultItemOperationSyncFrequency = 10 * time.Second

// OperationsReconciler follows the async operations that BackupItemActions started (DESIGN.md
// section 6). It owns WaitingForPluginOperations and WaitingForPluginOperationsPartiallyFailed:
// it polls each unfinished operation's Progress, cancels those past spec.itemOperationTimeout,
// keeps the -itemoperations.json.gz object and the operation counts in status up to date, and
// moves the backup to Finalizing[PartiallyFailed] once none is left running. A cancelled (or
// deleted) backup has every unfinished operation cancelled and goes to FinalizingCancelled,
// whether or not storage answers. Each Progress and Cancel call has its own deadline. When the
// operations cannot be followed any more — a permanent error, or storage failing for longer
// than PhaseTimeout since the last successful poll — the unfinished ones are cancelled and
// failed, and the backup goes to FinalizingPartiallyFailed; other failures are retried with
// backoff. The operations object is its state, so a restarted manager resumes where it was.
type OperationsReconciler struct {
	client.Client
	Namespace string
	Registry  *backup.Registry
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
	// PhaseTimeout bounds how long the operations may stay unreadable or unwritable (storage
	// failing) since the last successful poll before the backup moves on without them; 0
	// means DefaultPhaseTimeout.
	PhaseTimeout time.Duration

	// polled is when this process last polled each backup's operations (or first saw it): the
	// phase timeout counts from there, since operations that poll fine may run for hours
	// (itemOperationTimeout).
	polled uidMap[time.Time]
}

// Reconcile polls one backup's operations.
func (r *OperationsReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.Gate.Wait(ctx); err != nil {
		return ctrl.Result{}, err
	}
	var b cairnv1.Backup
	if err := r.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if b.Status.Phase != cairnv1.BackupPhaseWaitingForPluginOperations && b.Status.Phase != cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed {
		return ctrl.Result{}, nil
	}
	if _, seen := r.polled.get(b.UID); !seen {
		r.polled.set(b.UID, r.Clock.Now())
	}
	var ops []backup.Operation
	var keys storage.BackupKeys
	var store *location.Store
	err := r.stores.call(ctx, func(ctx context.Context) (err error) {
		if store, err = r.stores.forBackup(ctx, &b); err != nil {
			return err
		}
		keys = store.Layout.Backup(b.Namespace, b.Name)
		ops, err = readOperations(ctx, store, keys.ItemOperations)
		return err
	})
	if _, failureReason, cancelled := cancellation(&b); cancelled {
		if err != nil {
			// A cancel never waits on storage: the operations that cannot be read are not
			// cancelled by ID, and the cleanup still removes the snapshots, found by label.
			ctrl.LoggerFrom(ctx).Info("Could not read the operations of a cancelled backup; cancelling it without them", "error", err.Error())
			return ctrl.Result{}, r.cancel(ctx, &b, store, keys, nil, false, failureReason)
		}
		return ctrl.Result{}, r.cancel(ctx, &b, store, keys, ops, true, failureReason)
	}
	if err != nil {
		return r.cannotPoll(ctx, &b, store, keys, nil, false, err)
	}

	now := r.Clock.Now()
	changed := false
	for i, op := range ops {
		opCtx, cancelOp := context.WithTimeout(ctx, r.callTimeout())
		next := backup.AdvanceOperation(opCtx, op, r.Registry.Named(op.Action), &b, now, b.Spec.GetItemOperationTimeout())
		cancelOp()
		if next.Phase != op.Phase || next.NCompleted != op.NCompleted || next.Description != op.Description {
			changed = true
		}
		if next.Phase == backup.OperationFailed && op.Phase != backup.OperationFailed {
			r.Recorder.Eventf(&b, nil, corev1.EventTypeWarning, "OperationFailed", "Poll",
				"Operation %s of %s on %s failed: %s", next.OperationID, next.Action, next.Item, next.Error)
		}
		ops[i] = next
	}
	if changed {
		if err := r.stores.call(ctx, func(ctx context.Context) error { return putOperations(ctx, store, keys.ItemOperations, ops) }); err != nil {
			return r.cannotPoll(ctx, &b, store, keys, ops, true, fmt.Errorf("writing the operations: %w", err))
		}
	}
	r.polled.set(b.UID, r.Clock.Now())

	running, completed, failed := backup.OperationCounts(ops)
	next := backup.NextAfterOperations(b.Status.Phase, ops)
	if err := patchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerOperations, &b, func(s *cairnv1.BackupStatus) {
		s.Phase = next
		s.BackupItemOperationsAttempted = int32(len(ops))
		s.BackupItemOperationsCompleted = int32(completed)
		s.BackupItemOperationsFailed = int32(failed)
		if failed > 0 && s.Errors < int32(failed) {
			s.Errors = int32(failed)
		}
	}); err != nil {
		return ctrl.Result{}, err
	}
	if running > 0 {
		return ctrl.Result{RequeueAfter: r.SyncFrequency}, nil
	}
	r.polled.forget(b.UID)
	return ctrl.Result{}, nil
}

func (r *OperationsReconciler) phaseTimeout() time.Duration {
	if r.PhaseTimeout > 0 {
		return r.PhaseTimeout
	}
	return DefaultPhaseTimeout
}

func (r *OperationsReconciler) callTimeout() time.Duration {
	if r.CallTimeout > 0 {
		return r.CallTimeout
	}
	return backup.OperationCallTimeout
}

// pollFailureOutcome decides what a failure to read or write a backup's operations leads to:
// a permanent one (failure.IsPermanent: the location gone or misconfigured, a ReadOnly location, the
// object missing or corrupt, Forbidden) leaves nothing to wait for, and a transient one gives
// up once polls have failed for longer than timeout; the reason says why. Anything else is
// retried with backoff (giveUp false). failingFor counts from the last successful poll, not
// from the phase's start: operations that poll fine may run for hours (itemOperationTimeout).
func pollFailureOutcome(err error, failingFor, timeout time.Duration) (giveUp bool, reason string) {
	switch {
	case failure.IsPermanent(err):
		return true, err.Error()
	case failingFor > timeout:
		return true, fmt.Sprintf("phase timed out after %s: %v", timeout, err)
	}
	return false, ""
}

// cannotPoll handles a failure to read or write a backup's operations (ops are the operations
// as this poll left them when known): retried with backoff, or, when pollFailureOutcome gives
// up, the backup moves on without its unfinished operations. Those it knows of are cancelled
// (each call bounded) and marked failed with the reason; the operations object is rewritten if
// the store takes it (it may be the very problem); status counts every unfinished operation
// failed; an OperationsLost Warning event says why.
func (r *OperationsReconciler) cannotPoll(ctx context.Context, b *cairnv1.Backup, store *location.Store, keys storage.BackupKeys, ops []backup.Operation, known bool, err error) (ctrl.Result, error) {
	since, _ := r.polled.get(b.UID)
	giveUp, reason := pollFailureOutcome(err, r.Clock.Now().Sub(since), r.phaseTimeout())
	if !giveUp {
		return ctrl.Result{}, err
	}
	unfinished := int(b.Status.BackupItemOperationsAttempted - b.Status.BackupItemOperationsCompleted - b.Status.BackupItemOperationsFailed)
	if known {
		unfinished, _, _ = backup.OperationCounts(ops)
	}
	ops = r.cancelEach(ctx, b, ops, reason)
	if known && store != nil {
		if perr := r.stores.call(ctx, func(ctx context.Context) error { return putOperations(ctx, store, keys.ItemOperations, ops) }); perr != nil {
			ctrl.LoggerFrom(ctx).Info("Could not record the operations given up on", "backup", qualifiedName(b), "error", perr.Error())
		}
	}
	attempted, completed, failed := operationTotals(b.Status, ops, known)
	if err := patchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerOperations, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseFinalizingPartiallyFailed
		s.BackupItemOperationsAttempted, s.BackupItemOperationsCompleted, s.BackupItemOperationsFailed = attempted, completed, failed
		s.Errors = max(s.Errors+1, failed)
	}); err != nil {
		return ctrl.Result{}, err
	}
	r.polled.forget(b.UID)
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "OperationsLost", "Poll",
		"Backup goes on without its %d unfinished async operations: %s", max(unfinished, 0), reason)
	return ctrl.Result{}, nil
}

// cancelEach cancels every unfinished operation (backup.CancelOperation), each call with its
// own CallTimeout, and marks it failed with reason.
func (r *OperationsReconciler) cancelEach(ctx context.Context, b *cairnv1.Backup, ops []backup.Operation, reason string) []backup.Operation {
	now := r.Clock.Now()
	out := make([]backup.Operation, len(ops))
	for i, op := range ops {
		callCtx, cancel := context.WithTimeout(ctx, r.callTimeout())
		out[i] = backup.CancelOperation(callCtx, op, r.Registry.Named(op.Action), b, now, reason)
		cancel()
	}
	return out
}

// operationTotals are the operation counts for status once every unfinished operation failed:
// from ops when they are known, else from status (the operations object could not be read),
// where whatever had not completed counts failed.
func operationTotals(st cairnv1.BackupStatus, ops []backup.Operation, known bool) (attempted, completed, failed int32) {
	if !known {
		attempted, completed = st.BackupItemOperationsAttempted, st.BackupItemOperationsCompleted
		return attempted, completed, max(attempted-completed, 0)
	}
	_, c, f := backup.OperationCounts(ops)
	return int32(len(ops)), int32(c), int32(f)
}

// cancel cancels every unfinished operation of a cancelled backup (each call bounded), records
// them if the store takes it, and moves the backup to FinalizingCancelled. No storage failure
// holds a cancel: the operations object is removed by the cleanup anyway, and operations that
// could not be read (known false) are counted failed from status.
func (r *OperationsReconciler) cancel(ctx context.Context, b *cairnv1.Backup, store *location.Store, keys storage.BackupKeys, ops []backup.Operation, known bool, failureReason string) error {
	running, _, _ := backup.OperationCounts(ops)
	ops = r.cancelEach(ctx, b, ops, failureReason)
	if known && store != nil && len(ops) > 0 {
		if err := r.stores.call(ctx, func(ctx context.Context) error { return putOperations(ctx, store, keys.ItemOperations, ops) }); err != nil {
			ctrl.LoggerFrom(ctx).Info("Could not record the cancelled operations", "backup", qualifiedName(b), "error", err.Error())
		}
	}
	attempted, completed, failed := operationTotals(b.Status, ops, known)
	if err := patchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerOperations, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseFinalizingCancelled
		s.BackupItemOperationsAttempted, s.BackupItemOperationsCompleted, s.BackupItemOperationsFailed = attempted, completed, failed
	}); err != nil {
		return err
	}
	r.polled.forget(b.UID)
	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Cancelling", "Cancel",
		"%s while waiting for async operations: %d cancelled; removing its data", failureReason, running)
	return nil
}

// putOperations writes a backup's operations object.
func putOperations(ctx context.Context, store storage.ObjectStore, key string, ops []backup.Operation) error {
	data, err := backup.GzipJSON(ops)
	if err != nil {
		return err
	}
	return store.Put(ctx, key, bytes.NewReader(data))
}

// errCorruptOperations marks an operations object that cannot be decoded: permanent, as
// reading it again gives the same bytes.
var errCorruptOperations = failure.Permanent(errors.New("the operations object is corrupt"))

// readOperations reads a backup's operations object.
func readOperations(ctx context.Context, store storage.ObjectStore, key string) ([]backup.Operation, error) {
	rc, err := store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading the operations: %w", err)
	}
	defer rc.Close()
	// Storage is untrusted input: the object is capped (DESIGN.md section 15).
	var ops []backup.Operation
	if err := storage.DecodeGzipJSON(rc, key, storage.DefaultMaxFileSize, &ops); err != nil {
		return nil, fmt.Errorf("%w: %w", errCorruptOperations, err)
	}
	return ops, nil
}

// SetupWithManager registers the reconciler for backups in its phases.
func (r *OperationsReconciler) SetupWithManager(mgr ctrl.Manager) error {
	owned := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		b, ok := obj.(*cairnv1.Backup)
		return ok && (b.Status.Phase == cairnv1.BackupPhaseWaitingForPluginOperations ||
			b.Status.Phase == cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed)
	})
	return register("operations", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Backup{}, builder.WithPredicates(owned)).
		WithOptions(crcontroller.Options{RateLimiter: storageRateLimiter()}),
		r)
}
