package queue

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/unittest"
)

// The restore side of the one queue (Reconciler), one pass at a time on the fake
// client.

// openGate lets a queue made by a test run at once.
type openGate struct{}

func (openGate) Wait(context.Context) error { return nil }

// newRestoreQueue is the queue with concurrent restore slots (0: the default, 1) and one
// backup slot.
func newRestoreQueue(c client.Client, clk *clocktesting.FakeClock, concurrent int) *Reconciler {
	return &Reconciler{Client: c, Namespace: "cairn-system", ConcurrentBackups: 1, ConcurrentRestores: concurrent,
		ResyncPeriod: DefaultResyncPeriod, Clock: clk, Recorder: events.NewFakeRecorder(100), Gate: openGate{}}
}

// queuePassAfterQuiet runs a pass once the queue has been still for the renumbering's quiet
// period, so that the positions of those that stay are written.
func queuePassAfterQuiet(t *testing.T, r *Reconciler, clk *clocktesting.FakeClock) {
	t.Helper()
	clk.Step(renumberQuietPeriod)
	if _, err := r.Reconcile(context.Background(), queueRequest); err != nil {
		t.Fatal(err)
	}
}

// adminRestore is restore cairn-system/name of backup b into the namespace of the same name,
// created minutes after unittest.Epoch, in phase.
func adminRestore(name string, minutes int, phase cairnv1.RestorePhase) *cairnv1.Restore {
	rs := unittest.Restore("cairn-system", name, minutes, phase)
	rs.Spec.IncludedNamespaces = []string{name}
	return rs
}

// queuedAdminRestore is adminRestore, Queued at position, with its finalizer.
func queuedAdminRestore(name string, minutes int, position int32) *cairnv1.Restore {
	rs := adminRestore(name, minutes, cairnv1.RestorePhaseQueued)
	rs.Status.QueuePosition, rs.Status.BackupName = position, "b"
	rs.Finalizers = []string{cairnv1.RestoreDataFinalizer}
	return rs
}

func restoreQueuedCondition(rs *cairnv1.Restore) *metav1.Condition {
	return meta.FindStatusCondition(rs.Status.Conditions, cairnv1.RestoreConditionQueued)
}

// TestRestoreQueueAdmitsNewRestoresInCreationOrder: new restores get the finalizer and are
// Queued in creation order (ties by namespace/name), positions 1..n, while the one restore slot
// is taken; a second pass writes nothing.
func TestRestoreQueueAdmitsNewRestoresInCreationOrder(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
	running := adminRestore("running", 0, cairnv1.RestorePhaseInProgress)
	restores := []*cairnv1.Restore{
		unittest.Restore("team-a", "c", 1, ""), adminRestore("a", 2, cairnv1.RestorePhaseNew),
		unittest.Restore("team-b", "b", 3, ""), unittest.Restore("team-d", "d", 4, ""), adminRestore("e", 4, ""),
	}
	wantOrder := []string{"team-a/c", "cairn-system/a", "team-b/b", "cairn-system/e", "team-d/d"}
	objects := []client.Object{unittest.DefaultLocation(t.TempDir()), unittest.CompletedBackup("cairn-system", "b"), unittest.CompletedBackup("team-a", "b"),
		unittest.CompletedBackup("team-b", "b"), unittest.CompletedBackup("team-d", "b"), running}
	for _, rs := range restores {
		objects = append(objects, rs)
	}
	var writes unittest.WriteCounter
	c := unittest.NewClient(t, writes.Funcs(interceptor.Funcs{}), objects...)
	r := newRestoreQueue(c, clk, 1)

	res, err := r.Reconcile(context.Background(), queueRequest)
	if err != nil || res.RequeueAfter != DefaultResyncPeriod {
		t.Fatalf("Reconcile = %+v, %v; want a resync after %s", res, err, DefaultResyncPeriod)
	}
	for i, name := range wantOrder {
		namespace, n, _ := strings.Cut(name, "/")
		rs := unittest.GetRestore(t, c, namespace, n)
		if rs.Status.Phase != cairnv1.RestorePhaseQueued || rs.Status.QueuePosition != int32(i+1) {
			t.Errorf("%s: phase %s at position %d, want Queued at %d", name, rs.Status.Phase, rs.Status.QueuePosition, i+1)
		}
		if !controllerutil.ContainsFinalizer(rs, cairnv1.RestoreDataFinalizer) {
			t.Errorf("%s: finalizers %q, want %s", name, rs.Finalizers, cairnv1.RestoreDataFinalizer)
		}
		if rs.Status.BackupName != "b" || rs.Status.PhaseTransitionTime == nil || !rs.Status.PhaseTransitionTime.Time.Equal(clk.Now()) {
			t.Errorf("%s: backupName %q, phaseTransitionTime %v; want b, %v", name, rs.Status.BackupName, rs.Status.PhaseTransitionTime, clk.Now())
		}
		cond := restoreQueuedCondition(rs)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != cairnv1.ReasonWaitingForConcurrencySlot ||
			cond.Message != "restore concurrency limit 1 reached" {
			t.Errorf("%s: Queued condition %+v, want True, restore concurrency limit 1 reached", name, cond)
		}
	}
	if got := unittest.GetRestore(t, c, "cairn-system", "running"); got.Status.Phase != cairnv1.RestorePhaseInProgress || len(got.Finalizers) != 0 {
		t.Errorf("the running restore was touched: phase %s, finalizers %q", got.Status.Phase, got.Finalizers)
	}
	// The phase change's event is PhaseWatcher's, not the queue's: no second one.
	if evs := unittest.DrainEvents(r.Recorder); len(evs) != 0 {
		t.Errorf("events %q, want none from the queue itself", evs)
	}

	writes.N.Store(0)
	if _, err := r.Reconcile(context.Background(), queueRequest); err != nil {
		t.Fatal(err)
	}
	if n := writes.N.Load(); n != 0 {
		t.Errorf("a second pass over an unchanged queue made %d writes, want none", n)
	}
}

