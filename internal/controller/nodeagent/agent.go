// Package nodeagent is the node agent (DESIGN.md section 16): one per node, it owns the
// PodVolumeBackups and PodVolumeRestores of its node. For a backup it reads a volume from the
// kubelet's pods directory and snapshots it into the volume repository; for a restore it
// writes a snapshot back into a restored pod's volume and tells the pod's restore helper. Both
// go through the manager's repository server (the blob proxy). It reports bytes at most once a
// second, stops a cancelled copy at once, records each copy's end when it is stopped, and on
// start fails what a killed agent left InProgress: nothing stays InProgress.
//
// The two kinds share one reconciler (copies.go), over a small adapter each (backups.go,
// restores.go), as the manager's owners share one lifecycle.
package nodeagent

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/blobproxy"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/repository"
)

// Repository is what a copy needs of an open volume repository.
type Repository interface {
	Snapshot(ctx context.Context, dir string, tags map[string]string, progress func(repository.Progress)) (repository.Result, error)
	Restore(ctx context.Context, id, dir string, opt repository.RestoreOptions) (repository.RestoreResult, error)
	Close() error
}

// OpenFunc opens the repository ref with its password; readOnly for a restore.
type OpenFunc func(ctx context.Context, ref cairnv1.RepositoryReference, password string, readOnly bool) (Repository, error)

// Agent is the node agent: the PodVolumeBackups and PodVolumeRestores of one node.
type Agent struct {
	// Client reads (from the cache of this node's objects) and writes the agent's objects.
	Client client.Client
	// Reader reads pods, claims, volumes and the password Secret uncached: the agent does not
	// hold every pod of the cluster in memory, and may not list Secrets.
	Reader    client.Reader
	Namespace string
	// Node is this agent's node: it handles only the objects of that node.
	Node string
	// PodsDir is the kubelet's pods directory as mounted in the agent's container.
	PodsDir   string
	Passwords *podvolume.Passwords
	Open      OpenFunc
	Clock     clock.PassiveClock
	// ProgressInterval is how often a running copy's bytes are written; 0 means a second.
	ProgressInterval time.Duration
	// RestoreParallelism is how many files a restore writes at once; 0 means the repository's
	// default.
	RestoreParallelism int
	// EmptyDirCapacity bounds what a restore writes into an emptyDir without a sizeLimit; 0
	// means no bound.
	EmptyDirCapacity int64
	// MaxCopies is how many copies run at once on the node, of both kinds; 0 means no limit.
	// The others stay New, saying that they wait for a slot.
	MaxCopies int

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc // by kind and name
	// copies counts the copy goroutines, which Stop waits for.
	copies sync.WaitGroup
}

// errCancelled is the cause of a copy stopped by spec.cancel (or its object's deletion).
var errCancelled = errors.New("cancelled")

// errAgentStopping is the cause of a copy stopped because the agent stops.
var errAgentStopping = errors.New("the node agent stopped during the copy; nothing was saved")

// reserve takes one of the node's copy slots for the copy key, or reports that none is free.
// A reserved copy counts as running until release, or until track and untrack.
func (a *Agent) reserve(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running == nil {
		a.running = map[string]context.CancelCauseFunc{}
	}
	if a.MaxCopies > 0 && len(a.running) >= a.MaxCopies {
		return false
	}
	a.running[key] = nil
	return true
}

// release gives back the slot of a copy reserved but never started.
func (a *Agent) release(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cancel, ok := a.running[key]; ok && cancel == nil {
		delete(a.running, key)
	}
}

func (a *Agent) track(key string, cancel context.CancelCauseFunc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running == nil {
		a.running = map[string]context.CancelCauseFunc{}
	}
	a.running[key] = cancel
	a.copies.Add(1)
}

func (a *Agent) untrack(key string) {
	a.mu.Lock()
	delete(a.running, key)
	a.mu.Unlock()
	a.copies.Done()
}

func (a *Agent) isRunning(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.running[key]
	return ok
}

func (a *Agent) stop(key string, cause error) {
	a.mu.Lock()
	cancel := a.running[key]
	a.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// Stop stops every running copy (the agent is shutting down) and waits until each has written
// its end, Failed: the next agent on the node has nothing to clean up after a graceful stop.
func (a *Agent) Stop() {
	a.mu.Lock()
	for _, cancel := range a.running {
		if cancel != nil {
			cancel(errAgentStopping)
		}
	}
	a.mu.Unlock()
	a.copies.Wait()
}

// maintenanceRetry is how often a copy waiting for its repository's maintenance tries again.
const maintenanceRetry = 5 * time.Second

// open opens the repository, waiting while its maintenance runs (the copy stays InProgress,
// bounded by the backup's or restore's itemOperationTimeout and its cancel).
func (a *Agent) open(ctx context.Context, ref cairnv1.RepositoryReference, readOnly bool) (Repository, error) {
	password, err := a.Passwords.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	for {
		repo, err := a.Open(ctx, ref, password, readOnly)
		if !errors.Is(err, blobproxy.ErrMaintenanceRunning) {
			return repo, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(maintenanceRetry):
		}
	}
}

// SetupWithManager registers the agent's two reconcilers; the manager's cache must hold only
// this node's objects (cmd/manager's node-agent command selects them by label).
func (a *Agent) SetupWithManager(mgr ctrl.Manager) error {
	if a.Clock == nil {
		a.Clock = clock.RealClock{}
	}
	// When the manager stops, the copies stop first, each recording its end (the manager
	// waits for its runnables, up to its graceful shutdown timeout).
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		a.Stop()
		return nil
	})); err != nil {
		return err
	}
	if err := (&copies[*cairnv1.PodVolumeBackup]{agent: a, kind: backups(a)}).setup(mgr); err != nil {
		return err
	}
	return (&copies[*cairnv1.PodVolumeRestore]{agent: a, kind: restores(a)}).setup(mgr)
}
