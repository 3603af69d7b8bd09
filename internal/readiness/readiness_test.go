package readiness

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// want is the expected shape of Conditions: Ready's status, which of Reconciling and Stalled
// are present, the reason, and a part of the message.
type want struct {
	ready       metav1.ConditionStatus
	reconciling bool
	stalled     bool
	reason      string
	message     string
}

func check(t *testing.T, got Conditions, w want, generation int64) {
	t.Helper()
	if got.Ready.Type != cairnv1.ConditionReady || got.Ready.Status != w.ready {
		t.Errorf("Ready = %s %s, want %s", got.Ready.Type, got.Ready.Status, w.ready)
	}
	if (got.Reconciling != nil) != w.reconciling {
		t.Errorf("Reconciling present = %v, want %v", got.Reconciling != nil, w.reconciling)
	}
	if (got.Stalled != nil) != w.stalled {
		t.Errorf("Stalled present = %v, want %v", got.Stalled != nil, w.stalled)
	}
	for _, c := range []*metav1.Condition{&got.Ready, got.Reconciling, got.Stalled} {
		if c == nil {
			continue
		}
		if c.Reason != w.reason || c.ObservedGeneration != generation || !strings.Contains(c.Message, w.message) {
			t.Errorf("%s: reason %q, observedGeneration %d, message %q; want %q, %d, containing %q",
				c.Type, c.Reason, c.ObservedGeneration, c.Message, w.reason, generation, w.message)
		}
		if c.Type != cairnv1.ConditionReady && c.Status != metav1.ConditionTrue {
			t.Errorf("%s is present with status %s: abnormal-true conditions are present only when True", c.Type, c.Status)
		}
	}
}

func TestBackup(t *testing.T) {
	tests := []struct {
		name   string
		status cairnv1.BackupStatus
		want   want
	}{
		{"just created", cairnv1.BackupStatus{}, want{metav1.ConditionFalse, true, false, "New", "validated"}},
		{"queued", cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseQueued, QueuePosition: 3}, want{metav1.ConditionFalse, true, false, "Queued", "queue"}},
		{"running", cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseInProgress}, want{metav1.ConditionFalse, true, false, "InProgress", "backing up"}},
		{"waiting for operations", cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed},
			want{metav1.ConditionFalse, true, false, "WaitingForPluginOperationsPartiallyFailed", "plugin operations"}},
		{"cancelled, data being removed", cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseFinalizingCancelled}, want{metav1.ConditionFalse, true, false, "FinalizingCancelled", "cancelled"}},
		{"completed", cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, Progress: cairnv1.NewBackupProgress(7, 7)},
			want{metav1.ConditionTrue, false, false, "Completed", "7 of 7 items"}},
		{"partially failed", cairnv1.BackupStatus{Phase: cairnv1.BackupPhasePartiallyFailed, Errors: 2, Warnings: 1},
			want{metav1.ConditionFalse, false, true, "PartiallyFailed", "2 errors and 1 warnings"}},
		{"failed", cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseFailed, FailureReason: "Backup cancelled by user"},
			want{metav1.ConditionFalse, false, true, "Failed", "Backup cancelled by user"}},
		{"failed validation", cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseFailedValidation, ValidationErrors: []string{"a", "b"}},
			want{metav1.ConditionFalse, false, true, "FailedValidation", "a; b"}},
		{"being deleted", cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseDeleting}, want{metav1.ConditionFalse, true, false, "Deleting", "deleting"}},
		{"deletion failed", cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseDeletionFailed, LastDeletionError: "bucket gone"},
			want{metav1.ConditionFalse, true, false, "DeletionFailed", "bucket gone"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: tt.status}
			check(t, Backup(b), tt.want, 2)
		})
	}
	// A backup deleted at or after its expiration says so: the why of its Deleting phase.
	expiration := metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
	for _, tt := range []struct {
		name    string
		deleted time.Time
		want    string
	}{
		{"deleted before it expired", expiration.Add(-time.Minute), "deleting its data"},
		{"deleted at its expiration", expiration.Time, "the backup expired at 2026-01-01T10:00:00Z: deleting its data"},
		{"deleted after it expired", expiration.Add(time.Hour), "the backup expired at 2026-01-01T10:00:00Z: deleting its data"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			deleted := metav1.NewTime(tt.deleted)
			b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleted},
				Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseDeleting, Expiration: &expiration}}
			if got := Backup(b).Ready.Message; got != tt.want {
				t.Errorf("message %q, want %q", got, tt.want)
			}
		})
	}
	// Every phase is decided: none falls through with an empty message.
	for _, phase := range cairnv1.AllBackupPhases {
		c := Backup(&cairnv1.Backup{Status: cairnv1.BackupStatus{Phase: phase, FailureReason: "x", ValidationErrors: []string{"x"}, LastDeletionError: "x"}})
		if c.Ready.Message == "" || c.Ready.Reason != string(phase) {
			t.Errorf("phase %s: Ready %+v, want the phase as reason and a message", phase, c.Ready)
		}
		if terminal := phase.IsTerminal(); terminal == (c.Reconciling != nil) {
			t.Errorf("phase %s: Reconciling present = %v, terminal = %v", phase, c.Reconciling != nil, terminal)
		}
	}
}