// TestRestoreQueueDequeuesAtMostConcurrentRestores: Queued restores go ReadyToStart in position
// order (not creation order) while fewer than ConcurrentRestores are ReadyToStart or
// InProgress; the rest are renumbered 1..n.
func TestRestoreQueueDequeuesAtMostConcurrentRestores(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
	objects := []client.Object{unittest.DefaultLocation(t.TempDir()), unittest.CompletedBackup("cairn-system", "b"),
		adminRestore("running", 0, cairnv1.RestorePhaseInProgress),
		queuedAdminRestore("q-x", 1, 3), queuedAdminRestore("q-y", 2, 1), queuedAdminRestore("q-z", 3, 2),
		adminRestore("new", 4, "")}
	c := unittest.NewClient(t, interceptor.Funcs{}, objects...)
	r := newRestoreQueue(c, clk, 2)

	check := func(step string, wantReady []string, wantQueued []string) {
		t.Helper()
		var list cairnv1.RestoreList
		if err := c.List(context.Background(), &list); err != nil {
			t.Fatal(err)
		}
		var ready []string
		var queued []*cairnv1.Restore
		slots := 0
		for i := range list.Items {
			rs := &list.Items[i]
			switch rs.Status.Phase {
			case cairnv1.RestorePhaseReadyToStart:
				ready = append(ready, rs.Name)
				slots++
				cond := restoreQueuedCondition(rs)
				if rs.Status.QueuePosition != 0 || cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != cairnv1.ReasonDequeued {
					t.Errorf("%s: %s at position %d with Queued condition %+v; want position 0 and Queued False (Dequeued)", step, rs.Name, rs.Status.QueuePosition, cond)
				}
			case cairnv1.RestorePhaseInProgress:
				slots++
			case cairnv1.RestorePhaseQueued:
				queued = append(queued, rs)
			}
		}
		sort.Strings(ready)
		sort.Slice(queued, func(i, j int) bool { return queued[i].Status.QueuePosition < queued[j].Status.QueuePosition })
		var queuedNames []string
		for i, rs := range queued {
			queuedNames = append(queuedNames, rs.Name)
			if rs.Status.QueuePosition != int32(i+1) {
				t.Errorf("%s: %s at position %d, want %d", step, rs.Name, rs.Status.QueuePosition, i+1)
			}
			if cond := restoreQueuedCondition(rs); cond == nil || cond.Message != "restore concurrency limit 2 reached" {
				t.Errorf("%s: %s waits with Queued condition %+v, want restore concurrency limit 2 reached", step, rs.Name, cond)
			}
		}
		if !reflect.DeepEqual(ready, wantReady) || !reflect.DeepEqual(queuedNames, wantQueued) {
			t.Errorf("%s: ReadyToStart %q, Queued by position %q; want %q and %q", step, ready, queuedNames, wantReady, wantQueued)
		}
		if slots > 2 {
			t.Errorf("%s: %d restores ReadyToStart or InProgress, more than the 2 slots", step, slots)
		}
	}

	if _, err := r.Reconcile(context.Background(), queueRequest); err != nil {
		t.Fatal(err)
	}
	queuePassAfterQuiet(t, r, clk)
	check("first pass", []string{"q-y"}, []string{"q-z", "q-x", "new"})

	// The running restore ends: the next in line takes its slot.
	done := unittest.GetRestore(t, c, "cairn-system", "running")
	done.Status.Phase = cairnv1.RestorePhaseCompleted
	if err := c.Status().Update(context.Background(), done); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), queueRequest); err != nil {
		t.Fatal(err)
	}
	queuePassAfterQuiet(t, r, clk)
	check("after the running restore ended", []string{"q-y", "q-z"}, []string{"q-x", "new"})
}

