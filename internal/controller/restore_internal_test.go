package controller

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/controller/unittest"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

// drainEvents is unittest.DrainEvents, by the name the readiness tests know it.
var drainEvents = unittest.DrainEvents

func TestRestoreEnding(t *testing.T) {
	earlier := metav1.NewTime(unittest.Epoch)
	now := metav1.NewTime(unittest.Epoch.Add(time.Minute))
	const gen = 3
	filesUnknown := metav1.Condition{Type: cairnv1.RestoreConditionFilesStored, Status: metav1.ConditionUnknown, Reason: cairnv1.ReasonFilesStored,
		Message: "the restore's log, results and resource list go to storage location default", ObservedGeneration: 1, LastTransitionTime: earlier}
	filesWritten := metav1.Condition{Type: cairnv1.RestoreConditionFilesStored, Status: metav1.ConditionTrue, Reason: cairnv1.ReasonFilesStored,
		Message: "the restore's log, results and resource list were written to storage location default", ObservedGeneration: gen, LastTransitionTime: now}
	noWritable := metav1.Condition{Type: cairnv1.RestoreConditionFilesStored, Status: metav1.ConditionFalse, Reason: cairnv1.ReasonNoWritableLocation,
		Message:            "storage location ro is ReadOnly and no default ReadWrite location is Available: the restore's log, results and resource list are not stored",
		ObservedGeneration: 1, LastTransitionTime: earlier}
	namespacesReady := metav1.Condition{Type: cairnv1.RestoreConditionNamespacesReady, Status: metav1.ConditionTrue, Reason: cairnv1.ReasonNamespacesReady,
		Message: "every target namespace is ready", ObservedGeneration: 1, LastTransitionTime: earlier}
	inProgress := func(conditions ...metav1.Condition) cairnv1.RestoreStatus {
		return cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseInProgress, BackupName: "b", StorageLocation: "default", StartTimestamp: &earlier,
			Progress: cairnv1.NewRestoreProgress(2, 7), Conditions: conditions}
	}
	tests := []struct {
		name   string
		before cairnv1.RestoreStatus
		res    restore.Result
		want   cairnv1.RestoreStatus
	}{
		{name: "a fatal error: Failed with the reason, errors counted or not",
			before: inProgress(filesUnknown, namespacesReady),
			res:    restore.Result{Ending: restore.Failed, FailureReason: "archive checksum mismatch: nothing was restored", Errors: 1, Warnings: 2},
			want: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseFailed, FailureReason: "archive checksum mismatch: nothing was restored", CompletionTimestamp: &now,
				BackupName: "b", StorageLocation: "default", StartTimestamp: &earlier, Progress: cairnv1.NewRestoreProgress(0, 0), Errors: 1, Warnings: 2,
				Conditions: []metav1.Condition{filesWritten, namespacesReady}}},
		{name: "items failed: FinalizingPartiallyFailed",
			before: inProgress(filesUnknown),
			res:    restore.Result{Ending: restore.Finished, ItemsRestored: 7, TotalItems: 7, Errors: 2, Warnings: 1},
			want: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseFinalizingPartiallyFailed, BackupName: "b", StorageLocation: "default", StartTimestamp: &earlier,
				Progress: cairnv1.NewRestoreProgress(7, 7), Errors: 2, Warnings: 1, Conditions: []metav1.Condition{filesWritten}}},
		{name: "no errors, warnings only: Finalizing",
			before: inProgress(filesUnknown),
			res:    restore.Result{Ending: restore.Finished, ItemsRestored: 7, TotalItems: 7, Warnings: 4},
			want: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseFinalizing, BackupName: "b", StorageLocation: "default", StartTimestamp: &earlier,
				Progress: cairnv1.NewRestoreProgress(7, 7), Warnings: 4, Conditions: []metav1.Condition{filesWritten}}},
		{name: "the files could not be stored: FilesStored False with the error",
			before: inProgress(filesUnknown),
			res:    restore.Result{Ending: restore.Finished, ItemsRestored: 1, TotalItems: 1, FilesError: errors.New("storing restores/shop/r/r-logs.gz: disk full")},
			want: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseFinalizing, BackupName: "b", StorageLocation: "default", StartTimestamp: &earlier,
				Progress: cairnv1.NewRestoreProgress(1, 1), Conditions: []metav1.Condition{{Type: cairnv1.RestoreConditionFilesStored, Status: metav1.ConditionFalse,
					Reason: cairnv1.ReasonStorageUnavailable, Message: "storing the restore's files failed: storing restores/shop/r/r-logs.gz: disk full",
					ObservedGeneration: gen, LastTransitionTime: now}}}},
		{name: "no writable location: FilesStored stays False as it was",
			before: inProgress(noWritable),
			res:    restore.Result{Ending: restore.Finished, ItemsRestored: 1, TotalItems: 1},
			want: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseFinalizing, BackupName: "b", StorageLocation: "default", StartTimestamp: &earlier,
				Progress: cairnv1.NewRestoreProgress(1, 1), Conditions: []metav1.Condition{noWritable}}},
		{name: "no FilesStored condition: none added",
			before: inProgress(),
			res:    restore.Result{Ending: restore.Finished},
			want: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseFinalizing, BackupName: "b", StorageLocation: "default", StartTimestamp: &earlier,
				Progress: cairnv1.NewRestoreProgress(0, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := *tt.before.DeepCopy()
			restoreEnding(&tt.res, gen, now)(&s)
			if !equality.Semantic.DeepEqual(s, tt.want) {
				t.Errorf("status after the ending:\n got %+v\nwant %+v", s, tt.want)
			}
		})
	}
}