func TestRestore(t *testing.T) {
	tests := []struct {
		name   string
		status cairnv1.RestoreStatus
		want   want
	}{
		{"just created", cairnv1.RestoreStatus{}, want{metav1.ConditionFalse, true, false, "New", "validated"}},
		{"running", cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseInProgress}, want{metav1.ConditionFalse, true, false, "InProgress", "restoring"}},
		{"completed", cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseCompleted}, want{metav1.ConditionTrue, false, false, "Completed", "completed: no items"}},
		{"completed with items", cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseCompleted, Progress: cairnv1.NewRestoreProgress(5, 6), Warnings: 1},
			want{metav1.ConditionTrue, false, false, "Completed", "completed: 5 of 6 items restored, 1 warnings"}},
		{"partially failed", cairnv1.RestoreStatus{Phase: cairnv1.RestorePhasePartiallyFailed, Errors: 1},
			want{metav1.ConditionFalse, false, true, "PartiallyFailed", "1 errors"}},
		{"failed validation", cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseFailedValidation, ValidationErrors: []string{"not allowed"}},
			want{metav1.ConditionFalse, false, true, "FailedValidation", "not allowed"}},
		{"failed", cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseFailed, FailureReason: "archive checksum mismatch"},
			want{metav1.ConditionFalse, false, true, "Failed", "checksum"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: tt.status}
			check(t, Restore(rs), tt.want, 1)
		})
	}
}

func TestSchedule(t *testing.T) {
	tests := []struct {
		name           string
		generation     int64
		status         cairnv1.ScheduleStatus
		want           want
		wantGeneration int64
	}{
		{"not seen yet", 1, cairnv1.ScheduleStatus{}, want{metav1.ConditionFalse, true, false, cairnv1.ReasonProgressing, "not been read"}, 0},
		{"enabled", 1, cairnv1.ScheduleStatus{Phase: cairnv1.SchedulePhaseEnabled, ObservedGeneration: 1}, want{metav1.ConditionTrue, false, false, "Enabled", "enabled"}, 1},
		{"paused: not ready, nothing going on", 2, cairnv1.ScheduleStatus{Phase: cairnv1.SchedulePhasePaused, ObservedGeneration: 2},
			want{metav1.ConditionFalse, false, false, "Paused", "paused"}, 2},
		{"failed validation", 1, cairnv1.ScheduleStatus{Phase: cairnv1.SchedulePhaseFailedValidation, ObservedGeneration: 1, ValidationErrors: []string{"bad cron"}},
			want{metav1.ConditionFalse, false, true, "FailedValidation", "bad cron"}, 1},
		{"edited, the edit not seen yet: what was Enabled is no longer Ready", 3, cairnv1.ScheduleStatus{Phase: cairnv1.SchedulePhaseEnabled, ObservedGeneration: 2},
			want{metav1.ConditionFalse, true, false, cairnv1.ReasonProgressing, "latest spec"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Generation: tt.generation}, Status: tt.status}
			check(t, Schedule(s), tt.want, tt.wantGeneration)
		})
	}
}

func TestStorageLocation(t *testing.T) {
	tests := []struct {
		name   string
		status cairnv1.BackupStorageLocationStatus
		want   want
	}{
		{"not checked yet", cairnv1.BackupStorageLocationStatus{}, want{metav1.ConditionFalse, true, false, "NotValidated", "not checked"}},
		{"available", cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}, want{metav1.ConditionTrue, false, false, "Available", "available"}},
		{"unavailable", cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseUnavailable, Message: "bucket b does not exist"},
			want{metav1.ConditionFalse, false, true, "Unavailable", "bucket b does not exist"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Generation: 4}, Status: tt.status}
			check(t, StorageLocation(l), tt.want, 4)
		})
	}
}

func TestApply(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	other := metav1.Condition{Type: cairnv1.BackupConditionQueued, Status: metav1.ConditionTrue, Reason: "Waiting", LastTransitionTime: metav1.NewTime(t0)}
	conditions := []metav1.Condition{other}

	running := Backup(&cairnv1.Backup{Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseInProgress}})
	if !Apply(&conditions, running, t0) {
		t.Fatal("first Apply changed nothing")
	}
	if Apply(&conditions, running, t1) {
		t.Error("Apply of the same conditions changed something: it would write for nothing")
	}
	if c := meta.FindStatusCondition(conditions, cairnv1.ConditionReconciling); c == nil || !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Reconciling = %+v, want it since %v", c, t0)
	}

	done := Backup(&cairnv1.Backup{Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted}})
	if !Apply(&conditions, done, t1) {
		t.Fatal("Apply of Completed changed nothing")
	}
	if meta.FindStatusCondition(conditions, cairnv1.ConditionReconciling) != nil || meta.FindStatusCondition(conditions, cairnv1.ConditionStalled) != nil {
		t.Errorf("conditions %+v: Reconciling and Stalled must be gone", conditions)
	}
	if c := meta.FindStatusCondition(conditions, cairnv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Time.Equal(t1) {
		t.Errorf("Ready = %+v, want True since %v", c, t1)
	}
	if c := meta.FindStatusCondition(conditions, cairnv1.BackupConditionQueued); c == nil || *c != other {
		t.Errorf("another owner's condition changed: %+v", c)
	}
}
