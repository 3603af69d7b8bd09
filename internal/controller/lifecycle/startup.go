package lifecycle

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RecoveryStep is one piece of restart recovery (DESIGN.md section 7), such as failing the
// backups that were InProgress when the previous manager stopped.
type RecoveryStep struct {
	// Name says what the step does, for logs and errors.
	Name string
	// Run does the step. An error stops the manager, which is restarted and tries again.
	Run func(ctx context.Context) error
}

// StartupRecovery runs the restart-recovery steps once, after this manager becomes the leader,
// and then opens its gate. Reconcilers that own backup phases wait for the gate (Wait) before
// they act, so no backup is handled with state left over from a previous run.
type StartupRecovery struct {
	steps []RecoveryStep
	done  chan struct{}
}

// NewStartupRecovery returns a recovery that runs these steps in order.
func NewStartupRecovery(steps ...RecoveryStep) *StartupRecovery {
	return &StartupRecovery{steps: steps, done: make(chan struct{})}
}

// Start runs every step, opens the gate and returns. It implements manager.Runnable.
func (r *StartupRecovery) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("startup-recovery")
	for _, step := range r.steps {
		if err := step.Run(ctx); err != nil {
			return fmt.Errorf("startup recovery step %q: %w", step.Name, err)
		}
		log.Info("Ran startup recovery step", "step", step.Name)
	}
	close(r.done)
	return nil
}

// NeedLeaderElection makes recovery run only on the leader. It implements
// manager.LeaderElectionRunnable.
func (r *StartupRecovery) NeedLeaderElection() bool { return true }

// Wait blocks until every step has run, or ctx ends.
func (r *StartupRecovery) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// EndInterruptedRuns is the restart-recovery step for the InProgress objects of kind k
// (DESIGN.md sections 7 and 9): each was running when the previous manager stopped, and is
// ended (RunKind.endInterruptedRun). No storage call: the step is quick whatever the storage
// does. An object deleted meanwhile is skipped.
func EndInterruptedRuns[O client.Object, S any, P phase](c client.Client, clk clock.PassiveClock, k *RunKind[O, S, P]) RecoveryStep {
	return RecoveryStep{Name: k.recoveryStep, Run: func(ctx context.Context) error {
		objs, err := k.list(ctx, c)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if k.phaseOf(obj) != k.inProgress {
				continue
			}
			if err := k.endInterruptedRun(ctx, c, clk, obj); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("ending %s %s: %w", k.name, ObjectName(obj), err)
			}
		}
		return nil
	}}
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

// Fetch waits for gate (the startup recovery: no owner acts before it ran), then reads the
// object req names into obj. It reports whether there is one: a NotFound is not an error, the
// object is gone and its owner has nothing left to do.
func Fetch(ctx context.Context, gate interface{ Wait(context.Context) error }, c client.Reader, req ctrl.Request, obj client.Object) (bool, error) {
	if err := gate.Wait(ctx); err != nil {
		return false, err
	}
	if err := c.Get(ctx, req.NamespacedName, obj); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return true, nil
}