func TestFinalizedRestorePhase(t *testing.T) {
	want := map[cairnv1.RestorePhase]cairnv1.RestorePhase{
		cairnv1.RestorePhaseFinalizing:                cairnv1.RestorePhaseCompleted,
		cairnv1.RestorePhaseFinalizingPartiallyFailed: cairnv1.RestorePhasePartiallyFailed,
		cairnv1.RestorePhaseFinalizingCancelled:       cairnv1.RestorePhaseFailed,
	}
	for _, p := range append([]cairnv1.RestorePhase{""}, cairnv1.AllRestorePhases...) {
		next, ok := finalizedRestorePhase(p)
		if w, finalizing := want[p]; next != w || ok != finalizing {
			t.Errorf("finalizedRestorePhase(%q) = %q, %v; want %q, %v", p, next, ok, w, finalizing)
		}
		if ok && !next.IsTerminal() {
			t.Errorf("finalizedRestorePhase(%q) = %q, which is not terminal", p, next)
		}
	}
}

func newRestoreReconciler(c client.Client, apiReader client.Reader, clk *clocktesting.FakeClock) *RestoreReconciler {
	return &RestoreReconciler{Client: c, APIReader: apiReader, Namespace: "cairn-system", Stores: stores.Stores{Client: c, Namespace: "cairn-system"},
		Clock: clk, Recorder: events.NewFakeRecorder(100), Gate: openGate{}, PhaseTimeout: time.Hour, Runner: &restore.Runner{}}
}

// restoreRequest is the request for restore team-a/r, the one restore of most tests here.
var restoreRequest = ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "r"}}

