package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/phases"
)

// outcome is what a finished copy reports.
type outcome struct {
	Bytes, Files, UploadedBytes  int64
	SnapshotID, ParentSnapshotID string
}

// progress is a running copy's bytes, read by the progress writer.
type progress struct{ done, total atomic.Int64 }

// messages are what a kind's status says of a copy that did not run to its end.
type messages struct {
	restarted, cancelledBefore, cancelled, stopped string
}

// kind is the adapter of one kind of copy: a PodVolumeBackup or a PodVolumeRestore.
type kind[T lifecycle.PodVolumeObject] struct {
	name     string // the controller's name
	table    *phases.Table
	new      func() T
	messages messages
	// work does the copy, storing its bytes in p as it goes.
	work func(ctx context.Context, obj T, p *progress) (outcome, error)
	// completed fills the status of a completed copy from its outcome.
	completed func(s *cairnv1.PodVolumeStatus, o outcome)
	// ended, when set, runs once a copy's end is recorded, whether this agent ran it or ends it
	// without running it (a restore tells its pod).
	ended func(ctx context.Context, obj T)
	// observe records the end in the metrics.
	observe func(phase cairnv1.PodVolumePhase, d time.Duration, o outcome)
}

// copies is the agent's reconciler of one kind: it starts a new copy in its own goroutine,
// stops one whose spec.cancel is set (or whose object is deleted), and ends one that a killed
// agent left InProgress.
type copies[T lifecycle.PodVolumeObject] struct {
	agent *Agent
	kind  kind[T]
}

// step is what the agent does with a copy.
type step string

const (
	stepNone   step = "None"
	stepStart  step = "Start"
	stepStop   step = "Stop"   // cancel the running copy; it writes Cancelled
	stepCancel step = "Cancel" // not running here: Cancelled at once
	stepFail   step = "Fail"   // InProgress but not running here: the agent restarted
)

// nextStep decides what the agent does with a copy of its node, from its phase, spec.cancel,
// and whether this process runs it.
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

func (c *copies[T]) key(name string) string { return c.kind.name + "/" + name }