func TestRestoreQueueUsesOneSlotWhenConcurrencyIsUnset(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
	c := unittest.NewClient(t, interceptor.Funcs{}, unittest.DefaultLocation(t.TempDir()), unittest.CompletedBackup("cairn-system", "b"),
		adminRestore("first", 1, ""), adminRestore("second", 2, ""))
	r := newRestoreQueue(c, clk, 0)
	if _, err := r.Reconcile(context.Background(), queueRequest); err != nil {
		t.Fatal(err)
	}
	queuePassAfterQuiet(t, r, clk)
	first, second := unittest.GetRestore(t, c, "cairn-system", "first"), unittest.GetRestore(t, c, "cairn-system", "second")
	if first.Status.Phase != cairnv1.RestorePhaseReadyToStart || second.Status.Phase != cairnv1.RestorePhaseQueued || second.Status.QueuePosition != 1 {
		t.Errorf("first %s, second %s at %d; want ReadyToStart, and Queued at 1", first.Status.Phase, second.Status.Phase, second.Status.QueuePosition)
	}
	if cond := restoreQueuedCondition(second); cond == nil || cond.Message != "restore concurrency limit 1 reached" {
		t.Errorf("second waits with Queued condition %+v, want restore concurrency limit 1 reached", cond)
	}
}