// TestRestoreOrphaned: an InProgress restore that no run of this process holds was running when
// the operator stopped: Failed. One this process runs is left alone, one whose ending could not
// be written gets that ending, and a stale cache is checked against the API server.
func TestRestoreOrphaned(t *testing.T) {
	for _, tt := range []struct {
		name string
		// prepare sets up the reconciler's memory for rs.
		prepare         func(r *RestoreReconciler, rs *cairnv1.Restore)
		apiServerPhase  cairnv1.RestorePhase // the phase the API server has, when the cache is stale
		wantPhase       cairnv1.RestorePhase
		wantReason      string
		wantCompletedAt bool
	}{
		{name: "not running here: the operator restarted", wantPhase: cairnv1.RestorePhaseFailed, wantReason: lifecycle.FailureReasonRestoreRestarted, wantCompletedAt: true},
		{name: "running here", wantPhase: cairnv1.RestorePhaseInProgress, prepare: func(r *RestoreReconciler, rs *cairnv1.Restore) {
			r.runs.Running.Set(rs.UID, func(error) {})
		}},
		{name: "its ending was not written yet", wantPhase: cairnv1.RestorePhaseFinalizingPartiallyFailed, prepare: func(r *RestoreReconciler, rs *cairnv1.Restore) {
			r.runs.Unwritten.Set(rs.UID, func(s *cairnv1.RestoreStatus) { s.Phase, s.Errors = cairnv1.RestorePhaseFinalizingPartiallyFailed, 2 })
		}},
		{name: "the cache is stale: the API server has it Finalizing", apiServerPhase: cairnv1.RestorePhaseFinalizing, wantPhase: cairnv1.RestorePhaseInProgress},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
			rs := unittest.Restore("team-a", "r", 0, cairnv1.RestorePhaseInProgress)
			c := unittest.NewClient(t, interceptor.Funcs{}, rs)
			var apiReader client.Reader = c
			if tt.apiServerPhase != "" {
				fresh := rs.DeepCopy()
				fresh.Status.Phase = tt.apiServerPhase
				apiReader = unittest.NewClient(t, interceptor.Funcs{}, fresh)
			}
			r := newRestoreReconciler(c, apiReader, clk)
			if tt.prepare != nil {
				tt.prepare(r, rs)
			}
			if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
				t.Fatal(err)
			}
			got := unittest.GetRestore(t, c, "team-a", "r")
			if got.Status.Phase != tt.wantPhase || got.Status.FailureReason != tt.wantReason {
				t.Errorf("phase %s, failureReason %q; want %s, %q", got.Status.Phase, got.Status.FailureReason, tt.wantPhase, tt.wantReason)
			}
			if completed := got.Status.CompletionTimestamp != nil && got.Status.CompletionTimestamp.Time.Equal(clk.Now()); completed != tt.wantCompletedAt {
				t.Errorf("completionTimestamp %v, want set to now: %v", got.Status.CompletionTimestamp, tt.wantCompletedAt)
			}
			if got.Status.Phase != cairnv1.RestorePhaseInProgress && (got.Status.PhaseTransitionTime == nil || !got.Status.PhaseTransitionTime.Time.Equal(clk.Now())) {
				t.Errorf("phaseTransitionTime %v, want %v", got.Status.PhaseTransitionTime, clk.Now())
			}
			if r.runs.Unwritten.Len() != 0 {
				t.Error("the unwritten ending is still kept after it was written")
			}
		})
	}
	t.Run("gone", func(t *testing.T) {
		c := unittest.NewClient(t, interceptor.Funcs{})
		r := newRestoreReconciler(c, c, clocktesting.NewFakeClock(unittest.Epoch))
		if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
			t.Errorf("Reconcile of a restore that is gone = %v", err)
		}
	})
}

// TestRestoreRunEndingSurvivesATransientAPIError: the write that ends a run meets an API server
// that is away; it is kept, and the next reconcile writes it instead of "the operator restarted".
func TestRestoreRunEndingSurvivesATransientAPIError(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
	failures := 1
	c := unittest.NewClient(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if failures > 0 {
				failures--
				return unittest.APIUnavailable()
			}
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	}, unittest.Restore("team-a", "r", 0, cairnv1.RestorePhaseInProgress))
	r := newRestoreReconciler(c, c, clk)
	current := unittest.GetRestore(t, c, "team-a", "r")
	ending := restoreEnding(&restore.Result{Ending: restore.Finished, ItemsRestored: 3, TotalItems: 3}, current.Generation, metav1.NewTime(clk.Now()))
	if err := lifecycle.Restores.EndRun(context.Background(), r.Client, r.APIReader, r.Clock, &r.runs, current, ending, nil); err == nil {
		t.Fatal("endRun succeeded through a failing API server")
	}
	if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
		t.Fatal(err)
	}
	got := unittest.GetRestore(t, c, "team-a", "r")
	if got.Status.Phase != cairnv1.RestorePhaseFinalizing || got.Status.FailureReason != "" || got.Status.Progress == nil || got.Status.Progress.ItemsRestored != 3 {
		t.Errorf("phase %s, failureReason %q, progress %+v; want the run's ending, Finalizing with 3 items", got.Status.Phase, got.Status.FailureReason, got.Status.Progress)
	}
}

