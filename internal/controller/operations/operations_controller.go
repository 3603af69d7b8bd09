// Package operations follows the async operations that backups' and restores' runs start:
// one reconciler over both kinds, the owner of their WaitingForPluginOperations* phases
// (DESIGN.md sections 6 and 9). What differs per kind is its Kind (Backups, Restores). A
// restore with no storage location for its files has its operations handed over in memory
// (Held), made in setup.go and passed to the restore reconciler and to this one.
package operations

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/failure"
)

// DefaultSyncFrequency is how often unfinished async operations are polled.
const DefaultSyncFrequency = 10 * time.Second

// cancelReadTimeout bounds the read of a cancelled object's operations: a store that does not
// answer sooner has them cancelled without being read (its volume copies and restores are
// then stopped by label, when the object is finalized), not after the storage timeout.
const cancelReadTimeout = 2 * time.Second

// Reconciler follows the async operations that a run's actions started: a backup's
// BackupItemActions (DESIGN.md section 6, the "operations" reconciler) or a restore's
// RestoreItemActions (section 9, "restoreoperations"). It owns its kind's
// WaitingForPluginOperations and WaitingForPluginOperationsPartiallyFailed: it polls each
// unfinished operation's Progress, cancels those past spec.itemOperationTimeout, keeps the
// operations file (-itemoperations.json.gz) and the operation counts in status up to date, and
// moves the object to Finalizing[PartiallyFailed] once none is left running. A cancelled (or
// deleted) object has every unfinished operation cancelled and goes to FinalizingCancelled,
// whether or not storage answers. Each Progress and Cancel call has its own deadline. When the
// operations cannot be followed any more — a permanent error, or storage failing for longer
// than PhaseTimeout since the last successful poll — the unfinished ones are cancelled and
// failed, and the object goes to FinalizingPartiallyFailed; other failures are retried with
// backoff. The operations file is its state, so a restarted manager resumes where it was.
//
// It is written once for both kinds; what differs per kind (which actions track the
// operations, the phases, the status fields, its owner name) is its Kind (Backups, Restores).
type Reconciler[T client.Object, P ~string] struct {
	Client   client.Client
	Stores   stores.Stores
	Clock    clock.Clock
	Recorder events.EventRecorder
	Gate     interface {
		Wait(ctx context.Context) error
	}
	// SyncFrequency is how often unfinished operations are polled; 0 means
	// DefaultSyncFrequency.
	SyncFrequency time.Duration
	// WakeOn are the objects whose changes poll their owner's operations at once.
	WakeOn []WakeOn
	// CallTimeout bounds each Progress and Cancel call; 0 means backup.OperationCallTimeout.
	CallTimeout time.Duration
	// PhaseTimeout bounds how long the operations may stay unreadable or unwritable (storage
	// failing) since the last successful poll before the object moves on without them; 0
	// means lifecycle.DefaultPhaseTimeout.
	PhaseTimeout time.Duration

	// Kind is what the reconciler knows of its kind of object (Backups, Restores).
	Kind Kind[T, P]

	// polled is when this process last polled each object's operations (or first saw it): the
	// phase timeout counts from there, since operations that poll fine may run for hours
	// (itemOperationTimeout).
	polled lifecycle.UIDMap[time.Time]
	// polls holds what stops each poll this process runs, which a cancel of its object does
	// (cancelWatch): a poll may wait on storage (a stalled write of the operations file) for
	// up to the storage timeout, and the cancel must not wait behind it.
	polls lifecycle.UIDMap[context.CancelFunc]
}

// Name is the reconciler's name in Config.Controllers, its owner name in the phase tables.
func (r *Reconciler[T, P]) Name() string { return string(r.Kind.owner) }

