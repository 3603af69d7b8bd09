package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/cairn-backup/cairn/internal/location"
)

// The run of a backup or a restore, from ReadyToStart to the write that ends InProgress, as
// its owner (RunKind.runOwner) drives it: written once over RunKind (kinds.go).

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
//
// The last run of the kind to end gives the memory it used back to the system at once: the
// manager is idle most of its life, and the Go runtime would otherwise keep a finished run's
// heap resident for minutes (after a 10k-item restore the manager's anonymous memory falls
// from 28 to 17 MiB at once; docs/benchmarks.md). One forced collection per run is nothing
// beside the run.
func (r *Runs[S]) Track(ctx context.Context, uid types.UID) (runCtx context.Context, done func()) {
	runCtx, cancel := context.WithCancelCause(ctx)
	r.Running.Set(uid, cancel)
	return runCtx, func() {
		r.Running.Forget(uid)
		cancel(nil)
		if r.Running.Len() == 0 {
			debug.FreeOSMemory()
		}
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

// AfterRun is the phase a run that went through every item goes to (DESIGN.md sections 1 and
// 9): WaitingForPluginOperations while async operations it started are waited for, else
// Finalizing; PartiallyFailed in either when something failed. Each kind's run says what
// waiting and partial mean for it (the run of internal/controller/backup, restoreEnding in
// internal/controller/restore).
func (k *RunKind[O, S, P]) AfterRun(waiting, partial bool) P {
	switch {
	case waiting && partial:
		return k.waitingForOperationsPartial
	case waiting:
		return k.waitingForOperations
	case partial:
		return k.finalizingPartial
	}
	return k.finalizing
}

// ToTenant is err as the status and events of obj may say it: for an object outside the
// operator's namespace (a team's) a location's problem names nothing of its configuration — no
// endpoint, bucket, path or Secret — and the details stay in the manager's log and the
// location's own status.
func ToTenant(obj client.Object, operatorNamespace, locationName string, err error) error {
	if err == nil || obj.GetNamespace() == operatorNamespace {
		return err
	}
	return errors.New(location.TenantMessage(locationName))
}

// DefaultPhaseTimeout is how long a backup or restore may stay in one non-terminal phase that
// cannot move on (storage down, the API server refusing a write) before its owner gives up and
// ends it with the last error (DESIGN.md section 7: no backup stays non-terminal forever).
const DefaultPhaseTimeout = time.Hour

// PhaseTimedOut reports whether obj has been in its current phase for longer than timeout at
// now: strictly longer, so that an object is given the whole timeout, and one looked at exactly
// when it ends is not failed yet (the rule of both kinds; a restore's check once gave up at the
// timeout itself). An object with no phaseTransitionTime (written before the field existed) is
// measured from its creation. A timeout of 0 or less never times out.
func (k *RunKind[O, S, P]) PhaseTimedOut(obj O, now time.Time, timeout time.Duration) bool {
	if timeout <= 0 {
		return false
	}
	since := obj.GetCreationTimestamp().Time
	if entered := *k.fields(k.status(obj)).phaseTransitionTime; entered != nil {
		since = entered.Time
	}
	return now.Sub(since) > timeout
}