// TestRestoreRunEndingRetriesAConflict: a conflict on the ending write is retried on fresh data;
// a restore that left InProgress meanwhile is not written over.
func TestRestoreRunEndingRetriesAConflict(t *testing.T) {
	for _, tt := range []struct {
		name      string
		meanwhile cairnv1.RestorePhase // what another writer made of it
		want      cairnv1.RestorePhase
	}{
		{name: "still InProgress: the ending is written", meanwhile: cairnv1.RestorePhaseInProgress, want: cairnv1.RestorePhaseFinalizing},
		{name: "Failed meanwhile: left as it is", meanwhile: cairnv1.RestorePhaseFailed, want: cairnv1.RestorePhaseFailed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
			c := unittest.NewClient(t, interceptor.Funcs{}, unittest.Restore("team-a", "r", 0, cairnv1.RestorePhaseInProgress))
			stale := unittest.GetRestore(t, c, "team-a", "r")
			// Another write moves the resourceVersion on: the stale copy's patch conflicts.
			other := stale.DeepCopy()
			other.Status.Phase = tt.meanwhile
			other.Status.Warnings = 1
			if err := c.Status().Update(context.Background(), other); err != nil {
				t.Fatal(err)
			}
			r := newRestoreReconciler(c, c, clk)
			ending := restoreEnding(&restore.Result{Ending: restore.Finished}, stale.Generation, metav1.NewTime(clk.Now()))
			if err := lifecycle.Restores.EndRun(context.Background(), r.Client, r.APIReader, r.Clock, &r.runs, stale, ending, nil); err != nil {
				t.Fatalf("endRun = %v", err)
			}
			if got := unittest.GetRestore(t, c, "team-a", "r"); got.Status.Phase != tt.want {
				t.Errorf("phase %s, want %s", got.Status.Phase, tt.want)
			}
		})
	}
}

func TestFailInterruptedRestores(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
	// The phase each restore had before the step, by namespace/name.
	before := map[string]cairnv1.RestorePhase{"team-a/r-empty": "", "cairn-system/admin": cairnv1.RestorePhaseInProgress}
	for _, phase := range cairnv1.AllRestorePhases {
		before["team-a/r-"+strings.ToLower(string(phase))] = phase
	}
	var objects []client.Object
	for key, phase := range before {
		namespace, name, _ := strings.Cut(key, "/")
		objects = append(objects, unittest.Restore(namespace, name, 0, phase))
	}
	objects = append(objects, unittest.Restore("team-b", "vanished", 0, cairnv1.RestorePhaseInProgress))
	c := unittest.NewClient(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if obj.GetName() == "vanished" { // deleted between the list and the write
				return apierrors.NewNotFound(schema.GroupResource{Group: cairnv1.GroupVersion.Group, Resource: "restores"}, obj.GetName())
			}
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	}, objects...)
	step := lifecycle.EndInterruptedRuns(c, clk, lifecycle.Restores)
	if step.Name != "fail-interrupted-restores" {
		t.Errorf("step name %q", step.Name)
	}
	if err := step.Run(context.Background()); err != nil {
		t.Fatalf("the step = %v", err)
	}
	for key, phase := range before {
		namespace, name, _ := strings.Cut(key, "/")
		rs := unittest.GetRestore(t, c, namespace, name)
		switch {
		case phase == cairnv1.RestorePhaseInProgress:
			if rs.Status.Phase != cairnv1.RestorePhaseFailed || rs.Status.FailureReason != lifecycle.FailureReasonRestoreRestarted ||
				rs.Status.CompletionTimestamp == nil || !rs.Status.CompletionTimestamp.Time.Equal(clk.Now()) {
				t.Errorf("%s: phase %s, failureReason %q, completion %v; want Failed, %q, now", key,
					rs.Status.Phase, rs.Status.FailureReason, rs.Status.CompletionTimestamp, lifecycle.FailureReasonRestoreRestarted)
			}
		case rs.Status.Phase != phase || rs.Status.FailureReason != "":
			t.Errorf("%s: was %q, now %s (%q); only InProgress restores fail", key, phase, rs.Status.Phase, rs.Status.FailureReason)
		}
	}

	broken := unittest.NewClient(t, interceptor.Funcs{
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return unittest.APIUnavailable()
		},
	}, unittest.Restore("team-a", "r", 0, cairnv1.RestorePhaseInProgress))
	if err := lifecycle.EndInterruptedRuns(broken, clk, lifecycle.Restores).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "team-a/r") {
		t.Errorf("the step through a failing API server = %v, want an error naming team-a/r", err)
	}
}