// Reconcile polls one object's operations.
func (r *Reconciler[T, P]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.Kind.new()
	if found, err := lifecycle.Fetch(ctx, r.Gate, r.Client, req, obj); !found {
		return ctrl.Result{}, err
	}
	if !r.Kind.owns(r.Kind.status(obj).Phase) {
		return ctrl.Result{}, nil
	}
	if _, seen := r.polled.Get(obj.GetUID()); !seen {
		r.polled.Set(obj.GetUID(), r.Clock.Now())
	}
	pollCtx, stopPoll := context.WithCancel(ctx)
	r.polls.Set(obj.GetUID(), stopPoll)
	defer func() {
		r.polls.Forget(obj.GetUID())
		stopPoll()
	}()
	// stopped: a cancel ended this poll while it waited on storage; the cancel's own event,
	// queued meanwhile, reconciles the object again at once, and cancels.
	stopped := func() bool { return pollCtx.Err() != nil && ctx.Err() == nil }
	readCtx := pollCtx
	if _, cancelled := r.Kind.cancellation(obj); cancelled {
		// A cancel never waits on storage: its operations are read for a moment only, or
		// cancelled without them below.
		var stopRead context.CancelFunc
		readCtx, stopRead = context.WithTimeout(pollCtx, cancelReadTimeout)
		defer stopRead()
	}
	var file operationsFile
	var ops []backup.Operation
	err := r.Stores.Call(readCtx, func(ctx context.Context) (err error) {
		if file, err = r.Kind.file(ctx, r.Stores, obj); err != nil {
			return err
		}
		ops, err = file.read(ctx)
		return err
	})
	if failureReason, cancelled := r.Kind.cancellation(obj); cancelled {
		if err != nil {
			// A cancel never waits on storage: the operations that cannot be read are not
			// cancelled by ID; a backup's cleanup still removes the snapshots, found by label.
			ctrl.LoggerFrom(ctx).Info("Could not read the operations of a cancelled "+r.noun()+"; cancelling it without them", "error", err.Error())
			return ctrl.Result{}, r.cancel(ctx, obj, file, nil, false, failureReason)
		}
		return ctrl.Result{}, r.cancel(ctx, obj, file, ops, true, failureReason)
	}
	if err != nil {
		if stopped() {
			return ctrl.Result{}, nil
		}
		return r.cannotPoll(ctx, obj, file, nil, false, err)
	}

	// pollCtx: a cancel stops a Progress call that waits (a pod's post hooks running) within
	// seconds; the operations are then left as they were, and the cancel cancels them.
	ops, changed := r.advance(pollCtx, obj, ops)
	if stopped() {
		return ctrl.Result{}, nil
	}
	if changed {
		if err := r.Stores.Call(pollCtx, func(ctx context.Context) error { return file.write(ctx, ops) }); err != nil {
			if stopped() {
				return ctrl.Result{}, nil
			}
			return r.cannotPoll(ctx, obj, file, ops, true, fmt.Errorf("writing the operations: %w", err))
		}
	}
	r.polled.Set(obj.GetUID(), r.Clock.Now())

	running, completed, failed := backup.OperationCounts(ops)
	if err := r.Kind.patch(ctx, r.Client, r.Clock, obj, func(s *operationsStatus[P]) {
		s.Phase = r.Kind.next(s.Phase, ops)
		withOperationHooks(r.Kind, s, ops)
		s.Attempted, s.Completed, s.Failed = int32(len(ops)), int32(completed), int32(failed)
		s.Errors = max(s.Errors, int32(failed))
		s.BytesDone, s.BytesTotal = backup.OperationBytes(ops)
	}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if running > 0 {
		return ctrl.Result{RequeueAfter: r.syncFrequency()}, nil
	}
	r.forget(obj, file)
	return ctrl.Result{}, nil
}

// advance asks each unfinished operation's action how it is doing (backup.Advance), each call
// with its own CallTimeout, and reports whether the operations file must be written again: an
// operation's phase, error or description changed. Progress counts alone do not rewrite it (a
// volume copy reports bytes every second, and the file is an object in storage); the status
// shows them from this poll, and the next poll asks the action again.
// An operation that fails now is told in an OperationFailed Warning event.
func (r *Reconciler[T, P]) advance(ctx context.Context, obj T, ops []backup.Operation) ([]backup.Operation, bool) {
	now := r.Clock.Now()
	changed := false
	for i, op := range ops {
		callCtx, cancel := context.WithTimeout(ctx, r.callTimeout())
		next := backup.Advance(callCtx, op, r.Kind.tracker(op.Action, obj), now, r.Kind.itemOperationTimeout(obj))
		cancel()
		if next.Phase != op.Phase || next.Error != op.Error || next.Description != op.Description {
			changed = true
		}
		if next.Phase == backup.OperationFailed && op.Phase != backup.OperationFailed {
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "OperationFailed", "Poll",
				"Operation %s of %s on %s failed: %s", next.OperationID, next.Action, next.Item, next.Error)
		}
		ops[i] = next
	}
	return ops, changed
}

