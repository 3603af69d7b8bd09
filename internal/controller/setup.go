// Package controller holds Cairn's reconcilers. Each one owns the Backup phases named in its
// doc comment (DESIGN.md section 1, docs/architecture.md) and acts on no others; they never
// call each other and coordinate only through status.phase.
package controller

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
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
	// QueueResyncPeriod is how often the queue is reconciled without any event; 0 means
	// DefaultQueueResyncPeriod.
	QueueResyncPeriod time.Duration
	// Clock is the time source of every reconciler; nil means the real clock.
	Clock clock.Clock
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
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	recovery := NewStartupRecovery(cfg.RecoverySteps...)
	if err := mgr.Add(recovery); err != nil {
		return fmt.Errorf("adding the startup recovery: %w", err)
	}
	if cfg.QueueResyncPeriod <= 0 {
		cfg.QueueResyncPeriod = DefaultQueueResyncPeriod
	}
	if err := (&BackupQueueReconciler{
		Client:            mgr.GetClient(),
		Namespace:         cfg.Namespace,
		ConcurrentBackups: cfg.ConcurrentBackups,
		ResyncPeriod:      cfg.QueueResyncPeriod,
		Clock:             cfg.Clock,
		Recorder:          mgr.GetEventRecorder("cairn-queue"),
		Gate:              recovery,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the queue reconciler: %w", err)
	}
	if err := (&BackupStorageLocationReconciler{
		Client:    mgr.GetClient(),
		Namespace: cfg.Namespace,
		Clock:     cfg.Clock,
		Recorder:  mgr.GetEventRecorder("cairn-storage-location"),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the storage location reconciler: %w", err)
	}
	return nil
}

// CacheOptions limits the manager's cache to what Cairn reads: storage locations and Secrets
// only in the operator's namespace (never every Secret of the cluster), Backups everywhere
// (teams create them in their own namespaces).
func CacheOptions(namespace string) cache.Options {
	only := map[string]cache.Config{namespace: {}}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}:                 {Namespaces: only},
		&cairnv1.BackupStorageLocation{}: {Namespaces: only},
	}}
}
