package readiness

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/unittest"
	"github.com/cairn-backup/cairn/internal/readiness"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// TestReadinessReconciler: each kind gets the conditions its phase says, once: a second
// reconcile of the same phase writes nothing, and the phase owners' conditions stay.
func TestReadinessReconciler(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	queued := metav1.Condition{Type: cairnv1.BackupConditionQueued, Status: metav1.ConditionFalse, Reason: "Dequeued", LastTransitionTime: metav1.NewTime(clk.Now())}
	objects := []client.Object{
		&cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "done", Generation: 1},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, Conditions: []metav1.Condition{queued}}},
		&cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bad", Generation: 1},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseFailed, FailureReason: "storage is gone"}},
		&cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "running", Generation: 1},
			Status: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseInProgress}},
		&cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly", Generation: 2},
			Status: cairnv1.ScheduleStatus{Phase: cairnv1.SchedulePhaseEnabled, ObservedGeneration: 2}},
		&cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "default", Generation: 1},
			Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}},
		// Being deleted: its deletion timestamp raised its generation past its conditions'.
		&cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "deleted", Generation: 2,
			DeletionTimestamp: &metav1.Time{Time: clk.Now()}, Finalizers: []string{cairnv1.BackupDataFinalizer}},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted}},
	}
	var writes atomic.Int32
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(objects...).
		WithStatusSubresource(&cairnv1.Backup{}, &cairnv1.Restore{}, &cairnv1.Schedule{}, &cairnv1.BackupStorageLocation{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			writes.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}}).Build()
	reconcilers := map[string]interface {
		Reconcile(context.Context, ctrl.Request) (ctrl.Result, error)
	}{}
	for _, r := range NewReconcilers(c, clk) {
		switch r := r.(type) {
		case *Reconciler[*cairnv1.Backup]:
			reconcilers["backup"] = r
		case *Reconciler[*cairnv1.Restore]:
			reconcilers["restore"] = r
		case *Reconciler[*cairnv1.Schedule]:
			reconcilers["schedule"] = r
		case *Reconciler[*cairnv1.BackupStorageLocation]:
			reconcilers["storagelocation"] = r
		}
	}
	tests := []struct {
		kind, name string
		obj        client.Object
		conditions func(client.Object) []metav1.Condition
		want       map[string]metav1.ConditionStatus // type → status; absent types must be absent
	}{
		{"backup", "done", &cairnv1.Backup{}, func(o client.Object) []metav1.Condition { return o.(*cairnv1.Backup).Status.Conditions },
			map[string]metav1.ConditionStatus{cairnv1.ConditionReady: metav1.ConditionTrue, cairnv1.BackupConditionQueued: metav1.ConditionFalse}},
		{"backup", "bad", &cairnv1.Backup{}, func(o client.Object) []metav1.Condition { return o.(*cairnv1.Backup).Status.Conditions },
			map[string]metav1.ConditionStatus{cairnv1.ConditionReady: metav1.ConditionFalse, cairnv1.ConditionStalled: metav1.ConditionTrue}},
		{"restore", "running", &cairnv1.Restore{}, func(o client.Object) []metav1.Condition { return o.(*cairnv1.Restore).Status.Conditions },
			map[string]metav1.ConditionStatus{cairnv1.ConditionReady: metav1.ConditionFalse, cairnv1.ConditionReconciling: metav1.ConditionTrue}},
		{"schedule", "nightly", &cairnv1.Schedule{}, func(o client.Object) []metav1.Condition { return o.(*cairnv1.Schedule).Status.Conditions },
			map[string]metav1.ConditionStatus{cairnv1.ConditionReady: metav1.ConditionTrue}},
		{"storagelocation", "default", &cairnv1.BackupStorageLocation{}, func(o client.Object) []metav1.Condition { return o.(*cairnv1.BackupStorageLocation).Status.Conditions },
			map[string]metav1.ConditionStatus{cairnv1.ConditionReady: metav1.ConditionTrue}},
	}
	for _, tt := range tests {
		t.Run(tt.kind+"/"+tt.name, func(t *testing.T) {
			req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: tt.name}}
			before := writes.Load()
			for range 2 {
				if _, err := reconcilers[tt.kind].Reconcile(context.Background(), req); err != nil {
					t.Fatal(err)
				}
			}
			if got := writes.Load() - before; got != 1 {
				t.Errorf("%d status writes, want 1 (the second reconcile has nothing to write)", got)
			}
			if err := c.Get(context.Background(), req.NamespacedName, tt.obj); err != nil {
				t.Fatal(err)
			}
			conditions := tt.conditions(tt.obj)
			if len(conditions) != len(tt.want) {
				t.Errorf("conditions %+v, want exactly %v", conditions, tt.want)
			}
			for typ, status := range tt.want {
				if got := meta.FindStatusCondition(conditions, typ); got == nil || got.Status != status {
					t.Errorf("%s = %+v, want %s", typ, got, status)
				} else if typ == cairnv1.ConditionReady && got.ObservedGeneration != tt.obj.GetGeneration() {
					t.Errorf("Ready observedGeneration %d, want %d", got.ObservedGeneration, tt.obj.GetGeneration())
				}
			}
		})
	}
	if _, err := reconcilers["backup"].Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "gone"}}); err != nil {
		t.Errorf("a deleted backup: %v, want nothing to do", err)
	}

	// A backup or restore no owner has written yet (phase "") is left to that owner's first
	// write, which brings the conditions: no write from here, racing it.
	for _, obj := range []client.Object{
		&cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fresh", Generation: 1}},
		&cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "being-synced", Generation: 1,
			Annotations: map[string]string{cairnv1.SyncedFromAnnotation: "dr"}}},
		&cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fresh", Generation: 1}},
	} {
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
		kind := "backup"
		if _, ok := obj.(*cairnv1.Restore); ok {
			kind = "restore"
		}
		before := writes.Load()
		if _, err := reconcilers[kind].Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)}); err != nil {
			t.Fatal(err)
		}
		if got := writes.Load() - before; got != 0 {
			t.Errorf("%s %s, phase \"\": %d status writes, want none", kind, obj.GetName(), got)
		}
	}
	// A backup being deleted gets its conditions from the deletion's own write (Deleting):
	// none from here, racing it.
	before := writes.Load()
	if _, err := reconcilers["backup"].Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "deleted"}}); err != nil {
		t.Fatal(err)
	}
	if got := writes.Load() - before; got != 0 {
		t.Errorf("a backup being deleted: %d status writes, want none", got)
	}
}

