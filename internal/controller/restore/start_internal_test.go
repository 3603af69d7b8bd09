package restore

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/unittest"
)

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
