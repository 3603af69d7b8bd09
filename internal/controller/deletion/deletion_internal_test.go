package deletion

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

func TestNextDeletionStep(t *testing.T) {
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	later := metav1.NewTime(now.Add(10 * time.Second))
	earlier := metav1.NewTime(now.Add(-time.Second))
	running := &deletionRecord{State: deletionRunning, Shown: true}
	waiting := &deletionRecord{State: deletionWaiting, Shown: true}
	// A first deletion, its phase not yet Deleting: started half a second ago, or just long
	// enough ago to show it.
	quietRunning := &deletionRecord{State: deletionRunning, Since: now.Add(-deletingShownAfter / 2)}
	quietWaiting := &deletionRecord{State: deletionWaiting, Since: now.Add(-deletingShownAfter / 2)}
	dueRunning := &deletionRecord{State: deletionRunning, Since: now.Add(-deletingShownAfter)}
	dueWaiting := &deletionRecord{State: deletionWaiting, Since: now.Add(-2 * deletingShownAfter)}
	done := &deletionRecord{State: deletionDone}
	failed := &deletionRecord{State: deletionFailed, Message: "connection refused"}
	tests := []struct {
		name        string
		in          deletionInput
		want        deletionStep
		wantMessage string
	}{
		{name: "not deleted", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, HasData: true}, want: stepNone},
		{name: "deleted while running: its owner cancels it first", in: deletionInput{Phase: cairnv1.BackupPhaseInProgress, Deleted: true, HasData: true}, want: stepNone},
		{name: "deleted while queued", in: deletionInput{Phase: cairnv1.BackupPhaseQueued, Deleted: true, HasData: true}, want: stepNone},
		{name: "deleted while cleaning up a cancel", in: deletionInput{Phase: cairnv1.BackupPhaseFinalizingCancelled, Deleted: true, HasData: true}, want: stepNone},
		{name: "completed: start", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true}, want: stepStart},
		{name: "partially failed: start", in: deletionInput{Phase: cairnv1.BackupPhasePartiallyFailed, Deleted: true, HasData: true}, want: stepStart},
		{name: "failed: start (its log is data)", in: deletionInput{Phase: cairnv1.BackupPhaseFailed, Deleted: true, HasData: true}, want: stepStart},
		{name: "never started: nothing to delete", in: deletionInput{Phase: cairnv1.BackupPhaseFailed, Deleted: true}, want: stepRelease},
		{name: "never queued: nothing to delete", in: deletionInput{Phase: cairnv1.BackupPhaseFailedValidation, Deleted: true}, want: stepRelease},
		{name: "keep-data", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, KeepData: true}, want: stepRelease},
		{name: "data found gone from storage by the sync: nothing to delete", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, DataMissing: true}, want: stepRelease},
		{name: "data found gone, and a restore reads it: nothing to wait for", in: deletionInput{Phase: cairnv1.BackupPhasePartiallyFailed, Deleted: true, HasData: true, DataMissing: true, ReadBy: "r1"}, want: stepRelease},
		{name: "keep-data while this process still deletes: wait for it", in: deletionInput{Phase: cairnv1.BackupPhaseDeleting, Deleted: true, HasData: true, KeepData: true, Record: running}, want: stepWait},
		{name: "waiting for a slot", in: deletionInput{Phase: cairnv1.BackupPhaseDeleting, Deleted: true, HasData: true, Record: waiting}, want: stepWait},
		{name: "stale terminal read while waiting for a slot", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, Record: waiting}, want: stepWait},
		{name: "keep-data while waiting for a slot: out of the line", in: deletionInput{Phase: cairnv1.BackupPhaseDeleting, Deleted: true, HasData: true, KeepData: true, Record: waiting}, want: stepWithdraw},
		{name: "keep-data while failing", in: deletionInput{Phase: cairnv1.BackupPhaseDeletionFailed, Deleted: true, HasData: true, KeepData: true, NextAttempt: &later}, want: stepRelease},
		{name: "stale terminal read while this process deletes", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, Record: running}, want: stepWait},
		{name: "deleting, goroutine running", in: deletionInput{Phase: cairnv1.BackupPhaseDeleting, Deleted: true, HasData: true, Record: running}, want: stepWait},
		{name: "deleting, goroutine done", in: deletionInput{Phase: cairnv1.BackupPhaseDeleting, Deleted: true, HasData: true, Record: done}, want: stepVerify},
		{name: "deleting, goroutine failed", in: deletionInput{Phase: cairnv1.BackupPhaseDeleting, Deleted: true, HasData: true, Record: failed}, want: stepFail, wantMessage: "connection refused"},
		{name: "deleting, no record: the operator restarted", in: deletionInput{Phase: cairnv1.BackupPhaseDeleting, Deleted: true, HasData: true}, want: stepFail, wantMessage: messageNoDeletionInProgress},
		{name: "failed, retry not due", in: deletionInput{Phase: cairnv1.BackupPhaseDeletionFailed, Deleted: true, HasData: true, NextAttempt: &later}, want: stepBackoff},
		{name: "failed, retry due: Deleting at once", in: deletionInput{Phase: cairnv1.BackupPhaseDeletionFailed, Deleted: true, HasData: true, NextAttempt: &earlier}, want: stepStartDeleting},
		{name: "failed, no retry time recorded", in: deletionInput{Phase: cairnv1.BackupPhaseDeletionFailed, Deleted: true, HasData: true}, want: stepStartDeleting},
		{name: "first deletion running, not yet shown", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, Record: quietRunning}, want: stepWait},
		{name: "first deletion waiting for a slot, not yet shown", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, Record: quietWaiting}, want: stepWait},
		{name: "first deletion ran a second: show Deleting", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, Record: dueRunning}, want: stepShowDeleting},
		{name: "first deletion waited two seconds for a slot: show Deleting", in: deletionInput{Phase: cairnv1.BackupPhasePartiallyFailed, Deleted: true, HasData: true, Record: dueWaiting}, want: stepShowDeleting},
		{name: "first deletion done before it showed: verify and let go", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, Record: done}, want: stepVerify},
		{name: "first deletion failed before it showed", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, Record: failed}, want: stepFail, wantMessage: "connection refused"},
		{name: "done while keep-data was set: the data went, verify", in: deletionInput{Phase: cairnv1.BackupPhaseDeleting, Deleted: true, HasData: true, KeepData: true, Record: done}, want: stepVerify},
		{name: "after waiting for a restore: Deleting at once", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, Blocked: true}, want: stepStartDeleting},
		{name: "a retry ran a while: already shown", in: deletionInput{Phase: cairnv1.BackupPhaseDeleting, Deleted: true, HasData: true, Record: &deletionRecord{State: deletionRunning, Since: now.Add(-time.Hour), Shown: true}}, want: stepWait},
		{name: "finalizer already gone", in: deletionInput{Phase: cairnv1.BackupPhaseDeleting, Deleted: false, HasData: true, Record: done}, want: stepNone},
		{name: "read by a restore: wait for it to end", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, ReadBy: "r1"},
			want: stepWaitForRestore, wantMessage: "waiting for restore r1 to end before deleting"},
		{name: "read by a restore, partially failed: wait", in: deletionInput{Phase: cairnv1.BackupPhasePartiallyFailed, Deleted: true, HasData: true, ReadBy: "r1"},
			want: stepWaitForRestore, wantMessage: "waiting for restore r1 to end before deleting"},
		{name: "read by a restore, not deleted", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, HasData: true, ReadBy: "r1"}, want: stepNone},
		{name: "read by a restore, keep-data: the object goes, the data stays", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, KeepData: true, ReadBy: "r1"},
			want: stepRelease},
		{name: "read by a restore, never started: nothing to delete", in: deletionInput{Phase: cairnv1.BackupPhaseFailed, Deleted: true, ReadBy: "r1"}, want: stepRelease},
		{name: "read by a restore, stale terminal read while this process deletes", in: deletionInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, HasData: true, Record: running, ReadBy: "r1"},
			want: stepWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Now = now
			got, message := nextDeletionStep(tt.in)
			if got != tt.want || message != tt.wantMessage {
				t.Errorf("got (%s, %q), want (%s, %q)", got, message, tt.want, tt.wantMessage)
			}
		})
	}
}