func newRestoreFinalizer(c client.Client, clk *clocktesting.FakeClock) *RestoreFinalizerReconciler {
	return &RestoreFinalizerReconciler{Client: c, Namespace: "cairn-system", Stores: stores.Stores{Client: c, Namespace: "cairn-system"},
		Clock: clk, Recorder: events.NewFakeRecorder(100), Gate: openGate{}}
}

func TestRestoreFinalizerEndsFinalizingRestores(t *testing.T) {
	for _, tt := range []struct {
		phase      cairnv1.RestorePhase
		want       cairnv1.RestorePhase
		wantReason string
	}{
		{phase: cairnv1.RestorePhaseFinalizing, want: cairnv1.RestorePhaseCompleted},
		{phase: cairnv1.RestorePhaseFinalizingPartiallyFailed, want: cairnv1.RestorePhasePartiallyFailed},
		{phase: cairnv1.RestorePhaseFinalizingCancelled, want: cairnv1.RestorePhaseFailed, wantReason: cairnv1.FailureReasonRestoreCancelled},
	} {
		t.Run(string(tt.phase), func(t *testing.T) {
			clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
			rs := unittest.Restore("team-a", "r", 0, tt.phase)
			rs.Status.Progress, rs.Status.Warnings, rs.Status.Errors = cairnv1.NewRestoreProgress(5, 6), 1, 2
			c := unittest.NewClient(t, interceptor.Funcs{}, rs)
			r := newRestoreFinalizer(c, clk)
			if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
				t.Fatal(err)
			}
			got := unittest.GetRestore(t, c, "team-a", "r")
			if got.Status.Phase != tt.want || got.Status.FailureReason != tt.wantReason {
				t.Errorf("phase %s, failureReason %q; want %s, %q", got.Status.Phase, got.Status.FailureReason, tt.want, tt.wantReason)
			}
			if got.Status.CompletionTimestamp == nil || !got.Status.CompletionTimestamp.Time.Equal(clk.Now()) ||
				got.Status.PhaseTransitionTime == nil || !got.Status.PhaseTransitionTime.Time.Equal(clk.Now()) {
				t.Errorf("completionTimestamp %v, phaseTransitionTime %v; want both %v", got.Status.CompletionTimestamp, got.Status.PhaseTransitionTime, clk.Now())
			}
			cancelled := meta.FindStatusCondition(got.Status.Conditions, cairnv1.BackupConditionCancelled)
			if wantCancelled := tt.wantReason != ""; wantCancelled != (cancelled != nil && cancelled.Status == metav1.ConditionTrue && cancelled.Reason == cairnv1.ReasonCancelledByUser) {
				t.Errorf("Cancelled condition %+v, want one: %v", cancelled, wantCancelled)
			}
			// The phase change's event is PhaseWatcher's: none from the finalizer itself.
			if evs := unittest.DrainEvents(r.Recorder); len(evs) != 0 {
				t.Errorf("events %q, want none", evs)
			}
		})
	}
	t.Run("other phases are not its own", func(t *testing.T) {
		for _, phase := range cairnv1.AllRestorePhases {
			if _, ok := finalizedRestorePhase(phase); ok {
				continue
			}
			var writes unittest.WriteCounter
			c := unittest.NewClient(t, writes.Funcs(interceptor.Funcs{}), unittest.Restore("team-a", "r", 0, phase))
			if _, err := newRestoreFinalizer(c, clocktesting.NewFakeClock(unittest.Epoch)).Reconcile(context.Background(), restoreRequest); err != nil {
				t.Fatal(err)
			}
			if n := writes.N.Load(); n != 0 {
				t.Errorf("%s: %d writes, want none", phase, n)
			}
		}
	})
}

// restoreFilesFixture is a filesystem location (prefix cluster-a) whose store holds the files of
// restore team-a/r and, around them, objects that are not its own.
type restoreFilesFixture struct {
	root   string
	bsl    *cairnv1.BackupStorageLocation
	mine   []string
	others []string
}

