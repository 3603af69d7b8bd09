package controller

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
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
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
)

// DefaultItemOperationSyncFrequency is how often unfinished async operations are polled.
const DefaultItemOperationSyncFrequency = 10 * time.Second

// OperationsReconciler follows the async operations that BackupItemActions started (DESIGN.md
// section 6). It owns WaitingForPluginOperations and WaitingForPluginOperationsPartiallyFailed:
// it polls each unfinished operation's Progress, cancels those past spec.itemOperationTimeout,
// keeps the -itemoperations.json.gz object and the operation counts in status up to date, and
// moves the backup to Finalizing[PartiallyFailed] once none is left running. A cancelled (or
// deleted) backup has every unfinished operation cancelled and goes to FinalizingCancelled.
// The operations object is its state, so a restarted manager resumes where it was.
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
	// CallTimeout bounds each Progress and Cancel call; 0 means operationCallTimeout.
	CallTimeout time.Duration
	// PhaseTimeout bounds how long the operations may stay unreadable or unwritable (storage
	// failing) before the backup moves on without them; 0 means DefaultPhaseTimeout.
	PhaseTimeout time.Duration

	// polled is when this process last polled each backup's operations (or first saw it): the
	// phase timeout counts from there, since operations that poll fine may run for hours
	// (itemOperationTimeout).
	polled uidMap[time.Time]
}

// operationCallTimeout bounds each Progress and Cancel call: one operation whose action hangs
// fails alone, and the others are still polled.
const operationCallTimeout = 30 * time.Second

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
		ops, err = readOperations(ctx, store, keys)
		return err
	})
	if _, failureReason, cancelled := cancellation(&b); cancelled {
		if err != nil && !unreadableForGood(err) {
			return ctrl.Result{}, err // storage down: the operations can still be cancelled later
		}
		// With the operations object gone for good there is nothing to cancel by ID; the
		// cleanup still removes the snapshots, which are found by label.
		return ctrl.Result{}, r.cancel(ctx, &b, store, keys, ops, failureReason)
	}
	if err != nil {
		return r.cannotPoll(ctx, &b, err)
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
		if err := r.stores.call(ctx, func(ctx context.Context) error { return putOperations(ctx, store, keys, ops) }); err != nil {
			return r.cannotPoll(ctx, &b, err)
		}
	}
	r.polled.set(b.UID, r.Clock.Now())

	running, completed, failed := backup.OperationCounts(ops)
	next := backup.NextAfterOperations(b.Status.Phase, ops)
	if err := patchBackupStatus(ctx, r.Client, r.Clock, &b, func(s *cairnv1.BackupStatus) {
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

func (r *OperationsReconciler) callTimeout() time.Duration {
	if r.CallTimeout > 0 {
		return r.CallTimeout
	}
	return operationCallTimeout
}

// cannotPoll handles a failure to read or write a backup's operations. A permanent one (the
// location gone or ReadOnly, the object missing or corrupt) and a transient one that lasted
// PhaseTimeout since the last poll leave nothing to wait for: the backup moves on to
// FinalizingPartiallyFailed, its operations counted failed, with a Warning event. Any other is
// retried with backoff.
func (r *OperationsReconciler) cannotPoll(ctx context.Context, b *cairnv1.Backup, err error) (ctrl.Result, error) {
	since, _ := r.polled.get(b.UID)
	timedOut := r.Clock.Now().Sub(since) > r.PhaseTimeout
	if !isPermanent(err) && !unreadableForGood(err) && !timedOut {
		return ctrl.Result{}, err
	}
	reason := fmt.Sprintf("the async operations could not be followed: %v", err)
	if timedOut {
		reason = fmt.Sprintf("the async operations could not be followed for %s: %v", r.PhaseTimeout, err)
	}
	unfinished := b.Status.BackupItemOperationsAttempted - b.Status.BackupItemOperationsCompleted - b.Status.BackupItemOperationsFailed
	if err := patchBackupStatus(ctx, r.Client, r.Clock, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseFinalizingPartiallyFailed
		s.BackupItemOperationsFailed += max(unfinished, 0)
		s.Errors += max(unfinished, 1)
	}); err != nil {
		return ctrl.Result{}, err
	}
	r.polled.forget(b.UID)
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "OperationsLost", "Poll", "Backup goes on without its unfinished operations: %s", reason)
	return ctrl.Result{}, nil
}

// cancel cancels every unfinished operation of a cancelled backup, records them, and moves the
// backup to FinalizingCancelled. A Cancel is safe to repeat, so a failed write is retried whole.
func (r *OperationsReconciler) cancel(ctx context.Context, b *cairnv1.Backup, store *location.Store, keys storage.BackupKeys, ops []backup.Operation, failureReason string) error {
	running, _, _ := backup.OperationCounts(ops)
	cancelCtx, cancelCalls := context.WithTimeout(ctx, r.callTimeout())
	ops = backup.CancelOperations(cancelCtx, ops, r.Registry, b, r.Clock.Now(), failureReason)
	cancelCalls()
	if store != nil && len(ops) > 0 {
		if err := r.stores.call(ctx, func(ctx context.Context) error { return putOperations(ctx, store, keys, ops) }); err != nil {
			return err
		}
	}
	_, completed, failed := backup.OperationCounts(ops)
	if err := patchBackupStatus(ctx, r.Client, r.Clock, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseFinalizingCancelled
		s.BackupItemOperationsAttempted = int32(len(ops))
		s.BackupItemOperationsCompleted = int32(completed)
		s.BackupItemOperationsFailed = int32(failed)
	}); err != nil {
		return err
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Cancelling", "Cancel",
		"%s while waiting for async operations: %d cancelled; removing its data", failureReason, running)
	return nil
}

// putOperations writes a backup's operations object.
func putOperations(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys, ops []backup.Operation) error {
	data, err := backup.GzipJSON(ops)
	if err != nil {
		return err
	}
	return store.Put(ctx, keys.ItemOperations, bytes.NewReader(data))
}

// errCorruptOperations marks an operations object that cannot be decoded.
var errCorruptOperations = errors.New("the operations object is corrupt")

// unreadableForGood tells the failures to read the operations that waiting will not mend: the
// location or the object is gone, or the object is corrupt.
func unreadableForGood(err error) bool {
	return errors.Is(err, location.ErrMissing) || errors.Is(err, location.ErrConfig) ||
		errors.Is(err, storage.ErrNotFound) || errors.Is(err, errCorruptOperations)
}

// readOperations reads a backup's operations object.
func readOperations(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys) ([]backup.Operation, error) {
	rc, err := store.Get(ctx, keys.ItemOperations)
	if err != nil {
		return nil, fmt.Errorf("reading the operations: %w", err)
	}
	defer rc.Close()
	gz, err := gzip.NewReader(rc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCorruptOperations, err)
	}
	var ops []backup.Operation
	if err := json.NewDecoder(gz).Decode(&ops); err != nil {
		return nil, fmt.Errorf("%w: %w", errCorruptOperations, err)
	}
	return ops, nil
}

// SetupWithManager registers the reconciler for backups in its phases.
func (r *OperationsReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.PhaseTimeout <= 0 {
		r.PhaseTimeout = DefaultPhaseTimeout
	}
	owned := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		b, ok := obj.(*cairnv1.Backup)
		return ok && (b.Status.Phase == cairnv1.BackupPhaseWaitingForPluginOperations ||
			b.Status.Phase == cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed)
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("operations").
		For(&cairnv1.Backup{}, builder.WithPredicates(owned)).
		WithOptions(crcontroller.Options{RateLimiter: storageRateLimiter()}).
		Complete(r)
}