// TestRestoreQueueEndsCancelledAndDeletedRestores: a New or Queued restore cancelled or deleted
// ends Failed with the failureReason, out of the line; the rest are renumbered.
func TestRestoreQueueEndsCancelledAndDeletedRestores(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
	deleted := metav1.NewTime(unittest.Epoch.Add(30 * time.Minute))
	newCancelled := unittest.Restore("team-a", "new-cancelled", 1, "")
	newCancelled.Spec.Cancel = true
	queuedCancelled := unittest.QueuedRestore("queued-cancelled", 2, 1)
	queuedCancelled.Spec.Cancel = true
	queuedCancelled.Status.Conditions = []metav1.Condition{{Type: cairnv1.RestoreConditionQueued, Status: metav1.ConditionTrue,
		Reason: cairnv1.ReasonWaitingForConcurrencySlot, Message: "waiting", LastTransitionTime: deleted}}
	newDeleted := unittest.Restore("team-a", "new-deleted", 3, cairnv1.RestorePhaseNew)
	newDeleted.DeletionTimestamp, newDeleted.Finalizers = &deleted, []string{cairnv1.RestoreDataFinalizer}
	queuedDeleted := unittest.QueuedRestore("queued-deleted", 4, 2)
	queuedDeleted.DeletionTimestamp = &deleted
	kept := unittest.QueuedRestore("queued-kept", 5, 3)
	c := unittest.NewClient(t, interceptor.Funcs{}, unittest.DefaultLocation(t.TempDir()), unittest.CompletedBackup("team-a", "b"),
		unittest.Restore("cairn-system", "running", 0, cairnv1.RestorePhaseInProgress), newCancelled, queuedCancelled, newDeleted, queuedDeleted, kept)
	r := newRestoreQueue(c, clk, 1)
	if _, err := r.Reconcile(context.Background(), queueRequest); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		want string
	}{
		{"new-cancelled", cairnv1.FailureReasonRestoreCancelled},
		{"queued-cancelled", cairnv1.FailureReasonRestoreCancelled},
		{"new-deleted", lifecycle.FailureReasonRestoreDeleted},
		{"queued-deleted", lifecycle.FailureReasonRestoreDeleted},
	} {
		rs := unittest.GetRestore(t, c, "team-a", tt.name)
		if rs.Status.Phase != cairnv1.RestorePhaseFailed || rs.Status.FailureReason != tt.want || rs.Status.QueuePosition != 0 {
			t.Errorf("%s: phase %s, failureReason %q, position %d; want Failed, %q, 0", tt.name, rs.Status.Phase, rs.Status.FailureReason, rs.Status.QueuePosition, tt.want)
		}
		if rs.Status.CompletionTimestamp == nil || !rs.Status.CompletionTimestamp.Time.Equal(clk.Now()) {
			t.Errorf("%s: completionTimestamp %v, want %v", tt.name, rs.Status.CompletionTimestamp, clk.Now())
		}
		if restoreQueuedCondition(rs) != nil {
			t.Errorf("%s: still has a Queued condition", tt.name)
		}
		// The finalizer stays: the restore finalizer removes its files first.
		if !controllerutil.ContainsFinalizer(rs, cairnv1.RestoreDataFinalizer) {
			t.Errorf("%s: finalizers %q, want %s", tt.name, rs.Finalizers, cairnv1.RestoreDataFinalizer)
		}
	}
	queuePassAfterQuiet(t, r, clk)
	if rs := unittest.GetRestore(t, c, "team-a", "queued-kept"); rs.Status.Phase != cairnv1.RestorePhaseQueued || rs.Status.QueuePosition != 1 {
		t.Errorf("queued-kept: phase %s at %d, want Queued at 1 (renumbered)", rs.Status.Phase, rs.Status.QueuePosition)
	}
	cancelled := 0
	for _, e := range unittest.DrainEvents(r.Recorder) {
		if strings.HasPrefix(e, "Normal Cancelled ") && strings.Contains(e, "before it started: nothing was restored") {
			cancelled++
		}
	}
	if cancelled != 4 {
		t.Errorf("%d Cancelled events, want 4", cancelled)
	}
}