func (r *Reconciler[T, P]) phaseTimeout() time.Duration {
	if r.PhaseTimeout > 0 {
		return r.PhaseTimeout
	}
	return lifecycle.DefaultPhaseTimeout
}

func (r *Reconciler[T, P]) callTimeout() time.Duration {
	if r.CallTimeout > 0 {
		return r.CallTimeout
	}
	return backup.OperationCallTimeout
}

func (r *Reconciler[T, P]) syncFrequency() time.Duration {
	if r.SyncFrequency > 0 {
		return r.SyncFrequency
	}
	return DefaultSyncFrequency
}

// noun names the kind in log lines ("backup", "restore").
func (r *Reconciler[T, P]) noun() string { return strings.ToLower(r.Kind.noun) }

// pollFailureOutcome decides what a failure to read or write an object's operations leads to:
// a permanent one (failure.IsPermanent: the location gone or misconfigured, a ReadOnly location,
// the object missing or corrupt, Forbidden) leaves nothing to wait for, and a transient one
// gives up once polls have failed for longer than timeout; the reason says why. Anything else
// is retried with backoff (giveUp false). failingFor counts from the last successful poll, not
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

// cannotPoll handles a failure to read or write an object's operations (ops are the operations
// as this poll left them when known): retried with backoff, or, when pollFailureOutcome gives
// up, the object moves on without its unfinished operations. Those it knows of are cancelled
// (each call bounded) and marked failed with the reason; the operations file is rewritten if
// the store takes it (it may be the very problem); status counts every unfinished operation
// failed; an OperationsLost Warning event says why.
func (r *Reconciler[T, P]) cannotPoll(ctx context.Context, obj T, file operationsFile, ops []backup.Operation, known bool, err error) (ctrl.Result, error) {
	since, _ := r.polled.Get(obj.GetUID())
	giveUp, reason := pollFailureOutcome(err, r.Clock.Now().Sub(since), r.phaseTimeout())
	if !giveUp {
		return ctrl.Result{}, err
	}
	st := r.Kind.status(obj)
	unfinished := int(st.Attempted - st.Completed - st.Failed)
	if known {
		unfinished, _, _ = backup.OperationCounts(ops)
	}
	ops = r.cancelEach(ctx, obj, ops, reason)
	if known && file != nil {
		if perr := r.Stores.Call(ctx, func(ctx context.Context) error { return file.write(ctx, ops) }); perr != nil {
			ctrl.LoggerFrom(ctx).Info("Could not record the operations given up on", r.noun(), lifecycle.ObjectName(obj), "error", perr.Error())
		}
	}
	attempted, completed, failed := operationTotals(st, ops, known)
	if err := r.Kind.patch(ctx, r.Client, r.Clock, obj, func(s *operationsStatus[P]) {
		s.Phase = r.Kind.finalizingPartiallyFailed
		withOperationHooks(r.Kind, s, ops)
		s.Attempted, s.Completed, s.Failed = attempted, completed, failed
		s.Errors = max(s.Errors+1, failed)
	}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.forget(obj, file)
	r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "OperationsLost", "Poll",
		"%s goes on without its %d unfinished async operations: %s", r.Kind.noun, max(unfinished, 0), reason)
	return ctrl.Result{}, nil
}

// cancelEach cancels every unfinished operation (backup.Cancel), each call with its own
// CallTimeout, and marks it failed with reason.
func (r *Reconciler[T, P]) cancelEach(ctx context.Context, obj T, ops []backup.Operation, reason string) []backup.Operation {
	now := r.Clock.Now()
	out := make([]backup.Operation, len(ops))
	for i, op := range ops {
		callCtx, cancel := context.WithTimeout(ctx, r.callTimeout())
		out[i] = backup.Cancel(callCtx, op, r.Kind.tracker(op.Action, obj), now, reason)
		cancel()
	}
	return out
}