func TestDeletionWait(t *testing.T) {
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		phase cairnv1.BackupPhase
		rec   *deletionRecord
		want  time.Duration
	}{
		{"first deletion just started: until Deleting is due", cairnv1.BackupPhaseCompleted, &deletionRecord{State: deletionWaiting, Since: now}, deletingShownAfter},
		{"first deletion ran a while: the rest of the wait", cairnv1.BackupPhaseCompleted, &deletionRecord{State: deletionRunning, Since: now.Add(-deletingShownAfter / 4)}, deletingShownAfter - deletingShownAfter/4},
		{"due already (a late reconcile): at once", cairnv1.BackupPhaseFailed, &deletionRecord{State: deletionRunning, Since: now.Add(-time.Hour)}, time.Millisecond},
		{"shown: only the safety net", cairnv1.BackupPhaseCompleted, &deletionRecord{State: deletionRunning, Since: now, Shown: true}, deletionSafetyRequeue},
		{"Deleting: only the safety net", cairnv1.BackupPhaseDeleting, &deletionRecord{State: deletionRunning, Since: now}, deletionSafetyRequeue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := deletionWait(deletionInput{Phase: tt.phase, Deleted: true, HasData: true, Record: tt.rec, Now: now}); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestRemovingData(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC))
	backup := func(phase cairnv1.BackupPhase, edit func(*cairnv1.Backup)) *cairnv1.Backup {
		b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cairn-system", DeletionTimestamp: &now,
			Finalizers: []string{cairnv1.BackupDataFinalizer}},
			Status: cairnv1.BackupStatus{Phase: phase, StartTimestamp: &now, StorageLocation: "default"}}
		if edit != nil {
			edit(b)
		}
		return b
	}
	tests := []struct {
		name string
		b    *cairnv1.Backup
		want bool
	}{
		{"Deleting", backup(cairnv1.BackupPhaseDeleting, nil), true},
		{"terminal and deleted: its first deletion may run before Deleting shows", backup(cairnv1.BackupPhaseCompleted, nil), true},
		{"failed and deleted: its log is data", backup(cairnv1.BackupPhaseFailed, nil), true},
		{"DeletionFailed: waits for its next attempt", backup(cairnv1.BackupPhaseDeletionFailed, nil), false},
		{"not deleted", backup(cairnv1.BackupPhaseCompleted, func(b *cairnv1.Backup) { b.DeletionTimestamp = nil }), false},
		{"finalizer gone", backup(cairnv1.BackupPhaseCompleted, func(b *cairnv1.Backup) { b.Finalizers = nil }), false},
		{"still running: cancelled first", backup(cairnv1.BackupPhaseInProgress, nil), false},
		{"never started: nothing to remove", backup(cairnv1.BackupPhaseFailedValidation, func(b *cairnv1.Backup) { b.Status.StartTimestamp = nil }), false},
		{"keep-data", backup(cairnv1.BackupPhaseCompleted, func(b *cairnv1.Backup) {
			b.Annotations = map[string]string{cairnv1.KeepDataAnnotation: "true"}
		}), false},
		{"waits for a restore", backup(cairnv1.BackupPhaseCompleted, func(b *cairnv1.Backup) {
			b.Status.Conditions = []metav1.Condition{{Type: cairnv1.BackupConditionDeletionBlocked, Status: metav1.ConditionTrue}}
		}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RemovingData(tt.b); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReadingRestore(t *testing.T) {
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly-2", Labels: map[string]string{cairnv1.ScheduleNameLabel: "nightly"}}}
	rs := func(name string, phase cairnv1.RestorePhase, spec cairnv1.RestoreSpec, statusBackup string) cairnv1.Restore {
		return cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: spec,
			Status: cairnv1.RestoreStatus{Phase: phase, BackupName: statusBackup}}
	}
	named := cairnv1.RestoreSpec{BackupName: "nightly-2"}
	tests := []struct {
		name     string
		restores []cairnv1.Restore
		want     string
	}{
		{name: "none"},
		{name: "a new restore naming it", restores: []cairnv1.Restore{rs("r1", "", named, "")}, want: "r1"},
		{name: "a queued restore that resolved to it", restores: []cairnv1.Restore{rs("r1", cairnv1.RestorePhaseQueued, cairnv1.RestoreSpec{ScheduleName: "nightly"}, "nightly-2")}, want: "r1"},
		{name: "a running restore", restores: []cairnv1.Restore{rs("r1", cairnv1.RestorePhaseInProgress, named, "nightly-2")}, want: "r1"},
		{name: "a restore waiting for its operations", restores: []cairnv1.Restore{rs("r1", cairnv1.RestorePhaseWaitingForPluginOperations, named, "nightly-2")}, want: "r1"},
		{name: "a finalizing restore", restores: []cairnv1.Restore{rs("r1", cairnv1.RestorePhaseFinalizing, named, "nightly-2")}, want: "r1"},
		{name: "ended restores do not read", restores: []cairnv1.Restore{
			rs("r1", cairnv1.RestorePhaseCompleted, named, "nightly-2"), rs("r2", cairnv1.RestorePhasePartiallyFailed, named, "nightly-2"),
			rs("r3", cairnv1.RestorePhaseFailed, named, "nightly-2"), rs("r4", cairnv1.RestorePhaseFailedValidation, named, "")}},
		{name: "a restore of another backup", restores: []cairnv1.Restore{rs("r1", cairnv1.RestorePhaseInProgress, cairnv1.RestoreSpec{BackupName: "other"}, "other")}},
		{name: "a schedule's restore that resolved to another of its backups", restores: []cairnv1.Restore{rs("r1", cairnv1.RestorePhaseQueued, cairnv1.RestoreSpec{ScheduleName: "nightly"}, "nightly-3")}},
		{name: "a new restore of its schedule, not resolved yet", restores: []cairnv1.Restore{rs("r1", "", cairnv1.RestoreSpec{ScheduleName: "nightly"}, "")}, want: "r1"},
		{name: "a new restore of another schedule", restores: []cairnv1.Restore{rs("r1", "", cairnv1.RestoreSpec{ScheduleName: "hourly"}, "")}},
		{name: "a restore of the same name in another namespace", restores: []cairnv1.Restore{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "r1"}, Spec: named, Status: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseInProgress, BackupName: "nightly-2"}}}},
		{name: "the first by name of several", restores: []cairnv1.Restore{
			rs("r3", cairnv1.RestorePhaseQueued, named, "nightly-2"), rs("r1", cairnv1.RestorePhaseCompleted, named, "nightly-2"), rs("r2", "", named, "")}, want: "r2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := readingRestore(tt.restores, b); got != tt.want {
				t.Errorf("readingRestore = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDeletionsMap(t *testing.T) {
	d := newDeletions()
	if _, ok := d.Get("a"); ok {
		t.Fatal("an empty map has an entry")
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := types.UID(string(rune('a' + i%5)))
			d.Set(uid, deletionRecord{State: deletionRunning})
			d.Get(uid)
			if i%2 == 0 {
				d.Set(uid, deletionRecord{State: deletionFailed, Message: "x"})
			}
		}()
	}
	wg.Wait()
	d.Set("a", deletionRecord{State: deletionDone})
	if rec, ok := d.Get("a"); !ok || rec.State != deletionDone {
		t.Fatalf("got %+v, %v", rec, ok)
	}
	d.Forget("a")
	if _, ok := d.Get("a"); ok {
		t.Fatal("forget left the entry")
	}
}

// openGate lets a reconciler made by a test run at once.
type openGate struct{}

func (openGate) Wait(context.Context) error { return nil }

// TestDeletionBackoff drives the deletion reconciler (fake client, fake clock) through failing
// attempts against a ReadOnly location: each failure is DeletionFailed with the error, and the
// next attempt waits 10s, 20s, 40s, then 1m at most.
func TestDeletionBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC))
	deleted := metav1.NewTime(clk.Now())
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "ro", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, AccessMode: cairnv1.AccessModeReadOnly,
			Config: map[string]string{cairnv1.ConfigKeyPath: t.TempDir()}}}
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cairn-system", UID: "uid-b",
		DeletionTimestamp: &deleted, Finalizers: []string{cairnv1.BackupDataFinalizer}},
		Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StorageLocation: "ro", StartTimestamp: &deleted}}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl, b).WithStatusSubresource(&cairnv1.Backup{}).Build()
	r := startTestDeletionReconciler(ctx, c, clk, events.NewFakeRecorder(100), nil)

	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "cairn-system", Name: "b"}}
	reconcile := func() ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	get := func() *cairnv1.Backup {
		t.Helper()
		var got cairnv1.Backup
		if err := c.Get(ctx, req.NamespacedName, &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}

	for attempt, wantDelay := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute} {
		// start: the goroutine runs; a retry shows Deleting at once, the first attempt only
		// once it has run for deletingShownAfter (it fails before).
		reconcile()
		want := cairnv1.BackupPhaseDeleting
		if attempt == 0 {
			want = cairnv1.BackupPhaseCompleted
		}
		if got := get(); got.Status.Phase != want {
			t.Fatalf("attempt %d: phase %s, want %s", attempt+1, got.Status.Phase, want)
		}
		select {
		case <-r.ended:
		case <-time.After(10 * time.Second):
			t.Fatal("the deletion goroutine did not report")
		}
		res := reconcile() // the goroutine failed: DeletionFailed
		got := get()
		if got.Status.Phase != cairnv1.BackupPhaseDeletionFailed || got.Status.DeletionAttempts != int32(attempt+1) {
			t.Fatalf("attempt %d: phase %s, attempts %d", attempt+1, got.Status.Phase, got.Status.DeletionAttempts)
		}
		if !strings.Contains(got.Status.LastDeletionError, "ReadOnly") || !strings.Contains(got.Status.LastDeletionError, cairnv1.KeepDataAnnotation) {
			t.Fatalf("attempt %d: error %q does not say what to do", attempt+1, got.Status.LastDeletionError)
		}
		if res.RequeueAfter != wantDelay || !got.Status.NextDeletionAttempt.Time.Equal(clk.Now().Add(wantDelay)) {
			t.Fatalf("attempt %d: requeue after %s, next attempt %s; want %s", attempt+1, res.RequeueAfter, got.Status.NextDeletionAttempt, wantDelay)
		}
		// Before it is due, nothing happens.
		clk.Step(wantDelay / 2)
		if res := reconcile(); res.RequeueAfter != wantDelay-wantDelay/2 {
			t.Fatalf("attempt %d: early reconcile requeues after %s", attempt+1, res.RequeueAfter)
		}
		if got := get(); got.Status.Phase != cairnv1.BackupPhaseDeletionFailed {
			t.Fatalf("attempt %d: an early reconcile moved the phase to %s", attempt+1, got.Status.Phase)
		}
		clk.Step(wantDelay - wantDelay/2)
	}

	// No phase timeout ends a deletion: hours later it is still retried, and still says what
	// to do.
	clk.Step(3 * time.Hour)
	reconcile()
	if got := get(); got.Status.Phase != cairnv1.BackupPhaseDeleting {
		t.Fatalf("3h later: phase %s, want Deleting again", got.Status.Phase)
	}
	select {
	case <-r.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the deletion goroutine did not report")
	}
	reconcile()
	if got := get(); got.Status.Phase != cairnv1.BackupPhaseDeletionFailed {
		t.Fatalf("3h later: phase %s, want DeletionFailed", got.Status.Phase)
	}

	// The user gives up on the data: keep-data lets the object go without touching storage.
	got := get()
	got.Annotations = map[string]string{cairnv1.KeepDataAnnotation: "true"}
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if err := c.Get(ctx, req.NamespacedName, &cairnv1.Backup{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the backup is still there after keep-data: %v", err)
	}
	if r.deletions.Len() != 0 || r.backoff().Tracked() != 0 {
		t.Errorf("%d deletion records and %d backoff entries left of a backup that is gone", r.deletions.Len(), r.backoff().Tracked())
	}
}

