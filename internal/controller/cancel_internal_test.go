package controller

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestCancellation(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC))
	tests := []struct {
		name                  string
		cancel                bool
		deleted               bool
		wantOK                bool
		wantReason, wantFault string
	}{
		{name: "neither", wantOK: false},
		{name: "spec.cancel", cancel: true, wantOK: true, wantReason: cairnv1.ReasonCancelledByUser, wantFault: cairnv1.FailureReasonCancelled},
		{name: "deleted", deleted: true, wantOK: true, wantReason: cairnv1.ReasonBackupDeleted, wantFault: failureReasonDeleted},
		{name: "cancelled, then deleted: the cancel came first", cancel: true, deleted: true, wantOK: true, wantReason: cairnv1.ReasonCancelledByUser, wantFault: cairnv1.FailureReasonCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &cairnv1.Backup{Spec: cairnv1.BackupSpec{Cancel: tt.cancel}}
			if tt.deleted {
				b.DeletionTimestamp = &now
			}
			reason, failureReason, ok := cancellation(b)
			if ok != tt.wantOK || reason != tt.wantReason || failureReason != tt.wantFault {
				t.Errorf("got (%q, %q, %v), want (%q, %q, %v)", reason, failureReason, ok, tt.wantReason, tt.wantFault, tt.wantOK)
			}
		})
	}
}

func TestCancelRequester(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 22, 3, 4, 5, 0, time.UTC))
	tests := []struct {
		name string
		b    cairnv1.Backup
		want string
	}{
		{
			name: "the manager that set spec.cancel",
			b: cairnv1.Backup{Spec: cairnv1.BackupSpec{Cancel: true}, ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl-client-side-apply", Time: &at, FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:includedNamespaces":{}}}`)},
				{Manager: "kubectl-patch", Time: &at, FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:cancel":{}}}`)},
			}}},
			want: `field manager "kubectl-patch" at 2026-11-22T03:04:05Z`,
		},
		{
			name: "no record of the field",
			b:    cairnv1.Backup{Spec: cairnv1.BackupSpec{Cancel: true}},
			want: "spec.cancel (the field manager is not recorded)",
		},
		{
			name: "a deletion",
			b:    cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &at}},
			want: "deletion of the Backup at 2026-11-22T03:04:05Z",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cancelRequester(&tt.b); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAfterInterruptedRun(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name       string
		b          cairnv1.Backup
		want       cairnv1.BackupPhase
		wantReason string
	}{
		{"running", cairnv1.Backup{}, cairnv1.BackupPhaseFinalizingFailed, FailureReasonRestarted},
		{"cancelled", cairnv1.Backup{Spec: cairnv1.BackupSpec{Cancel: true}}, cairnv1.BackupPhaseFinalizingCancelled, ""},
		{"deleted", cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, cairnv1.BackupPhaseFinalizingCancelled, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := afterInterruptedRun(&tt.b)
			if got != tt.want || reason != tt.wantReason {
				t.Errorf("got (%s, %q), want (%s, %q)", got, reason, tt.want, tt.wantReason)
			}
		})
	}
}

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

func TestCancelledStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC))
	queued := cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseQueued, QueuePosition: 3,
		Conditions: []metav1.Condition{{Type: cairnv1.BackupConditionQueued, Status: metav1.ConditionTrue, Reason: cairnv1.ReasonWaitingForConcurrencySlot}}}
	cancelledStatus(&queued, 2, cairnv1.ReasonCancelledByUser, cairnv1.FailureReasonCancelled, "m", now)
	if queued.Phase != cairnv1.BackupPhaseFailed || queued.QueuePosition != 0 || queued.FailureReason != cairnv1.FailureReasonCancelled || !queued.CompletionTimestamp.Equal(&now) {
		t.Errorf("queued backup: %+v", queued)
	}
	if len(queued.Conditions) != 2 || queued.Conditions[0].Status != metav1.ConditionFalse || queued.Conditions[1].Type != cairnv1.BackupConditionCancelled || queued.Conditions[1].Status != metav1.ConditionTrue {
		t.Errorf("queued backup conditions: %+v", queued.Conditions)
	}
	// A backup that left the queue long ago keeps its Queued condition as it was.
	ran := cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseFinalizingCancelled,
		Conditions: []metav1.Condition{{Type: cairnv1.BackupConditionQueued, Status: metav1.ConditionFalse, Reason: cairnv1.ReasonDequeued}}}
	cancelledStatus(&ran, 2, cairnv1.ReasonCancelledByUser, cairnv1.FailureReasonCancelled, "m", now)
	if ran.Conditions[0].Reason != cairnv1.ReasonDequeued {
		t.Errorf("the Queued condition of a started backup changed: %+v", ran.Conditions[0])
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
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(ended, running, restored, restoring).Build()
	recorder := events.NewFakeRecorder(10)
	backups, restores := newCancelWarningReconcilers(c, recorder)
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