func newRestoreFilesFixture(t *testing.T) restoreFilesFixture {
	t.Helper()
	f := restoreFilesFixture{root: t.TempDir()}
	f.bsl = unittest.DefaultLocation(f.root)
	f.bsl.Spec.ObjectStorage = &cairnv1.ObjectStorage{Prefix: "cluster-a"}
	layout := storage.Layout{Prefix: "cluster-a"}
	restoreKeys := func(k storage.RestoreKeys) []string {
		return []string{k.Logs, k.Results, k.ResourceList, k.ItemOperations}
	}
	f.mine = restoreKeys(layout.Restore("team-a", "r"))
	f.others = append(f.others, restoreKeys(layout.Restore("team-a", "r2"))...)
	f.others = append(f.others, restoreKeys(layout.Restore("team-b", "r"))...)
	f.others = append(f.others, restoreKeys(storage.Layout{Prefix: "cluster-b"}.Restore("team-a", "r"))...)
	f.others = append(f.others, restoreKeys(storage.Layout{}.Restore("team-a", "r"))...)
	backup := layout.Backup("team-a", "r")
	f.others = append(f.others, backup.Archive, backup.Logs, backup.Metadata)
	fs, err := storage.NewFilesystem(f.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range append(append([]string{}, f.mine...), f.others...) {
		if err := fs.Put(context.Background(), key, strings.NewReader("data of "+key)); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// keys lists every object in the fixture's store.
func (f restoreFilesFixture) keys(t *testing.T) []string {
	t.Helper()
	fs, err := storage.NewFilesystem(f.root)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := fs.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// deletedRestore is a terminal restore team-a/r being deleted, its files in location loc; it
// has a second finalizer so that it stays to be looked at.
func deletedRestore(phase cairnv1.RestorePhase, loc string) *cairnv1.Restore {
	rs := unittest.Restore("team-a", "r", 0, phase)
	rs.DeletionTimestamp = &metav1.Time{Time: unittest.Epoch.Add(time.Hour)}
	rs.Finalizers = []string{cairnv1.RestoreDataFinalizer, "example.com/keep"}
	rs.Status.StorageLocation = loc
	return rs
}

func sorted(keys []string) []string {
	out := append([]string{}, keys...)
	sort.Strings(out)
	return out
}

func TestRestoreFinalizerRemovesOnlyItsFiles(t *testing.T) {
	for _, phase := range []cairnv1.RestorePhase{cairnv1.RestorePhaseCompleted, cairnv1.RestorePhasePartiallyFailed, cairnv1.RestorePhaseFailed, cairnv1.RestorePhaseFailedValidation} {
		t.Run(string(phase), func(t *testing.T) {
			f := newRestoreFilesFixture(t)
			c := unittest.NewClient(t, interceptor.Funcs{}, f.bsl, deletedRestore(phase, "default"))
			r := newRestoreFinalizer(c, clocktesting.NewFakeClock(unittest.Epoch.Add(2*time.Hour)))
			if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
				t.Fatal(err)
			}
			if got, want := f.keys(t), sorted(f.others); !reflect.DeepEqual(got, want) {
				t.Errorf("objects left:\n%s\nwant every object but the restore's own:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			got := unittest.GetRestore(t, c, "team-a", "r")
			if !reflect.DeepEqual(got.Finalizers, []string{"example.com/keep"}) {
				t.Errorf("finalizers %q, want only the restore-data finalizer removed", got.Finalizers)
			}
			if evs := unittest.DrainEvents(r.Recorder); len(evs) != 1 || evs[0] != "Normal FilesRemoved Removed 4 files of the restore from storage location default" {
				t.Errorf("events %q", evs)
			}
		})
	}
}

// failingListStore fails every List, as a storage service that is away does.
type failingListStore struct{ storage.ObjectStore }

func (failingListStore) List(context.Context, string) ([]string, error) {
	return nil, errors.New("connection refused")
}

func TestRestoreFinalizerNeverHoldsARestoreForItsFiles(t *testing.T) {
	for _, tt := range []struct {
		name string
		// change alters the fixture's location; wrap its store.
		change func(bsl *cairnv1.BackupStorageLocation)
		wrap   func(*cairnv1.BackupStorageLocation, storage.ObjectStore) storage.ObjectStore
		loc    string
		phase  cairnv1.RestorePhase
		// wantFinalizer: whether the restore-data finalizer stays; wantErr: whether the reconcile fails.
		wantFinalizer, wantErr bool
		wantEvent              string
		wantFilesLeft          bool
	}{
		{name: "the location is gone", loc: "gone", phase: cairnv1.RestorePhaseCompleted, wantFilesLeft: true,
			wantEvent: "Warning FilesLeft Storage location gone is gone: the restore's files, if any, were left there"},
		{name: "the location is ReadOnly now", loc: "default", phase: cairnv1.RestorePhaseCompleted, wantFilesLeft: true,
			change:    func(bsl *cairnv1.BackupStorageLocation) { bsl.Spec.AccessMode = cairnv1.AccessModeReadOnly },
			wantEvent: "Warning FilesLeft The restore's files were left in storage location default: "},
		{name: "the location's configuration is broken", loc: "default", phase: cairnv1.RestorePhaseCompleted, wantFilesLeft: true,
			change:    func(bsl *cairnv1.BackupStorageLocation) { bsl.Spec.Config[cairnv1.ConfigKeyPath] = "relative/path" },
			wantEvent: "Warning FilesLeft The restore's files were left in storage location default: "},
		{name: "no location held its files", loc: "", phase: cairnv1.RestorePhaseFailed, wantFilesLeft: true},
		{name: "the storage is away: retried, the finalizer kept", loc: "default", phase: cairnv1.RestorePhaseCompleted, wantFilesLeft: true,
			wrap: func(_ *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				return failingListStore{s}
			},
			wantFinalizer: true, wantErr: true},
		{name: "not terminal yet: not its own", loc: "default", phase: cairnv1.RestorePhaseInProgress, wantFilesLeft: true, wantFinalizer: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newRestoreFilesFixture(t)
			if tt.change != nil {
				tt.change(f.bsl)
			}
			c := unittest.NewClient(t, interceptor.Funcs{}, f.bsl, deletedRestore(tt.phase, tt.loc))
			r := newRestoreFinalizer(c, clocktesting.NewFakeClock(unittest.Epoch.Add(2*time.Hour)))
			r.Stores.Wrap = tt.wrap
			_, err := r.Reconcile(context.Background(), restoreRequest)
			if (err != nil) != tt.wantErr {
				t.Errorf("Reconcile = %v, want an error: %v", err, tt.wantErr)
			}
			got := unittest.GetRestore(t, c, "team-a", "r")
			if has := controllerutil.ContainsFinalizer(got, cairnv1.RestoreDataFinalizer); has != tt.wantFinalizer {
				t.Errorf("finalizers %q: restore-data finalizer kept = %v, want %v", got.Finalizers, has, tt.wantFinalizer)
			}
			if !controllerutil.ContainsFinalizer(got, "example.com/keep") {
				t.Errorf("finalizers %q: another's finalizer was removed", got.Finalizers)
			}
			if left := sorted(f.keys(t)); tt.wantFilesLeft && !reflect.DeepEqual(left, sorted(append(append([]string{}, f.mine...), f.others...))) {
				t.Errorf("objects left %q, want all of them", left)
			}
			evs := unittest.DrainEvents(r.Recorder)
			switch {
			case tt.wantEvent == "" && len(evs) != 0:
				t.Errorf("events %q, want none", evs)
			case tt.wantEvent != "" && (len(evs) != 1 || !strings.HasPrefix(evs[0], tt.wantEvent)):
				t.Errorf("events %q, want %q", evs, tt.wantEvent)
			}
		})
	}
}

// readyRestore is restore team-a/r of backup b, dequeued at unittest.Epoch.
func readyRestore() *cairnv1.Restore {
	rs := unittest.Restore("team-a", "r", 0, cairnv1.RestorePhaseReadyToStart)
	entered := metav1.NewTime(unittest.Epoch)
	rs.Status.PhaseTransitionTime = &entered
	rs.Finalizers = []string{cairnv1.RestoreDataFinalizer}
	return rs
}

func TestRestoreStartEndsACancelledRestore(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Minute))
	rs := readyRestore()
	rs.Spec.Cancel = true
	c := unittest.NewClient(t, interceptor.Funcs{}, unittest.DefaultLocation(t.TempDir()), unittest.CompletedBackup("team-a", "b"), rs)
	r := newRestoreReconciler(c, c, clk)
	if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
		t.Fatal(err)
	}
	got := unittest.GetRestore(t, c, "team-a", "r")
	if got.Status.Phase != cairnv1.RestorePhaseFailed || got.Status.FailureReason != cairnv1.FailureReasonRestoreCancelled || got.Status.StartTimestamp != nil {
		t.Errorf("phase %s, failureReason %q, started %v; want Failed, cancelled, never started", got.Status.Phase, got.Status.FailureReason, got.Status.StartTimestamp)
	}
}

func TestRestoreStartWithoutACommitMarker(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Minute))
	c := unittest.NewClient(t, interceptor.Funcs{}, unittest.DefaultLocation(t.TempDir()), unittest.CompletedBackup("team-a", "b"), readyRestore())
	r := newRestoreReconciler(c, c, clk)
	if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
		t.Fatal(err)
	}
	got := unittest.GetRestore(t, c, "team-a", "r")
	if got.Status.Phase != cairnv1.RestorePhaseFailedValidation || len(got.Status.ValidationErrors) != 1 ||
		!strings.Contains(got.Status.ValidationErrors[0], "backup b has no commit marker in storage location default") {
		t.Errorf("phase %s, validationErrors %q; want FailedValidation for the missing commit marker", got.Status.Phase, got.Status.ValidationErrors)
	}
	if got.Status.StartTimestamp != nil || got.Status.CompletionTimestamp == nil {
		t.Errorf("startTimestamp %v, completionTimestamp %v; want never started, completed now", got.Status.StartTimestamp, got.Status.CompletionTimestamp)
	}
}

