package expiry

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestDecideExpiry(t *testing.T) {
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(d)); return &t }
	bsl := func(mode cairnv1.AccessMode) *cairnv1.BackupStorageLocation {
		return &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "archive"}, Spec: cairnv1.BackupStorageLocationSpec{AccessMode: mode}}
	}
	rw, ro := bsl(cairnv1.AccessModeReadWrite), bsl(cairnv1.AccessModeReadOnly)
	velero := bsl(cairnv1.AccessModeReadOnly)
	velero.Spec.Format = cairnv1.LocationFormatVelero
	missing := `storage location "archive" does not exist in namespace cairn-system`
	tests := []struct {
		name        string
		in          expiryInput
		want        expiryAction
		wantAfter   time.Duration
		wantReason  string
		wantMessage string // substring
	}{
		{name: "completed, not expired: wait until the expiration", in: expiryInput{Phase: cairnv1.BackupPhaseCompleted, Expiration: at(90 * time.Second), TouchesStorage: true, Location: rw},
			want: expiryWait, wantAfter: 90 * time.Second},
		{name: "expires in a nanosecond: wait for it", in: expiryInput{Phase: cairnv1.BackupPhaseCompleted, Expiration: at(time.Nanosecond), TouchesStorage: true},
			want: expiryWait, wantAfter: time.Nanosecond},
		{name: "completed, expiring now: delete", in: expiryInput{Phase: cairnv1.BackupPhaseCompleted, Expiration: at(0), TouchesStorage: true, Location: rw}, want: expiryDelete},
		{name: "completed, expired: delete", in: expiryInput{Phase: cairnv1.BackupPhaseCompleted, Expiration: at(-time.Hour), TouchesStorage: true, Location: rw}, want: expiryDelete},
		{name: "partially failed, expired: delete", in: expiryInput{Phase: cairnv1.BackupPhasePartiallyFailed, Expiration: at(-time.Second), TouchesStorage: true, Location: rw}, want: expiryDelete},
		{name: "failed, expired: delete", in: expiryInput{Phase: cairnv1.BackupPhaseFailed, Expiration: at(-time.Second), TouchesStorage: true, Location: rw}, want: expiryDelete},
		{name: "failed validation, expired: delete", in: expiryInput{Phase: cairnv1.BackupPhaseFailedValidation, Expiration: at(-time.Second), TouchesStorage: true, Location: rw}, want: expiryDelete},
		{name: "no expiration (ttl 0s): never", in: expiryInput{Phase: cairnv1.BackupPhaseCompleted, TouchesStorage: true, Location: rw}, want: expiryNone},
		{name: "expired while running: its owner ends it first", in: expiryInput{Phase: cairnv1.BackupPhaseInProgress, Expiration: at(-time.Second), TouchesStorage: true, Location: rw}, want: expiryNone},
		{name: "expired while waiting for operations", in: expiryInput{Phase: cairnv1.BackupPhaseWaitingForPluginOperations, Expiration: at(-time.Second), TouchesStorage: true, Location: rw}, want: expiryNone},
		{name: "expired while finalizing", in: expiryInput{Phase: cairnv1.BackupPhaseFinalizing, Expiration: at(-time.Second), TouchesStorage: true, Location: rw}, want: expiryNone},
		{name: "already deleted: the deletion reconciler's", in: expiryInput{Phase: cairnv1.BackupPhaseCompleted, Deleted: true, Expiration: at(-time.Second), TouchesStorage: true, Location: rw}, want: expiryNone},
		{name: "deleting", in: expiryInput{Phase: cairnv1.BackupPhaseDeleting, Deleted: true, Expiration: at(-time.Second), TouchesStorage: true, Location: rw}, want: expiryNone},
		{name: "deletion failed", in: expiryInput{Phase: cairnv1.BackupPhaseDeletionFailed, Deleted: true, Expiration: at(-time.Second), TouchesStorage: true, Location: ro}, want: expiryNone},
		{name: "ReadOnly location: blocked", in: expiryInput{Phase: cairnv1.BackupPhaseCompleted, Expiration: at(-time.Second), TouchesStorage: true, Location: ro},
			want: expiryBlocked, wantReason: cairnv1.ReasonLocationReadOnly, wantMessage: "storage location archive is ReadOnly"},
		{name: "Velero location: blocked, Velero deletes it", in: expiryInput{Phase: cairnv1.BackupPhaseCompleted, Expiration: at(-time.Second), TouchesStorage: true, Location: velero},
			want: expiryBlocked, wantReason: cairnv1.ReasonLocationReadOnly, wantMessage: "Velero's own garbage collection deletes it"},
		{name: "ReadOnly location, not expired: wait", in: expiryInput{Phase: cairnv1.BackupPhaseCompleted, Expiration: at(time.Minute), TouchesStorage: true, Location: ro},
			want: expiryWait, wantAfter: time.Minute},
		{name: "missing location: blocked", in: expiryInput{Phase: cairnv1.BackupPhaseCompleted, Expiration: at(-time.Second), TouchesStorage: true, LocationError: missing},
			want: expiryBlocked, wantReason: cairnv1.ReasonLocationNotFound, wantMessage: missing},
		{name: "ReadOnly location, deletion keeps the data: delete", in: expiryInput{Phase: cairnv1.BackupPhaseCompleted, Expiration: at(-time.Second), Location: ro}, want: expiryDelete},
		{name: "missing location, deletion keeps the data: delete", in: expiryInput{Phase: cairnv1.BackupPhaseFailed, Expiration: at(-time.Second), LocationError: missing}, want: expiryDelete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Now = now
			got := decideExpiry(tt.in)
			if got.Action != tt.want || got.After != tt.wantAfter || got.Reason != tt.wantReason || !strings.Contains(got.Message, tt.wantMessage) {
				t.Errorf("got %+v, want (%s, after %s, reason %q, message with %q)", got, tt.want, tt.wantAfter, tt.wantReason, tt.wantMessage)
			}
			if got.Action == expiryBlocked && !strings.Contains(got.Message, "2026-11-22T03:59:59Z") {
				t.Errorf("message %q does not say when the backup expired", got.Message)
			}
		})
	}
}