// startTestDeletionReconciler is a deletion reconciler on client c and clock clk, as
// SetupWithManager would make it but with a 10s–1m backoff and room for two goroutines' ends,
// running for ctx; wrap, when not nil, wraps every store it opens.
func startTestDeletionReconciler(ctx context.Context, c client.Client, clk clock.Clock, recorder events.EventRecorder,
	wrap func(*cairnv1.BackupStorageLocation, storage.ObjectStore) storage.ObjectStore) *Reconciler {
	r := &Reconciler{Client: c, Stores: stores.Stores{Client: c, Namespace: "cairn-system", Wrap: wrap}, Clock: clk,
		Recorder: recorder, Gate: openGate{}, BackoffMin: 10 * time.Second, BackoffMax: time.Minute,
		deletions: newDeletions(), ended: make(chan event.GenericEvent, 2), life: &lifetime{ready: make(chan struct{})}}
	go func() { _ = r.life.Start(ctx) }()
	<-r.life.ready
	return r
}

// reconcileDeletion reconciles req, which starts its deletion, waits for the deletion goroutine
// to report, and reconciles again, as the goroutine's end does.
func reconcileDeletion(ctx context.Context, t *testing.T, r *Reconciler, req ctrl.Request) {
	t.Helper()
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the deletion goroutine did not report")
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
}