// operationTotals are the operation counts for status once every unfinished operation failed:
// from ops when they are known, else from status st (the operations file could not be read),
// where whatever had not completed counts failed.
func operationTotals[P ~string](st operationsStatus[P], ops []backup.Operation, known bool) (attempted, completed, failed int32) {
	if !known {
		return st.Attempted, st.Completed, max(st.Attempted-st.Completed, 0)
	}
	_, c, f := backup.OperationCounts(ops)
	return int32(len(ops)), int32(c), int32(f)
}

// cancel cancels every unfinished operation of a cancelled object (each call bounded), records
// them if the store takes it, and moves the object to FinalizingCancelled. No storage failure
// holds a cancel: a backup's operations file is removed by the cleanup anyway, and operations
// that could not be read (known false) are counted failed from status.
func (r *Reconciler[T, P]) cancel(ctx context.Context, obj T, file operationsFile, ops []backup.Operation, known bool, failureReason string) error {
	running, _, _ := backup.OperationCounts(ops)
	ops = r.cancelEach(ctx, obj, ops, failureReason)
	if known && file != nil && len(ops) > 0 {
		if err := r.Stores.Call(ctx, func(ctx context.Context) error { return file.write(ctx, ops) }); err != nil {
			ctrl.LoggerFrom(ctx).Info("Could not record the cancelled operations", r.noun(), lifecycle.ObjectName(obj), "error", err.Error())
		}
	}
	attempted, completed, failed := operationTotals(r.Kind.status(obj), ops, known)
	if err := r.Kind.patch(ctx, r.Client, r.Clock, obj, func(s *operationsStatus[P]) {
		s.Phase = r.Kind.finalizingCancelled
		withOperationHooks(r.Kind, s, ops)
		s.Attempted, s.Completed, s.Failed = attempted, completed, failed
	}); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.forget(obj, file)
	r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, "Cancelling", "Cancel",
		"%s while waiting for async operations: %d cancelled; %s", failureReason, running, r.Kind.afterCancel)
	return nil
}

// forget lets go of what this process keeps of an object that has left its phases.
func (r *Reconciler[T, P]) forget(obj T, file operationsFile) {
	r.polled.Forget(obj.GetUID())
	if file != nil {
		file.forget()
	}
}

// SetupWithManager registers the reconciler for the objects of its kind in its phases.
func (r *Reconciler[T, P]) SetupWithManager(mgr ctrl.Manager) error {
	owned := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		o, ok := obj.(T)
		return ok && r.Kind.owns(r.Kind.status(o).Phase)
	})
	return lifecycle.Register(r.Name(), r.wakeOn(ctrl.NewControllerManagedBy(mgr).
		For(r.Kind.new(), builder.WithPredicates(owned)).
		Watches(r.Kind.new(), r.cancelWatch()).
		WithOptions(crcontroller.Options{RateLimiter: lifecycle.StorageRateLimiter()})),
		r)
}

// wakeOn adds b a watch of each WakeOn kind, which reconciles the object its Owner names.
func (r *Reconciler[T, P]) wakeOn(b *builder.Builder) *builder.Builder {
	for _, w := range r.WakeOn {
		b = b.Watches(w.Object, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			if name, ok := w.Owner(obj); ok {
				return []reconcile.Request{{NamespacedName: name}}
			}
			return nil
		}))
	}
	return b
}

// cancelWatch stops the running poll of an object the moment it shows a cancel (or its
// deletion): the reconcile is busy with that poll, so its own event waits behind it.
func (r *Reconciler[T, P]) cancelWatch() handler.Funcs {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			obj, ok := e.ObjectNew.(T)
			if !ok {
				return
			}
			if _, cancelled := r.Kind.cancellation(obj); cancelled {
				if stop, polling := r.polls.Get(obj.GetUID()); polling {
					stop()
				}
			}
		},
	}
}

// WakeOn is a kind of object whose changes are news of an operation (a PodVolumeBackup's
// progress): a change polls the operations of the object Owner names at once, rather than at
// the next SyncFrequency.
type WakeOn struct {
	Object client.Object
	Owner  func(client.Object) (types.NamespacedName, bool)
}
