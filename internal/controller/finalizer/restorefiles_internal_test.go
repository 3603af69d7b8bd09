package finalizer

import (
	"context"
	"errors"
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

// TestRestoreFinalizerWaitsForACancelledRunsFiles: a cancelled restore is FinalizingCancelled
// before its run stores its files (a cancel never waits on storage, issue 41); the finalizer
// leaves it there while they are being stored, then ends it Failed saying whether they were.
func TestRestoreFinalizerWaitsForACancelledRunsFiles(t *testing.T) {
	pending := metav1.Condition{Type: cairnv1.RestoreConditionFilesStored, Status: metav1.ConditionUnknown, Reason: cairnv1.ReasonFilesStored,
		Message: "the restore's log, results and resource list go to storage location default"}
	for _, tt := range []struct {
		name          string
		stored        bool // the run ended storing them (else: the manager restarted meanwhile)
		filesErr      error
		wantStatus    metav1.ConditionStatus
		wantInMessage string
	}{
		{name: "stored", stored: true, wantStatus: metav1.ConditionTrue, wantInMessage: "were written to storage location default"},
		{name: "failed", stored: true, filesErr: errors.New("disk full"), wantStatus: metav1.ConditionFalse, wantInMessage: "disk full"},
		{name: "manager restarted", wantStatus: metav1.ConditionFalse, wantInMessage: "the manager restarted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
			rs := unittest.Restore("team-a", "r", 0, cairnv1.RestorePhaseFinalizingCancelled)
			rs.Spec.Cancel = true
			meta.SetStatusCondition(&rs.Status.Conditions, pending)
			var writes unittest.WriteCounter
			c := unittest.NewClient(t, writes.Funcs(interceptor.Funcs{}), rs)
			r := newRestoreFinalizer(c, clk)
			r.Files = &lifecycle.FileStores{}

			if tt.stored {
				r.Files.Hold(rs.UID)
				res, err := r.Reconcile(context.Background(), restoreRequest)
				if err != nil {
					t.Fatal(err)
				}
				if got := unittest.GetRestore(t, c, "team-a", "r"); got.Status.Phase != cairnv1.RestorePhaseFinalizingCancelled || writes.N.Load() != 0 || res.RequeueAfter <= 0 {
					t.Fatalf("while its files are being stored: phase %s, %d writes, requeue after %s; want FinalizingCancelled, none, soon",
						got.Status.Phase, writes.N.Load(), res.RequeueAfter)
				}
				r.Files.Release(rs.UID, tt.filesErr)
			}
			if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
				t.Fatal(err)
			}
			got := unittest.GetRestore(t, c, "team-a", "r")
			if got.Status.Phase != cairnv1.RestorePhaseFailed || got.Status.FailureReason != cairnv1.FailureReasonRestoreCancelled {
				t.Fatalf("phase %s (%q), want Failed as cancelled", got.Status.Phase, got.Status.FailureReason)
			}
			files := meta.FindStatusCondition(got.Status.Conditions, cairnv1.RestoreConditionFilesStored)
			if files == nil || files.Status != tt.wantStatus || !strings.Contains(files.Message, tt.wantInMessage) {
				t.Errorf("FilesStored %+v, want %s saying %q", files, tt.wantStatus, tt.wantInMessage)
			}
			if _, known := r.Files.Ended(rs.UID); known {
				t.Error("what was known of the files is still held after it was recorded")
			}
		})
	}
}