// ptrTo is a pointer to a deletion record as get returns it.
func ptrTo(rec deletionRecord, _ bool) *deletionRecord { return &rec }

// TestQuickDeletionWritesNoStatus: a first deletion that ends before deletingShownAfter lets
// the object go with no status write and no event: the data removed, checked, and the
// finalizer removed, nothing else (a schedule's backups expiring together cost the API server
// two writes each, the Delete and the finalizer's removal).
func TestQuickDeletionWritesNoStatus(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC))
	now := metav1.NewTime(clk.Now())
	dir := t.TempDir()
	store, err := storage.NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	keys := storage.Layout{}.Backup("cairn-system", "b")
	for _, key := range []string{keys.Archive, keys.Logs} {
		if err := store.Put(ctx, key, strings.NewReader("data")); err != nil {
			t.Fatal(err)
		}
	}
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "rw", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{cairnv1.ConfigKeyPath: dir}}}
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cairn-system", UID: "uid-q",
		DeletionTimestamp: &now, Finalizers: []string{cairnv1.BackupDataFinalizer}},
		Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StorageLocation: "rw", StartTimestamp: &now}}
	var statusWrites int
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl, b).WithStatusSubresource(&cairnv1.Backup{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			statusWrites++
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}}).Build()
	recorder := events.NewFakeRecorder(100)
	r := startTestDeletionReconciler(ctx, c, clk, recorder, nil)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "cairn-system", Name: "b"}}
	reconcileDeletion(ctx, t, r, req)
	if err := c.Get(ctx, req.NamespacedName, &cairnv1.Backup{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the backup is still there: %v", err)
	}
	if left, err := store.List(ctx, keys.Dir); err != nil || len(left) > 0 {
		t.Fatalf("left in storage: %v, %v", left, err)
	}
	if statusWrites != 0 || len(recorder.Events) != 0 {
		t.Errorf("%d status writes and %d events for a deletion that ended at once, want none", statusWrites, len(recorder.Events))
	}
	if r.deletions.Len() != 0 {
		t.Errorf("%d deletion records left of a backup that is gone", r.deletions.Len())
	}
}

