// Package nodeagent is the node agent (DESIGN.md section 16): one per node, it owns the
// PodVolumeBackups of its node. It reads each volume from the kubelet's pods directory and
// snapshots it into the volume repository through the manager's blob proxy, reports bytes at
// most once a second, stops a cancelled copy at once, and on start fails what it was running
// when it stopped: nothing stays InProgress.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/blobproxy"
	"github.com/cairn-backup/cairn/internal/metrics"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/repository"
	"github.com/cairn-backup/cairn/internal/volumes"

	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
)

// Repository is what a copy needs of an open volume repository.
type Repository interface {
	Snapshot(ctx context.Context, dir string, tags map[string]string, progress func(repository.Progress)) (repository.Result, error)
	Close() error
}

// OpenFunc opens the repository ref with its password.
type OpenFunc func(ctx context.Context, ref cairnv1.RepositoryReference, password string) (Repository, error)

// Reconciler is the node agent's reconciler of PodVolumeBackups.
type Reconciler struct {
	// Client reads (from the cache of this node's PodVolumeBackups) and writes PodVolumeBackups.
	Client client.Client
	// Reader reads pods, claims and volumes uncached: the agent does not hold every pod of the
	// cluster in memory.
	Reader    client.Reader
	Namespace string
	// Node is this agent's node: it handles only the PodVolumeBackups of that node.
	Node string
	// PodsDir is the kubelet's pods directory as mounted in the agent's container.
	PodsDir   string
	Passwords *podvolume.Passwords
	Open      OpenFunc
	Clock     clock.PassiveClock
	// ProgressInterval is how often a running copy's bytes are written; 0 means a second.
	ProgressInterval time.Duration

	mu      sync.Mutex
	running map[string]*copyRun
	// copies counts the copy goroutines, which Stop waits for.
	copies sync.WaitGroup
}

// copyRun is a copy this process runs.
type copyRun struct {
	cancel context.CancelCauseFunc
}

// errCancelled is the cause of a copy stopped by spec.cancel.
var errCancelled = errors.New("cancelled")

// step is what the agent does with a PodVolumeBackup.
type step string

const (
	stepNone   step = "None"
	stepStart  step = "Start"
	stepStop   step = "Stop"   // cancel the running copy; it writes Cancelled
	stepCancel step = "Cancel" // not running here: Cancelled at once
	stepFail   step = "Fail"   // InProgress but not running here: the agent restarted
)

// nextStep decides what the agent does with a PodVolumeBackup of its node, from its phase,
// spec.cancel, and whether this process runs its copy.
func nextStep(phase cairnv1.PodVolumePhase, cancel, running bool) step {
	switch {
	case phase.IsTerminal():
		return stepNone
	case cancel && running:
		return stepStop
	case cancel:
		return stepCancel
	case running:
		return stepNone
	case phase == cairnv1.PodVolumePhaseInProgress:
		return stepFail
	}
	return stepStart
}

// Messages of copies that end without running to completion.
const (
	messageRestarted       = "the node agent restarted during the copy; nothing was saved"
	messageCancelledBefore = "cancelled before the copy started"
	messageCancelled       = "cancelled during the copy; nothing was saved"
)

