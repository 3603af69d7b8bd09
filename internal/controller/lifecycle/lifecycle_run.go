package lifecycle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/failure"
	"github.com/cairn-backup/cairn/internal/phases"
)

// The run of a backup or a restore, from ReadyToStart to the write that ends InProgress, as
// its owner (RunKind.runOwner) drives it: written once over RunKind (lifecycle.go).

// StorageWaitRequeue is how soon a ReadyToStart object whose location was not validated yet is
// looked at again.
const StorageWaitRequeue = time.Second

// Runs is what the owner of a kind's runs remembers of them in this process, by UID; the zero
// value is empty and ready.
type Runs[S any] struct {
	// Running holds the cancel function of each run of this process.
	Running UIDMap[context.CancelCauseFunc]
	// Unwritten holds the status write that ends a run and could not be written, for the next
	// reconcile: it finds the object still InProgress and must write this, not mistake it for
	// one a restart interrupted.
	Unwritten UIDMap[func(*S)]
}

// Track registers a run of the object uid, before its InProgress write so that no cancel can be
// missed. It returns the run's context, which StopIfCancelled ends, and done, which the
// reconcile defers. The run lasts as long as the reconcile.
func (r *Runs[S]) Track(ctx context.Context, uid types.UID) (runCtx context.Context, done func()) {
	runCtx, cancel := context.WithCancelCause(ctx)
	r.Running.Set(uid, cancel)
	return runCtx, func() {
		r.Running.Forget(uid)
		cancel(nil)
	}
}

// StopIfCancelled cancels obj's run in this process, if it has one, when obj asks to stop.
func (k *RunKind[O, S, P]) StopIfCancelled(runs *Runs[S], obj O) {
	if cancel, running := runs.Running.Get(obj.GetUID()); running {
		if _, _, stop := k.Cancellation(obj); stop {
			cancel(k.cancelCause)
		}
	}
}

// InRunPhases passes the objects in the phases the run's owner owns: ReadyToStart and
// InProgress.
func (k *RunKind[O, S, P]) InRunPhases() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool {
		o, ok := obj.(O)
		return ok && (k.phaseOf(o) == k.readyToStart || k.phaseOf(o) == k.inProgress)
	})
}

// RunWatch is the watch of the run's owner on every object of the kind. The reconcile of a
// running object is busy running it: a cancel or a deletion reaches the run through this watch,
// which cancels its context. An object that is gone has no unwritten ending left to write.
func (k *RunKind[O, S, P]) RunWatch(runs *Runs[S]) handler.Funcs {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if obj, ok := e.ObjectNew.(O); ok {
				k.StopIfCancelled(runs, obj)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			runs.Unwritten.Forget(e.Object.GetUID())
		},
	}
}

// EndBeforeStart ends a cancelled or deleted object that has not started: Failed, out of the
// queue, Cancelled=True, and a Cancelled event. owner is the reconciler that owns its phase (the
// queue for New and Queued, the run's owner for ReadyToStart).
func (k *RunKind[O, S, P]) EndBeforeStart(ctx context.Context, c client.Client, clk clock.PassiveClock, rec events.EventRecorder, owner phases.Owner, obj O) error {
	_, failureReason := k.StopReasons(obj)
	condition, message := k.beforeStartMessages(failureReason)
	now := metav1.NewTime(clk.Now())
	if err := PatchStatus(ctx, c, clk, k, owner, obj, func(s *S) { k.CancelledStatus(obj, s, condition, now) }); err != nil {
		return client.IgnoreNotFound(err)
	}
	rec.Eventf(obj, nil, corev1.EventTypeNormal, "Cancelled", "Cancel", "%s", message)
	return nil
}