// TestRestoreQueueValidation: restores that fail validation end FailedValidation with capped
// messages; a backup of another namespace is not found; a schedule resolves to its newest
// Completed backup in the restore's namespace.
func TestRestoreQueueValidation(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
	manyBad := unittest.Restore("team-a", "many-bad", 1, "")
	manyBad.Spec.BackupName = "gone"
	manyBad.Spec.IncludedResources = []string{strings.Repeat("X", 2000)}
	for i := range 24 {
		manyBad.Spec.IncludedResources = append(manyBad.Spec.IncludedResources, fmt.Sprintf("Bad%d", i))
	}
	elsewhere := unittest.Restore("team-a", "elsewhere", 2, "")
	elsewhere.Spec.BackupName = "only-in-team-b"
	scheduled := unittest.Restore("team-a", "scheduled", 3, "")
	scheduled.Spec = cairnv1.RestoreSpec{ScheduleName: "nightly"}
	noSchedule := unittest.Restore("team-a", "no-schedule", 4, "")
	noSchedule.Spec = cairnv1.RestoreSpec{ScheduleName: "weekly"}
	scheduleBackup := func(namespace, name, schedule string, phase cairnv1.BackupPhase, hours int) *cairnv1.Backup {
		b := unittest.CompletedBackup(namespace, name)
		b.Labels = map[string]string{cairnv1.ScheduleNameLabel: schedule}
		b.CreationTimestamp = metav1.NewTime(unittest.Epoch.Add(time.Duration(hours) * time.Hour))
		b.Status.Phase = phase
		return b
	}
	c := unittest.NewClient(t, interceptor.Funcs{}, unittest.DefaultLocation(t.TempDir()),
		unittest.CompletedBackup("team-b", "only-in-team-b"),
		scheduleBackup("team-a", "nightly-1", "nightly", cairnv1.BackupPhaseCompleted, 1),
		scheduleBackup("team-a", "nightly-2", "nightly", cairnv1.BackupPhaseCompleted, 2),
		scheduleBackup("team-a", "nightly-3", "nightly", cairnv1.BackupPhasePartiallyFailed, 3),
		scheduleBackup("team-a", "hourly-4", "hourly", cairnv1.BackupPhaseCompleted, 4),
		scheduleBackup("team-b", "nightly-5", "nightly", cairnv1.BackupPhaseCompleted, 5),
		scheduleBackup("team-a", "weekly-6", "weekly", cairnv1.BackupPhaseFailed, 6),
		unittest.Restore("cairn-system", "running", 0, cairnv1.RestorePhaseInProgress),
		manyBad, elsewhere, scheduled, noSchedule)
	r := newRestoreQueue(c, clk, 1)
	if _, err := r.Reconcile(context.Background(), queueRequest); err != nil {
		t.Fatal(err)
	}

	failed := func(name string) *cairnv1.Restore {
		t.Helper()
		rs := unittest.GetRestore(t, c, "team-a", name)
		if rs.Status.Phase != cairnv1.RestorePhaseFailedValidation || rs.Status.QueuePosition != 0 {
			t.Errorf("%s: phase %s at %d, want FailedValidation", name, rs.Status.Phase, rs.Status.QueuePosition)
		}
		if rs.Status.CompletionTimestamp == nil || !rs.Status.CompletionTimestamp.Time.Equal(clk.Now()) {
			t.Errorf("%s: completionTimestamp %v, want %v", name, rs.Status.CompletionTimestamp, clk.Now())
		}
		if !controllerutil.ContainsFinalizer(rs, cairnv1.RestoreDataFinalizer) {
			t.Errorf("%s: finalizers %q, want %s", name, rs.Finalizers, cairnv1.RestoreDataFinalizer)
		}
		return rs
	}
	rs := failed("many-bad")
	msgs := rs.Status.ValidationErrors
	// 25 bad resource names and the missing backup: 19 kept, the last message counts the other 7.
	if len(msgs) != cairnv1.MaxValidationErrors || msgs[len(msgs)-1] != "and 7 more problems" {
		t.Errorf("many-bad: %d messages ending %q, want %d ending with \"and 7 more problems\"", len(msgs), msgs[len(msgs)-1], cairnv1.MaxValidationErrors)
	}
	for i, m := range msgs {
		if len(m) > cairnv1.MaxValidationErrorLength {
			t.Errorf("many-bad: message %d is %d bytes, more than %d", i, len(m), cairnv1.MaxValidationErrorLength)
		}
	}
	if !strings.HasSuffix(msgs[0], "…") || rs.Status.BackupName != "gone" {
		t.Errorf("many-bad: first message %q… (cut with an ellipsis?), backupName %q", msgs[0][:60], rs.Status.BackupName)
	}

	rs = failed("elsewhere")
	if len(rs.Status.ValidationErrors) != 1 || !strings.Contains(rs.Status.ValidationErrors[0], "spec.backupName: backup only-in-team-b not found in namespace team-a") {
		t.Errorf("elsewhere: validationErrors %q, want the backup of another namespace not found", rs.Status.ValidationErrors)
	}
	rs = failed("no-schedule")
	if len(rs.Status.ValidationErrors) != 1 || !strings.Contains(rs.Status.ValidationErrors[0], "spec.scheduleName: schedule weekly has no Completed backup in namespace team-a") {
		t.Errorf("no-schedule: validationErrors %q", rs.Status.ValidationErrors)
	}

	rs = unittest.GetRestore(t, c, "team-a", "scheduled")
	if rs.Status.Phase != cairnv1.RestorePhaseQueued || rs.Status.QueuePosition != 1 || rs.Status.BackupName != "nightly-2" || len(rs.Status.ValidationErrors) != 0 {
		t.Errorf("scheduled: phase %s at %d, backupName %q, validationErrors %q; want Queued at 1 restoring nightly-2",
			rs.Status.Phase, rs.Status.QueuePosition, rs.Status.BackupName, rs.Status.ValidationErrors)
	}
	// The phase change's event (FailedValidation, with the messages) is PhaseWatcher's.
	for _, e := range unittest.DrainEvents(r.Recorder) {
		if strings.Contains(e, "FailedValidation") {
			t.Errorf("event %q from the queue itself, want none", e)
		}
	}
}