func (c *copies[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := c.kind.new()
	if err := c.agent.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			c.agent.stop(c.key(req.Name), errCancelled) // deleted: stop copying it
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if obj.NodeName() != c.agent.Node {
		return ctrl.Result{}, nil
	}
	status := obj.PodVolumeStatus()
	switch nextStep(status.Phase, obj.CancelRequested(), c.agent.isRunning(c.key(obj.GetName()))) {
	case stepStop:
		c.agent.stop(c.key(obj.GetName()), errCancelled)
	case stepCancel:
		message := c.kind.messages.cancelledBefore
		if status.Phase == cairnv1.PodVolumePhaseInProgress {
			message = c.kind.messages.restarted
		}
		return ctrl.Result{}, c.end(ctx, obj, cairnv1.PodVolumePhaseCancelled, message, outcome{})
	case stepFail:
		return ctrl.Result{}, c.end(ctx, obj, cairnv1.PodVolumePhaseFailed, c.kind.messages.restarted, outcome{})
	case stepStart:
		key := c.key(obj.GetName())
		if !c.agent.reserve(key) {
			return c.waitForSlot(ctx, obj)
		}
		if err := c.start(ctx, obj); err != nil {
			c.agent.release(key)
			return ctrl.Result{}, err
		}
	case stepNone:
		if status.Phase.IsTerminal() && c.kind.ended != nil {
			c.kind.ended(ctx, obj) // idempotent: an agent killed between the status and the marker
		}
	}
	return ctrl.Result{}, nil
}

// slotWait is how often a copy waiting for a free slot on its node looks again.
const slotWait = time.Second

// waitForSlot leaves a copy New while the node runs as many copies as it may, saying so.
func (c *copies[T]) waitForSlot(ctx context.Context, obj T) (ctrl.Result, error) {
	message := fmt.Sprintf("waiting for a free copy slot on node %s (%d copies at once)", c.agent.Node, c.agent.MaxCopies)
	if obj.PodVolumeStatus().Message != message {
		if err := lifecycle.PatchPodVolumeStatus(ctx, c.agent.Client, c.kind.table, phases.OwnerNodeAgent, obj, func(s *cairnv1.PodVolumeStatus) {
			s.Message = message
		}); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: slotWait}, nil
}

// start marks the copy InProgress and runs it in its own goroutine, so a copy that takes an
// hour holds no reconcile worker and a cancel is seen at once.
func (c *copies[T]) start(ctx context.Context, obj T) error {
	now := metav1.NewTime(c.agent.Clock.Now())
	if err := lifecycle.PatchPodVolumeStatus(ctx, c.agent.Client, c.kind.table, phases.OwnerNodeAgent, obj, func(s *cairnv1.PodVolumeStatus) {
		s.Phase, s.StartTimestamp, s.Message = cairnv1.PodVolumePhaseInProgress, &now, ""
	}); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	c.agent.track(c.key(obj.GetName()), cancel)
	go c.run(runCtx, obj.DeepCopyObject().(T))
	return nil
}

// run does the copy and records how it ended.
func (c *copies[T]) run(ctx context.Context, obj T) {
	log := ctrl.Log.WithName("nodeagent").WithValues(c.kind.name, obj.GetName())
	started := c.agent.Clock.Now()
	defer c.agent.untrack(c.key(obj.GetName()))
	var p progress
	stopReports := c.reportProgress(ctx, obj, &p)
	res, err := c.kind.work(ctx, obj, &p)
	stopReports()
	phase, message := cairnv1.PodVolumePhaseCompleted, ""
	switch cause := context.Cause(ctx); {
	case err == nil:
	case errors.Is(cause, errCancelled):
		phase, message = cairnv1.PodVolumePhaseCancelled, c.kind.messages.cancelled
	case errors.Is(cause, errAgentStopping):
		phase, message = cairnv1.PodVolumePhaseFailed, c.kind.messages.stopped
	case cause != nil:
		phase, message = cairnv1.PodVolumePhaseFailed, cause.Error()
	default:
		phase, message = cairnv1.PodVolumePhaseFailed, err.Error()
	}
	c.kind.observe(phase, c.agent.Clock.Since(started), res)
	log.Info("Volume copy ended", "phase", phase, "message", message, "bytes", res.Bytes, "uploaded", res.UploadedBytes, "snapshot", res.SnapshotID)
	// The final write outlives the copy's context (cancelled, or the agent stopping), bounded.
	writeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err = retry.OnError(retry.DefaultBackoff, func(error) bool { return writeCtx.Err() == nil }, func() error {
		// Read from the API server, not the cache: the agent may be stopping, its cache with it.
		fresh := c.kind.new()
		if err := c.agent.Reader.Get(writeCtx, client.ObjectKeyFromObject(obj), fresh); err != nil {
			return client.IgnoreNotFound(err)
		}
		return c.end(writeCtx, fresh, phase, message, res)
	})
	if err != nil {
		log.Error(err, "Could not record how the volume copy ended; the agent's next start fails it")
	}
}

// end records the end of a copy (unless it has one), then runs the kind's ended.
func (c *copies[T]) end(ctx context.Context, obj T, phase cairnv1.PodVolumePhase, message string, res outcome) error {
	if !obj.PodVolumeStatus().Phase.IsTerminal() {
		now := metav1.NewTime(c.agent.Clock.Now())
		if err := lifecycle.PatchPodVolumeStatus(ctx, c.agent.Client, c.kind.table, phases.OwnerNodeAgent, obj, func(s *cairnv1.PodVolumeStatus) {
			s.Phase, s.Message, s.CompletionTimestamp = phase, message, &now
			if phase == cairnv1.PodVolumePhaseCompleted {
				c.kind.completed(s, res)
			}
		}); err != nil {
			return err
		}
	}
	if c.kind.ended != nil {
		c.kind.ended(ctx, obj)
	}
	return nil
}

// reportProgress writes the bytes done so far every ProgressInterval while the copy runs
// (never more often), in its own goroutine so that a slow API server never slows the copy.
// The returned func stops it and waits for it.
func (c *copies[T]) reportProgress(ctx context.Context, obj T, p *progress) func() {
	interval := c.agent.ProgressInterval
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
			n, total := p.done.Load(), p.total.Load()
			if n == written {
				continue
			}
			fresh := c.kind.new()
			if err := c.agent.Client.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil || fresh.PodVolumeStatus().Phase != cairnv1.PodVolumePhaseInProgress {
				continue
			}
			if err := lifecycle.PatchPodVolumeStatus(ctx, c.agent.Client, c.kind.table, phases.OwnerNodeAgent, fresh, func(s *cairnv1.PodVolumeStatus) {
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

func (c *copies[T]) setup(mgr ctrl.Manager) error {
	return lifecycle.Register(c.kind.name, ctrl.NewControllerManagedBy(mgr).
		For(c.kind.new()).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}), c)
}
