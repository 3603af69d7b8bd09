package readiness

import (
	"context"
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/metrics"
	"github.com/cairn-backup/cairn/internal/readiness"
)

// PhaseWatcher reports every phase change of a Backup, Restore, Schedule or
// BackupStorageLocation: an Event on the object (reason: the new phase; note: from where, and
// why) and the metrics counters (internal/metrics). It owns no field and writes no object: it
// watches the cache's update events, which carry the version before and after, so it sees the
// transitions themselves, which a reconciler (given only the latest version) cannot. It runs on
// the leader only, like the reconcilers whose changes it reports.
type PhaseWatcher struct {
	Recorder events.EventRecorder

	// leading is true while the watcher runs (on the leader).
	leading atomic.Bool
}

// phaseKind is how the watcher reads one kind.
type phaseKind struct {
	object client.Object
	// phase is the object's phase ("" when obj is not of the kind).
	phase func(obj any) string
	// conditions are what internal/readiness says of obj: the why of its phase.
	conditions func(obj any) readiness.Conditions
	// observe counts the change from old to cur in the metrics.
	observe func(old, cur any)
}

// watchedKind makes a phaseKind from typed functions.
func watchedKind[T client.Object](object T, phase func(T) string, decide func(T) readiness.Conditions, observe func(old, cur T)) phaseKind {
	return phaseKind{
		object: object,
		phase: func(obj any) string {
			if o, ok := obj.(T); ok {
				return phase(o)
			}
			return ""
		},
		conditions: func(obj any) readiness.Conditions { return decide(obj.(T)) },
		observe: func(old, cur any) {
			if observe != nil {
				observe(old.(T), cur.(T))
			}
		},
	}
}

var phaseKinds = []phaseKind{
	watchedKind(&cairnv1.Backup{}, func(b *cairnv1.Backup) string { return string(b.EffectivePhase()) }, readiness.Backup, metrics.ObserveBackup),
	watchedKind(&cairnv1.Restore{}, func(rs *cairnv1.Restore) string { return string(rs.EffectivePhase()) }, readiness.Restore, metrics.ObserveRestore),
	watchedKind(&cairnv1.Schedule{}, func(s *cairnv1.Schedule) string { return string(s.EffectivePhase()) }, readiness.Schedule, nil),
	watchedKind(&cairnv1.BackupStorageLocation{}, func(l *cairnv1.BackupStorageLocation) string { return string(l.Status.Phase) }, readiness.StorageLocation, nil),
}

// Start marks the watcher as running on the leader, until ctx ends.
func (w *PhaseWatcher) Start(ctx context.Context) error {
	w.leading.Store(true)
	<-ctx.Done()
	w.leading.Store(false)
	return nil
}

// SetupWithManager adds the watcher's handlers to the cache's informers now, before the cache
// starts — so that no phase change after the start goes unseen (one made while the watcher
// was starting would otherwise be missed) — and the watcher to mgr. The handlers report only
// while the watcher runs, on the leader.
func (w *PhaseWatcher) SetupWithManager(mgr ctrl.Manager) error {
	for _, k := range phaseKinds {
		informer, err := mgr.GetCache().GetInformer(context.Background(), k.object)
		if err != nil {
			return fmt.Errorf("watching %T for phase changes: %w", k.object, err)
		}
		if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			UpdateFunc: func(oldObj, newObj any) {
				if w.leading.Load() {
					w.changed(k, oldObj, newObj)
				}
			},
		}); err != nil {
			return fmt.Errorf("watching %T for phase changes: %w", k.object, err)
		}
	}
	return mgr.Add(w)
}

// NeedLeaderElection makes the watcher run on the leader only.
func (w *PhaseWatcher) NeedLeaderElection() bool { return true }

// changed reports one update of an object of kind k, when its phase changed.
func (w *PhaseWatcher) changed(k phaseKind, oldObj, newObj any) {
	from, to := k.phase(oldObj), k.phase(newObj)
	if from == to || to == "" {
		return
	}
	k.observe(oldObj, newObj)
	if b, ok := newObj.(*cairnv1.Backup); ok && from == string(cairnv1.BackupPhaseNew) && b.Annotations[cairnv1.SyncedFromAnnotation] != "" {
		// A backup made by sync from storage gets its terminal status in one write: it mirrors a
		// run of another cluster, not one here. The location's Synced event counts them; an
		// event each would be thousands of writes for one pass (docs/disaster-recovery.md).
		return
	}
	eventType, note := phaseEvent(from, to, k.conditions(newObj))
	w.Recorder.Eventf(newObj.(client.Object), nil, eventType, to, "ChangePhase", "%s", note)
}

// phaseEvent is the type and note of the Event of a change from phase from to phase to, whose
// conditions are c: a Warning when the object ended without reaching Ready (Stalled) or a step
// failed on the way (the phase names it); the note says where it came from and why.
func phaseEvent(from, to string, c readiness.Conditions) (eventType, note string) {
	eventType = corev1.EventTypeNormal
	switch {
	case c.Stalled != nil, to == string(cairnv1.BackupPhaseDeletionFailed), to == string(cairnv1.BackupPhaseFinalizingFailed):
		eventType = corev1.EventTypeWarning
	}
	if from == "" {
		from = "none"
	}
	return eventType, fmt.Sprintf("%s → %s: %s", from, to, c.Ready.Message)
}