// TestRestoreQueueOneFailedWriteDoesNotStopThePass: a restore whose status cannot be written
// stays New for the next pass; the others are queued and dequeued as if it were not there.
func TestRestoreQueueOneFailedWriteDoesNotStopThePass(t *testing.T) {
	for _, tt := range []struct {
		name  string
		funcs func(fail *atomic.Bool) interceptor.Funcs
		// wantFinalizer: whether the failing restore has the finalizer after the failing pass.
		wantFinalizer bool
	}{
		{name: "the status write fails", wantFinalizer: true, funcs: func(fail *atomic.Bool) interceptor.Funcs {
			return interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				if fail.Load() && obj.GetName() == "a" {
					return unittest.APIUnavailable()
				}
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			}}
		}},
		{name: "the status write fails once", wantFinalizer: true, funcs: func(fail *atomic.Bool) interceptor.Funcs {
			return interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				if obj.GetName() == "a" && fail.CompareAndSwap(true, false) {
					return unittest.APIUnavailable()
				}
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			}}
		}},
		{name: "adding the finalizer fails", funcs: func(fail *atomic.Bool) interceptor.Funcs {
			return interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				if fail.Load() && obj.GetName() == "a" {
					return unittest.APIUnavailable()
				}
				return c.Patch(ctx, obj, p, opts...)
			}}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
			var fail atomic.Bool
			fail.Store(true)
			c := unittest.NewClient(t, tt.funcs(&fail), unittest.DefaultLocation(t.TempDir()), unittest.CompletedBackup("cairn-system", "b"),
				adminRestore("a", 1, ""), adminRestore("b", 2, ""), adminRestore("c", 3, ""))
			r := newRestoreQueue(c, clk, 1)
			if _, err := r.Reconcile(context.Background(), queueRequest); err == nil {
				t.Error("Reconcile = nil, want the failed write's error (for a retry)")
			}
			a, b := unittest.GetRestore(t, c, "cairn-system", "a"), unittest.GetRestore(t, c, "cairn-system", "b")
			if a.Status.Phase != "" || controllerutil.ContainsFinalizer(a, cairnv1.RestoreDataFinalizer) != tt.wantFinalizer {
				t.Errorf("a: phase %q, finalizers %q; want it left New for the next pass", a.Status.Phase, a.Finalizers)
			}
			if b.Status.Phase != cairnv1.RestorePhaseReadyToStart {
				t.Errorf("b: phase %s, want ReadyToStart (the free slot)", b.Status.Phase)
			}
			if cc := unittest.GetRestore(t, c, "cairn-system", "c"); cc.Status.Phase != cairnv1.RestorePhaseQueued {
				t.Errorf("c: phase %s, want Queued (behind b)", cc.Status.Phase)
			}

			fail.Store(false)
			if _, err := r.Reconcile(context.Background(), queueRequest); err != nil {
				t.Fatal(err)
			}
			queuePassAfterQuiet(t, r, clk)
			a, cc := unittest.GetRestore(t, c, "cairn-system", "a"), unittest.GetRestore(t, c, "cairn-system", "c")
			if a.Status.Phase != cairnv1.RestorePhaseQueued || a.Status.QueuePosition != 2 || cc.Status.QueuePosition != 1 {
				t.Errorf("next pass: a %s at %d, c at %d; want a Queued behind c", a.Status.Phase, a.Status.QueuePosition, cc.Status.QueuePosition)
			}
		})
	}
}