func TestRestoreStartWaitsForStorageThenGivesUp(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Minute))
	bsl := unittest.DefaultLocation(t.TempDir())
	bsl.Status.Phase = "" // never validated yet
	c := unittest.NewClient(t, interceptor.Funcs{}, bsl, unittest.CompletedBackup("team-a", "b"), readyRestore())
	r := newRestoreReconciler(c, c, clk)
	res, err := r.Reconcile(context.Background(), restoreRequest)
	if err != nil || res.RequeueAfter != lifecycle.StorageWaitRequeue {
		t.Fatalf("Reconcile = %+v, %v; want a requeue after %s", res, err, lifecycle.StorageWaitRequeue)
	}
	got := unittest.GetRestore(t, c, "team-a", "r")
	cond := meta.FindStatusCondition(got.Status.Conditions, cairnv1.RestoreConditionStorageReady)
	if got.Status.Phase != cairnv1.RestorePhaseReadyToStart || cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != cairnv1.ReasonStorageUnavailable {
		t.Fatalf("phase %s, StorageReady %+v; want ReadyToStart waiting, saying why", got.Status.Phase, cond)
	}

	clk.Step(time.Hour)
	if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
		t.Fatal(err)
	}
	got = unittest.GetRestore(t, c, "team-a", "r")
	if got.Status.Phase != cairnv1.RestorePhaseFailed || !strings.Contains(got.Status.FailureReason, "could not start within 1h0m0s") {
		t.Errorf("after the phase timeout: phase %s, failureReason %q; want Failed (the slot freed)", got.Status.Phase, got.Status.FailureReason)
	}
}

// TestRestoreStartTellsTenantsNothingOfTheLocation: a location whose configuration turns out
// broken when a team's restore opens it is named, not described (docs/storage.md, "What teams see").
func TestRestoreStartTellsTenantsNothingOfTheLocation(t *testing.T) {
	clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Minute))
	bsl := unittest.DefaultLocation(t.TempDir())
	bsl.Spec.Config[cairnv1.ConfigKeyPath] = "srv/secret-share/backups"
	c := unittest.NewClient(t, interceptor.Funcs{}, bsl, unittest.CompletedBackup("team-a", "b"), readyRestore())
	r := newRestoreReconciler(c, c, clk)
	if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
		t.Fatal(err)
	}
	got := unittest.GetRestore(t, c, "team-a", "r")
	if got.Status.Phase != cairnv1.RestorePhaseFailedValidation || len(got.Status.ValidationErrors) != 1 {
		t.Fatalf("phase %s, validationErrors %q; want FailedValidation", got.Status.Phase, got.Status.ValidationErrors)
	}
	if msg := got.Status.ValidationErrors[0]; strings.Contains(msg, "secret-share") || !strings.Contains(msg, "storage location default") {
		t.Errorf("validationErrors %q: want the location named, its path not", msg)
	}
}