// panickingStore panics on every read, as a buggy provider might.
type panickingStore struct{ storage.ObjectStore }

func (panickingStore) Get(context.Context, string) (io.ReadCloser, error) { panic("provider bug") }
func (panickingStore) List(context.Context, string) ([]string, error)     { panic("provider bug") }

// TestDeletionPanic: a deletion goroutine that panics reports a failure like any other, and the
// backup goes to DeletionFailed instead of staying in Deleting.
func TestDeletionPanic(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC))
	now := metav1.NewTime(clk.Now())
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "rw", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{cairnv1.ConfigKeyPath: t.TempDir()}}}
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cairn-system", UID: "uid-p",
		DeletionTimestamp: &now, Finalizers: []string{cairnv1.BackupDataFinalizer}},
		Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StorageLocation: "rw", StartTimestamp: &now}}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl, b).WithStatusSubresource(&cairnv1.Backup{}).Build()
	r := startTestDeletionReconciler(ctx, c, clk, events.NewFakeRecorder(100), func(_ *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
		return panickingStore{s}
	})
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "cairn-system", Name: "b"}}
	reconcileDeletion(ctx, t, r, req)
	var got cairnv1.Backup
	if err := c.Get(ctx, req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != cairnv1.BackupPhaseDeletionFailed || got.Status.LastDeletionError != "the deletion panicked: provider bug" {
		t.Fatalf("phase %s, error %q", got.Status.Phase, got.Status.LastDeletionError)
	}
}