// TestQueueOneLineForBackupsAndRestores: backups and restores New at once join one line in
// creation order, positions 1..n across the kinds; each waits for the first running or queued
// entry of either kind that touches its namespaces, else for a slot of its own kind.
func TestQueueOneLineForBackupsAndRestores(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
	backup := func(name string, minutes int, phase cairnv1.BackupPhase, namespaces ...string) *cairnv1.Backup {
		return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "cairn-system", UID: types.UID("uid-backup-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(unittest.Epoch.Add(time.Duration(minutes) * time.Minute))},
			Spec: cairnv1.BackupSpec{IncludedNamespaces: namespaces}, Status: cairnv1.BackupStatus{Phase: phase, StorageLocation: "default"}}
	}
	into := func(rs *cairnv1.Restore, mapping map[string]cairnv1.NamespaceName) *cairnv1.Restore {
		rs.Spec.NamespaceMapping = mapping
		return rs
	}
	// The backup the admin restores read holds shop and db.
	read := backup("b", 0, cairnv1.BackupPhaseCompleted, "shop", "db")
	objects := []client.Object{unittest.DefaultLocation(t.TempDir()), read,
		backup("running-backup", 0, cairnv1.BackupPhaseInProgress, "shop"),
		unittest.Restore("cairn-system", "restore-shop", 1, ""), // shop, db: overlaps running-backup
		backup("backup-db", 2, "", "db"),                        // overlaps restore-shop, queued ahead
		into(unittest.Restore("cairn-system", "restore-copy", 3, ""), map[string]cairnv1.NamespaceName{"shop": "copy", "db": "copy-db"}), // starts
		into(unittest.Restore("cairn-system", "restore-other", 4, ""), map[string]cairnv1.NamespaceName{"shop": "other", "db": "other-db"}),
		backup("backup-copy", 5, "", "copy"),
		backup("backup-free", 6, "", "free"),
		backup("backup-late", 7, "", "late"),
	}
	c := unittest.NewClient(t, interceptor.Funcs{}, objects...)
	r := newRestoreQueue(c, clk, 1)
	r.ConcurrentBackups = 2
	if _, err := r.Reconcile(context.Background(), queueRequest); err != nil {
		t.Fatal(err)
	}
	queuePassAfterQuiet(t, r, clk)

	type state struct {
		phase    string
		position int32
		message  string
	}
	got := map[string]state{}
	var backups cairnv1.BackupList
	var restores cairnv1.RestoreList
	if err := c.List(context.Background(), &backups); err != nil {
		t.Fatal(err)
	}
	if err := c.List(context.Background(), &restores); err != nil {
		t.Fatal(err)
	}
	for _, b := range backups.Items {
		s := state{phase: string(b.Status.Phase), position: b.Status.QueuePosition}
		if q := meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionQueued); q != nil && q.Status == metav1.ConditionTrue {
			s.message = q.Message
		}
		got["backup "+b.Name] = s
	}
	for _, rs := range restores.Items {
		s := state{phase: string(rs.Status.Phase), position: rs.Status.QueuePosition}
		if q := restoreQueuedCondition(&rs); q != nil && q.Status == metav1.ConditionTrue {
			s.message = q.Message
		}
		got["restore "+rs.Name] = s
	}
	want := map[string]state{
		"backup b":              {phase: "Completed"},
		"backup running-backup": {phase: "InProgress"},
		"restore restore-shop":  {"Queued", 1, "namespace shop overlaps running backup running-backup"},
		"backup backup-db":      {"Queued", 2, "namespace db overlaps restore restore-shop queued ahead"},
		"restore restore-copy":  {phase: "ReadyToStart"},
		"restore restore-other": {"Queued", 3, "restore concurrency limit 1 reached"},
		"backup backup-copy":    {"Queued", 4, "namespace copy overlaps running restore restore-copy"},
		"backup backup-free":    {phase: "ReadyToStart"},
		"backup backup-late":    {"Queued", 5, "concurrency limit 2 reached"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after the passes:\n got %+v\nwant %+v", got, want)
	}
}