// WaitForStorage keeps a ReadyToStart object waiting for its storage location, with a
// StorageReady=False condition saying why (cause), and ends it Failed once it has waited
// timeout, freeing its slot. While cause is a waiting failure (a location not validated yet) it
// is looked at again after StorageWaitRequeue; any other cause is retried with the rate
// limiter's backoff.
func (k *RunKind[O, S, P]) WaitForStorage(ctx context.Context, c client.Client, clk clock.PassiveClock, obj O, cause error, timeout time.Duration) (ctrl.Result, error) {
	now := metav1.NewTime(clk.Now())
	if k.PhaseTimedOut(obj, now.Time, timeout) {
		reason := fmt.Sprintf("could not start within %s: %v", timeout, cause)
		return ctrl.Result{}, client.IgnoreNotFound(PatchStatus(ctx, c, clk, k, k.runOwner, obj, func(s *S) {
			f := k.fields(s)
			*f.phase, *f.failureReason, *f.completionTimestamp = k.failed, reason, &now
		}))
	}
	message := fmt.Sprintf("waiting for %s: %v", k.awaitedStorage(obj), cause)
	if err := PatchStatus(ctx, c, clk, k, k.runOwner, obj, func(s *S) {
		meta.SetStatusCondition(k.fields(s).conditions, metav1.Condition{
			Type: conditionStorageReady, Status: metav1.ConditionFalse, Reason: cairnv1.ReasonStorageUnavailable,
			Message: message, ObservedGeneration: obj.GetGeneration(), LastTransitionTime: now,
		})
	}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if failure.IsWaiting(cause) {
		return ctrl.Result{RequeueAfter: StorageWaitRequeue}, nil
	}
	return ctrl.Result{}, cause
}

// EndRun writes the status that ends a run (mutate). Someone else's write meanwhile (a label,
// an annotation, a cancel) makes the optimistic lock fail: the write is retried on the object
// fresh from apiReader, and when onCancel is given and the fresh object shows a cancel, onCancel
// is written instead; an object that left InProgress meanwhile is not written over. A write that
// still fails is kept in runs for the next reconcile (see Orphaned). The writes use the
// reconcile's context, never the run's, which a cancel ends.
func (k *RunKind[O, S, P]) EndRun(ctx context.Context, c client.Client, apiReader client.Reader, clk clock.PassiveClock, runs *Runs[S], obj O, mutate, onCancel func(*S)) error {
	write := mutate
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			if err := apiReader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			if k.phaseOf(obj) != k.inProgress {
				write = nil // someone else ended it: nothing to write
				return nil
			}
			if _, _, cancelled := k.Cancellation(obj); cancelled && onCancel != nil {
				write = onCancel
			}
		}
		first = false
		return PatchStatus(ctx, c, clk, k, k.runOwner, obj, write)
	})
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	runs.Unwritten.Set(obj.GetUID(), write)
	return err
}

// Orphaned handles an InProgress object a reconcile found: one this process runs is left alone;
// one whose ending could not be written gets it written; any other was running when the
// operator stopped, and is ended (endInterruptedRun). The API server is asked, not the cache,
// which may still show InProgress for a run this process just ended.
func (k *RunKind[O, S, P]) Orphaned(ctx context.Context, c client.Client, apiReader client.Reader, clk clock.PassiveClock, runs *Runs[S], obj O) error {
	fresh := k.newObject()
	if err := apiReader.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
		return client.IgnoreNotFound(err)
	}
	if k.phaseOf(fresh) != k.inProgress {
		return nil
	}
	if _, running := runs.Running.Get(fresh.GetUID()); running {
		return nil
	}
	if mutate, ok := runs.Unwritten.Take(fresh.GetUID()); ok {
		return k.EndRun(ctx, c, apiReader, clk, runs, fresh, mutate, nil)
	}
	return client.IgnoreNotFound(k.endInterruptedRun(ctx, c, clk, fresh))
}

// InterruptedEnding is where an InProgress object goes when the operator restarted during its
// run: its phase and failureReason (RunKind.afterInterrupted).
func (k *RunKind[O, S, P]) InterruptedEnding(obj O) (P, string) {
	_, _, cancelled := k.Cancellation(obj)
	return k.afterInterrupted(cancelled)
}

// endInterruptedRun moves on an object that was InProgress when the operator stopped
// (InterruptedEnding); one that ends there gets its completionTimestamp. It touches no storage:
// what a backup's run left is removed by the finalizer, with retries, so a storage service that
// is down at the restart neither holds the restart nor leaves the partial data behind for good.
// It writes as the run's owner, also when the restart recovery calls it.
func (k *RunKind[O, S, P]) endInterruptedRun(ctx context.Context, c client.Client, clk clock.PassiveClock, obj O) error {
	next, failureReason := k.InterruptedEnding(obj)
	now := metav1.NewTime(clk.Now())
	return PatchStatus(ctx, c, clk, k, k.runOwner, obj, func(s *S) {
		f := k.fields(s)
		*f.phase, *f.failureReason = next, failureReason
		if next.IsTerminal() {
			*f.completionTimestamp = &now
		}
	})
}