func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pvb cairnv1.PodVolumeBackup
	if err := r.Client.Get(ctx, req.NamespacedName, &pvb); err != nil {
		if apierrors.IsNotFound(err) {
			r.stop(req.Name, errCancelled) // deleted: stop copying it
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pvb.Spec.Node != r.Node {
		return ctrl.Result{}, nil
	}
	switch nextStep(pvb.Status.Phase, pvb.Spec.Cancel, r.isRunning(pvb.Name)) {
	case stepStop:
		r.stop(pvb.Name, errCancelled)
	case stepCancel:
		message := messageCancelledBefore
		if pvb.Status.Phase == cairnv1.PodVolumePhaseInProgress {
			message = messageRestarted
		}
		return ctrl.Result{}, r.end(ctx, &pvb, cairnv1.PodVolumePhaseCancelled, message)
	case stepFail:
		return ctrl.Result{}, r.end(ctx, &pvb, cairnv1.PodVolumePhaseFailed, messageRestarted)
	case stepStart:
		return ctrl.Result{}, r.start(ctx, &pvb)
	}
	return ctrl.Result{}, nil
}

// start marks the copy InProgress and runs it in its own goroutine, so a copy that takes an
// hour holds no reconcile worker and a cancel is seen at once.
func (r *Reconciler) start(ctx context.Context, pvb *cairnv1.PodVolumeBackup) error {
	now := metav1.NewTime(r.Clock.Now())
	if err := lifecycle.PatchPodVolumeBackupStatus(ctx, r.Client, phases.OwnerNodeAgent, pvb, func(s *cairnv1.PodVolumeStatus) {
		s.Phase, s.StartTimestamp, s.Message = cairnv1.PodVolumePhaseInProgress, &now, ""
	}); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	r.mu.Lock()
	if r.running == nil {
		r.running = map[string]*copyRun{}
	}
	r.running[pvb.Name] = &copyRun{cancel: cancel}
	r.mu.Unlock()
	r.copies.Add(1)
	go r.run(runCtx, pvb.DeepCopy())
	return nil
}

func (r *Reconciler) isRunning(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.running[name]
	return ok
}

func (r *Reconciler) stop(name string, cause error) {
	r.mu.Lock()
	run := r.running[name]
	r.mu.Unlock()
	if run != nil {
		run.cancel(cause)
	}
}

// Stop stops every running copy (the agent is shutting down) and waits until each has written
// its end, Failed: the next agent on the node has nothing to clean up after a graceful stop.
func (r *Reconciler) Stop() {
	r.mu.Lock()
	for _, run := range r.running {
		run.cancel(errAgentStopping)
	}
	r.mu.Unlock()
	r.copies.Wait()
}

var errAgentStopping = errors.New("the node agent stopped during the copy; nothing was saved")

// run copies the volume and writes how it ended.
func (r *Reconciler) run(ctx context.Context, pvb *cairnv1.PodVolumeBackup) {
	log := ctrl.Log.WithName("nodeagent").WithValues("podvolumebackup", pvb.Name)
	started := r.Clock.Now()
	defer r.copies.Done()
	defer func() {
		r.mu.Lock()
		delete(r.running, pvb.Name)
		r.mu.Unlock()
	}()
	res, err := r.copy(ctx, pvb)
	phase, message := cairnv1.PodVolumePhaseCompleted, ""
	switch {
	case err == nil:
	case errors.Is(context.Cause(ctx), errCancelled):
		phase, message = cairnv1.PodVolumePhaseCancelled, messageCancelled
	case context.Cause(ctx) != nil:
		phase, message = cairnv1.PodVolumePhaseFailed, context.Cause(ctx).Error()
	default:
		phase, message = cairnv1.PodVolumePhaseFailed, err.Error()
	}
	metrics.VolumeCopyEnded(string(phase), r.Clock.Since(started), res.Bytes, res.UploadedBytes)
	log.Info("Volume copy ended", "phase", phase, "message", message, "bytes", res.Bytes, "uploaded", res.UploadedBytes, "snapshot", res.ID)
	// The final write outlives the copy's context (cancelled, or the agent stopping), bounded.
	writeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err = retry.OnError(retry.DefaultBackoff, func(error) bool { return writeCtx.Err() == nil }, func() error {
		// Read from the API server, not the cache: the agent may be stopping, its cache with it.
		var fresh cairnv1.PodVolumeBackup
		if err := r.Reader.Get(writeCtx, client.ObjectKeyFromObject(pvb), &fresh); err != nil {
			return client.IgnoreNotFound(err)
		}
		return r.finish(writeCtx, &fresh, phase, message, res)
	})
	if err != nil {
		log.Error(err, "Could not record how the volume copy ended; the agent's next start fails it")
	}
}

// finish writes the end of a copy.
func (r *Reconciler) finish(ctx context.Context, pvb *cairnv1.PodVolumeBackup, phase cairnv1.PodVolumePhase, message string, res repository.Result) error {
	if pvb.Status.Phase.IsTerminal() {
		return nil
	}
	now := metav1.NewTime(r.Clock.Now())
	return lifecycle.PatchPodVolumeBackupStatus(ctx, r.Client, phases.OwnerNodeAgent, pvb, func(s *cairnv1.PodVolumeStatus) {
		s.Phase, s.Message, s.CompletionTimestamp = phase, message, &now
		if phase == cairnv1.PodVolumePhaseCompleted {
			s.SnapshotID, s.ParentSnapshotID = res.ID, res.Parent
			s.BytesDone, s.BytesTotal, s.Files, s.UploadedBytes = res.Bytes, res.Bytes, res.Files, res.UploadedBytes
			s.Progress = progressSummary(res.Bytes, res.Bytes)
		}
	})
}

// end ends a copy this process does not run.
func (r *Reconciler) end(ctx context.Context, pvb *cairnv1.PodVolumeBackup, phase cairnv1.PodVolumePhase, message string) error {
	return r.finish(ctx, pvb, phase, message, repository.Result{})
}

// copy finds the volume's directory, opens the repository and snapshots the directory,
// writing progress as it goes.
func (r *Reconciler) copy(ctx context.Context, pvb *cairnv1.PodVolumeBackup) (repository.Result, error) {
	dir, err := r.volumeDir(ctx, pvb)
	if err != nil {
		return repository.Result{}, err
	}
	total, err := diskUsage(ctx, dir)
	if err != nil {
		return repository.Result{}, fmt.Errorf("reading volume %s: %w", pvb.Spec.Volume, err)
	}
	password, err := r.Passwords.Get(ctx, pvb.Spec.Repository)
	if err != nil {
		return repository.Result{}, err
	}
	repo, err := r.open(ctx, pvb.Spec.Repository, password)
	if err != nil {
		return repository.Result{}, fmt.Errorf("opening the volume repository of location %s for namespace %s: %w",
			pvb.Spec.Repository.StorageLocation, pvb.Spec.Repository.Namespace, err)
	}
	defer func() { _ = repo.Close() }()

	var hashed atomic.Int64
	stopReports := r.reportProgress(ctx, pvb, &hashed, total)
	res, err := repo.Snapshot(ctx, dir, pvb.Spec.Tags, func(p repository.Progress) { hashed.Store(p.HashedBytes) })
	stopReports()
	return res, err
}

// maintenanceRetry is how often a copy waiting for its repository's maintenance tries again.
const maintenanceRetry = 5 * time.Second

// open opens the repository, waiting while its maintenance runs (the copy stays InProgress,
// bounded by the backup's itemOperationTimeout and its cancel).
func (r *Reconciler) open(ctx context.Context, ref cairnv1.RepositoryReference, password string) (Repository, error) {
	for {
		repo, err := r.Open(ctx, ref, password)
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

// reportProgress writes the bytes read so far every ProgressInterval while the copy runs
// (never more often), in its own goroutine so that a slow API server never slows the copy.
// The returned func stops it and waits for it.
func (r *Reconciler) reportProgress(ctx context.Context, pvb *cairnv1.PodVolumeBackup, hashed *atomic.Int64, total int64) func() {
	interval := r.ProgressInterval
	if interval <= 0 {
		interval = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		var written int64 = -1
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			n := hashed.Load()
			if n == written {
				continue
			}
			var fresh cairnv1.PodVolumeBackup
			if err := r.Client.Get(ctx, client.ObjectKeyFromObject(pvb), &fresh); err != nil || fresh.Status.Phase != cairnv1.PodVolumePhaseInProgress {
				continue
			}
			if err := lifecycle.PatchPodVolumeBackupStatus(ctx, r.Client, phases.OwnerNodeAgent, &fresh, func(s *cairnv1.PodVolumeStatus) {
				s.BytesDone, s.BytesTotal, s.Progress = n, max(total, n), progressSummary(n, max(total, n))
			}); err == nil {
				written = n
			}
		}
	}()
	return func() { cancel(); <-done }
}

func progressSummary(done, total int64) string {
	return cairnv1.HumanBytes(done) + "/" + cairnv1.HumanBytes(total)
}

// volumeDir is the directory on this node holding the volume's data, under PodsDir, checked to
// be the pod the backup saw (same UID) and to exist.
func (r *Reconciler) volumeDir(ctx context.Context, pvb *cairnv1.PodVolumeBackup) (string, error) {
	var pod corev1.Pod
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: pvb.Spec.Pod.Namespace, Name: pvb.Spec.Pod.Name}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("pod %s/%s is gone", pvb.Spec.Pod.Namespace, pvb.Spec.Pod.Name)
		}
		return "", fmt.Errorf("reading pod %s/%s: %w", pvb.Spec.Pod.Namespace, pvb.Spec.Pod.Name, err)
	}
	if pod.UID != pvb.Spec.Pod.UID {
		return "", fmt.Errorf("pod %s/%s was replaced since the backup saw it", pod.Namespace, pod.Name)
	}
	v := volumes.Volume{Name: pvb.Spec.Volume, Kind: volumes.EmptyDir, ClaimName: pvb.Spec.PersistentVolumeClaim}
	var pvName string
	var source corev1.PersistentVolumeSource
	if v.ClaimName != "" {
		v.Kind = volumes.PersistentVolumeClaim
		var pvc corev1.PersistentVolumeClaim
		if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: v.ClaimName}, &pvc); err != nil {
			return "", fmt.Errorf("reading claim %s/%s: %w", pod.Namespace, v.ClaimName, err)
		}
		pvName = pvc.Spec.VolumeName
		if pvName != "" {
			var pv corev1.PersistentVolume
			if err := r.Reader.Get(ctx, client.ObjectKey{Name: pvName}, &pv); err != nil {
				return "", fmt.Errorf("reading persistent volume %s: %w", pvName, err)
			}
			source = pv.Spec.PersistentVolumeSource
		}
	}
	dir, err := volumes.HostPath(r.PodsDir, pod.UID, v, pvName, source)
	if err != nil {
		return "", err
	}
	info, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("volume %s of pod %s/%s is not at %s on node %s: %w", v.Name, pod.Namespace, pod.Name, dir, r.Node, err)
	}
	if !info.IsDir() {
		return "", fmt.Errorf("volume %s of pod %s/%s at %s is not a directory", v.Name, pod.Namespace, pod.Name, dir)
	}
	return dir, nil
}

// diskUsage sums the sizes of the regular files under dir (not following symlinks), for the
// copy's bytesTotal; it stops when ctx ends.
func diskUsage(ctx context.Context, dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}

// SetupWithManager registers the agent; the manager's cache must hold only this node's
// PodVolumeBackups (cmd/manager's node-agent command selects them by label).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	// When the manager stops, the copies stop first, each recording its end (the manager
	// waits for its runnables, up to its graceful shutdown timeout).
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.Stop()
		return nil
	})); err != nil {
		return err
	}
	return lifecycle.Register("nodeagent", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.PodVolumeBackup{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}), r)
}
