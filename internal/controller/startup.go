package controller

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
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