func TestPhaseEvent(t *testing.T) {
	decided := func(phase cairnv1.BackupPhase, status cairnv1.BackupStatus) readiness.Conditions {
		status.Phase = phase
		return readiness.Backup(&cairnv1.Backup{Status: status})
	}
	tests := []struct {
		name     string
		from, to cairnv1.BackupPhase
		status   cairnv1.BackupStatus
		wantType string
		wantNote string
	}{
		{"queued", "", cairnv1.BackupPhaseQueued, cairnv1.BackupStatus{}, "Normal", "none → Queued: waiting in the queue"},
		{"completed", cairnv1.BackupPhaseFinalizing, cairnv1.BackupPhaseCompleted, cairnv1.BackupStatus{Progress: cairnv1.NewBackupProgress(3, 3)},
			"Normal", "Finalizing → Completed: completed: 3 of 3 items backed up"},
		{"failed, with the reason", cairnv1.BackupPhaseFinalizingCancelled, cairnv1.BackupPhaseFailed, cairnv1.BackupStatus{FailureReason: "Backup cancelled by user"},
			"Warning", "FinalizingCancelled → Failed: Backup cancelled by user"},
		{"a deletion that failed", cairnv1.BackupPhaseDeleting, cairnv1.BackupPhaseDeletionFailed, cairnv1.BackupStatus{LastDeletionError: "access denied"},
			"Warning", "access denied"},
		{"a run that failed, its data being removed", cairnv1.BackupPhaseInProgress, cairnv1.BackupPhaseFinalizingFailed, cairnv1.BackupStatus{FailureReason: "the API server is gone"},
			"Warning", "the API server is gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotType, gotNote := phaseEvent(string(tt.from), string(tt.to), decided(tt.to, tt.status))
			if gotType != tt.wantType || !strings.Contains(gotNote, tt.wantNote) {
				t.Errorf("event %s %q, want %s containing %q", gotType, gotNote, tt.wantType, tt.wantNote)
			}
		})
	}
}

// TestPhaseWatcherChanged: an update that changes the phase is an Event (reason: the new
// phase) and moves the metrics; one that does not (a progress write) is neither.
func TestPhaseWatcherChanged(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	w := &PhaseWatcher{Recorder: rec}
	backupKind := phaseKinds[0]
	b := func(phase cairnv1.BackupPhase, items int64) *cairnv1.Backup {
		return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", Labels: map[string]string{cairnv1.ScheduleNameLabel: "watched"}},
			Status: cairnv1.BackupStatus{Phase: phase, Progress: cairnv1.NewBackupProgress(items, 10)}}
	}
	attempts := counterValue(t, "cairn_backup_attempts_total", "watched")
	w.changed(backupKind, b(cairnv1.BackupPhaseReadyToStart, 0), b(cairnv1.BackupPhaseInProgress, 0))
	w.changed(backupKind, b(cairnv1.BackupPhaseInProgress, 0), b(cairnv1.BackupPhaseInProgress, 5))
	got := unittest.DrainEvents(rec)
	if len(got) != 1 || !strings.HasPrefix(got[0], "Normal InProgress ReadyToStart → InProgress") {
		t.Errorf("events %q, want one: Normal InProgress ReadyToStart → InProgress…", got)
	}
	if moved := counterValue(t, "cairn_backup_attempts_total", "watched") - attempts; moved != 1 {
		t.Errorf("cairn_backup_attempts_total moved by %v, want 1", moved)
	}

	// A backup made by sync gets its terminal status in one write: no event for it (the
	// location's Synced event counts them).
	synced := func(phase cairnv1.BackupPhase) *cairnv1.Backup {
		sb := b(phase, 10)
		sb.Annotations = map[string]string{cairnv1.SyncedFromAnnotation: "dr"}
		return sb
	}
	w.changed(backupKind, synced(""), synced(cairnv1.BackupPhaseCompleted))
	if got := unittest.DrainEvents(rec); len(got) != 0 {
		t.Errorf("events %q for a backup made by sync, want none", got)
	}
	// Its deletion is a phase change like any other.
	w.changed(backupKind, synced(cairnv1.BackupPhaseCompleted), synced(cairnv1.BackupPhaseDeleting))
	if got := unittest.DrainEvents(rec); len(got) != 1 || !strings.HasPrefix(got[0], "Normal Deleting Completed → Deleting") {
		t.Errorf("events %q, want the Deleting event of a synced backup", got)
	}
}

// counterValue is the value of counter name with label schedule on the manager's registry (0
// when it has no such sample yet).
func counterValue(t *testing.T, name, schedule string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "schedule" && l.GetValue() == schedule {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
