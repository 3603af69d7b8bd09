package restore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/controller/unittest"
	"github.com/cairn-backup/cairn/internal/restore"
)

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

// openGate lets a reconciler made by a test run at once.
type openGate struct{}

func (openGate) Wait(context.Context) error { return nil }

func newRestoreReconciler(c client.Client, apiReader client.Reader, clk *clocktesting.FakeClock) *Reconciler {
	return &Reconciler{Client: c, APIReader: apiReader, Namespace: "cairn-system", Stores: stores.Stores{Client: c, Namespace: "cairn-system"},
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
		prepare         func(r *Reconciler, rs *cairnv1.Restore)
		apiServerPhase  cairnv1.RestorePhase // the phase the API server has, when the cache is stale
		wantPhase       cairnv1.RestorePhase
		wantReason      string
		wantCompletedAt bool
	}{
		{name: "not running here: the operator restarted", wantPhase: cairnv1.RestorePhaseFailed, wantReason: lifecycle.FailureReasonRestoreRestarted, wantCompletedAt: true},
		{name: "running here", wantPhase: cairnv1.RestorePhaseInProgress, prepare: func(r *Reconciler, rs *cairnv1.Restore) {
			r.runs.Running.Set(rs.UID, func(error) {})
		}},
		{name: "its ending was not written yet", wantPhase: cairnv1.RestorePhaseFinalizingPartiallyFailed, prepare: func(r *Reconciler, rs *cairnv1.Restore) {
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
