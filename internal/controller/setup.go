// Package controller holds Cairn's reconcilers. Each one owns the Backup phases named in its
// doc comment (DESIGN.md section 1, docs/architecture.md) and acts on no others; they never
// call each other and coordinate only through status.phase.
package controller

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Config is what the reconcilers need from the manager's flags.
type Config struct {
	// Namespace is the operator's namespace: it holds the storage locations and the
	// administrators' backups.
	Namespace string
	// ConcurrentBackups is how many backups may be ReadyToStart or InProgress at once.
	ConcurrentBackups int
	// ItemBlockWorkerCount is the size of each running backup's own worker pool.
	ItemBlockWorkerCount int
	// RecoverySteps run once, in order, when this manager starts leading and before any
	// reconciler handles a backup (DESIGN.md section 7).
	RecoverySteps []RecoveryStep
}

// SetupWithManager registers the startup recovery and every reconciler with mgr.
func SetupWithManager(mgr ctrl.Manager, cfg Config) error {
	if cfg.ConcurrentBackups < 1 {
		return fmt.Errorf("concurrent backups must be at least 1, got %d", cfg.ConcurrentBackups)
	}
	if cfg.ItemBlockWorkerCount < 1 {
		return fmt.Errorf("item block worker count must be at least 1, got %d", cfg.ItemBlockWorkerCount)
	}
	recovery := NewStartupRecovery(cfg.RecoverySteps...)
	if err := mgr.Add(recovery); err != nil {
		return fmt.Errorf("adding the startup recovery: %w", err)
	}
	return nil
}
