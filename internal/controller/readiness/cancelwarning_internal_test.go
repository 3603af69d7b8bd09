package readiness

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

func TestCancelIgnored(t *testing.T) {
	for _, phase := range cairnv1.AllBackupPhases {
		b := &cairnv1.Backup{Spec: cairnv1.BackupSpec{Cancel: true}, Status: cairnv1.BackupStatus{Phase: phase}}
		why, ignored := cancelIgnored(b)
		wantIgnored := phase.IsTerminal() || phase == cairnv1.BackupPhaseDeleting || phase == cairnv1.BackupPhaseDeletionFailed
		if ignored != wantIgnored {
			t.Errorf("%s: ignored = %v, want %v", phase, ignored, wantIgnored)
		}
		if phase.IsTerminal() && !strings.Contains(why, "already ended in phase "+string(phase)) {
			t.Errorf("%s: message %q does not name the phase", phase, why)
		}
		b.Spec.Cancel = false
		if _, ignored := cancelIgnored(b); ignored {
			t.Errorf("%s: a backup that is not cancelled is reported", phase)
		}
	}
}

// TestCancelWarningReconciler runs the one cancel-warning reconciler with each kind's adapter:
// a cancel of an ended object is answered with one Warning event, a cancel of one still under
// way with none.
func TestCancelWarningReconciler(t *testing.T) {
	ended := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "ended"},
		Spec: cairnv1.BackupSpec{Cancel: true}, Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted}}
	running := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "running"},
		Spec: cairnv1.BackupSpec{Cancel: true}, Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseInProgress}}
	restored := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "ended"},
		Spec: cairnv1.RestoreSpec{Cancel: true}, Status: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseCompleted}}
	restoring := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "running"},
		Spec: cairnv1.RestoreSpec{Cancel: true}, Status: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseInProgress}}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(ended, running, restored, restoring).Build()
	recorder := events.NewFakeRecorder(10)
	backups, restores := NewCancelWarningReconcilers(c, recorder)
	if backups.Name != "cancelwarning" || restores.Name != "restorecancelwarning" {
		t.Errorf("names %q, %q; want cancelwarning, restorecancelwarning", backups.Name, restores.Name)
	}
	tests := []struct {
		name      string
		r         reconcile.Reconciler
		object    string
		wantEvent string
	}{
		{name: "ended backup", r: backups, object: "ended",
			wantEvent: "Warning CancelIgnored The backup had already ended in phase Completed; the cancel changes nothing. Delete the backup to remove its data."},
		{name: "running backup", r: backups, object: "running"},
		{name: "ended restore", r: restores, object: "ended",
			wantEvent: "Warning CancelIgnored The restore had already ended in phase Completed; the cancel changes nothing. The objects it restored stay; delete them yourself if they must go."},
		{name: "running restore", r: restores, object: "running"},
		{name: "gone", r: restores, object: "gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := tt.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team", Name: tt.object}})
			if err != nil || !res.IsZero() {
				t.Fatalf("Reconcile = %+v, %v; want nothing", res, err)
			}
			var got string
			select {
			case got = <-recorder.Events:
			default:
			}
			if got != tt.wantEvent {
				t.Errorf("event %q, want %q", got, tt.wantEvent)
			}
		})
	}
}