// hangingListStore blocks every List until release is closed, and counts the Lists.
type hangingListStore struct {
	storage.ObjectStore
	release <-chan struct{}
	listed  chan<- string
}

func (s hangingListStore) List(ctx context.Context, prefix string) ([]string, error) {
	s.listed <- prefix
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.ObjectStore.List(ctx, prefix)
}

// TestDeletionWaitingForASlot: with one deletion slot, a second deleted backup waits in line,
// and shows Deleting once it has waited deletingShownAfter; keep-data takes it out of the line and the object goes without its data being
// touched. A backup whose object goes while its deletion runs leaves nothing in memory.
func TestDeletionWaitingForASlot(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC))
	now := metav1.NewTime(clk.Now())
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "rw", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{cairnv1.ConfigKeyPath: t.TempDir()}}}
	deleted := func(name string) *cairnv1.Backup {
		return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "cairn-system", UID: types.UID("uid-" + name),
			DeletionTimestamp: &now, Finalizers: []string{cairnv1.BackupDataFinalizer}},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StorageLocation: "rw", StartTimestamp: &now}}
	}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl, deleted("b1"), deleted("b2")).WithStatusSubresource(&cairnv1.Backup{}).Build()
	release := make(chan struct{})
	listed := make(chan string, 10)
	recorder := events.NewFakeRecorder(100)
	r := startTestDeletionReconciler(ctx, c, clk, recorder, func(_ *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
		return hangingListStore{ObjectStore: s, release: release, listed: listed}
	})
	r.slots = &deletionSlots{limit: 1, run: r.runDeletion}
	key := func(name string) types.NamespacedName {
		return types.NamespacedName{Namespace: "cairn-system", Name: name}
	}
	reconcile := func(name string) {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key(name)}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) (*cairnv1.Backup, error) {
		var b cairnv1.Backup
		err := c.Get(ctx, key(name), &b)
		return &b, err
	}

	reconcile("b1")
	<-listed // b1's deletion runs and holds the only slot
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key("b2")})
	if err != nil || res.RequeueAfter != deletingShownAfter {
		t.Fatalf("b2's start: %+v, %v; want a requeue when Deleting is due", res, err)
	}
	if b, err := get("b2"); err != nil || b.Status.Phase != cairnv1.BackupPhaseCompleted {
		t.Fatalf("b2: %v, %v; want Completed for the first %s", b.Status.Phase, err, deletingShownAfter)
	}
	clk.Step(deletingShownAfter / 2)
	reconcile("b2")
	if b, _ := get("b2"); b.Status.Phase != cairnv1.BackupPhaseCompleted {
		t.Fatalf("b2: %v half-way; want Completed", b.Status.Phase)
	}
	clk.Step(deletingShownAfter / 2)
	reconcile("b2")
	b2, _ := get("b2")
	if b2.Status.Phase != cairnv1.BackupPhaseDeleting {
		t.Fatalf("b2: %v; want Deleting after waiting %s", b2.Status.Phase, deletingShownAfter)
	}
	if rec, _ := r.deletions.Get("uid-b2"); rec.State != deletionWaiting || !rec.Shown {
		t.Fatalf("b2's record %+v, want waiting and shown", rec)
	}
	// Shown once: a stale read of the terminal phase writes nothing more.
	stale := b2.DeepCopy()
	stale.Status.Phase = cairnv1.BackupPhaseCompleted
	if step, _ := nextDeletionStep(deletionInput{Phase: stale.Status.Phase, Deleted: true, HasData: true, Record: ptrTo(r.deletions.Get("uid-b2")), Now: clk.Now()}); step != stepWait {
		t.Fatalf("a stale read after Deleting was shown: %s, want %s", step, stepWait)
	}
	reconcile("b2")
	if again, _ := get("b2"); again.ResourceVersion != b2.ResourceVersion {
		t.Fatalf("b2 was written again while it waits (resourceVersion %s → %s)", b2.ResourceVersion, again.ResourceVersion)
	}

	// keep-data while waiting: out of the line, the object goes.
	b2, _ = get("b2")
	b2.Annotations = map[string]string{cairnv1.KeepDataAnnotation: "true"}
	if err := c.Update(ctx, b2); err != nil {
		t.Fatal(err)
	}
	reconcile("b2")
	if _, err := get("b2"); !apierrors.IsNotFound(err) {
		t.Fatalf("b2 is still there after keep-data: %v", err)
	}

	// b1's object goes by hand while its deletion runs (what the watch's delete handler sees).
	b1, _ := get("b1")
	b1.Finalizers = nil
	if err := c.Update(ctx, b1); err != nil {
		t.Fatal(err)
	}
	r.forget("uid-b1")
	close(release)
	select {
	case <-r.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("b1's deletion did not end")
	}
	reconcile("b1")
	if n := r.deletions.Len(); n != 0 {
		t.Errorf("%d entries left in the deletions map, want none", n)
	}
	if n := len(listed); n != 0 {
		t.Errorf("%d more Lists: b2's data was touched after keep-data", n)
	}
}
