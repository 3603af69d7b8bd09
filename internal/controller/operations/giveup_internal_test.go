package operations

import (
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/failure"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
)

func TestPollFailureOutcome(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "creds", errors.New("no RBAC"))
	tests := []struct {
		name       string
		err        error
		failingFor time.Duration
		giveUp     bool
		reason     string
	}{
		{name: "storage down: retry", err: errStorageDown, failingFor: time.Minute},
		{name: "storage down just under the timeout: retry", err: errStorageDown, failingFor: time.Hour},
		{name: "storage down past the timeout", err: errStorageDown, failingFor: time.Hour + time.Second, giveUp: true,
			reason: "phase timed out after 1h0m0s: connection refused"},
		{name: "location gone", err: fmt.Errorf("%w: storage location x does not exist", location.ErrMissing), giveUp: true,
			reason: "no such storage location: storage location x does not exist"},
		{name: "location misconfigured", err: fmt.Errorf("%w: no key", location.ErrConfig), giveUp: true, reason: "invalid storage location: no key"},
		{name: "location ReadOnly", err: fmt.Errorf("writing the operations: %w", storage.ErrReadOnly), giveUp: true,
			reason: "writing the operations: the storage location is read-only"},
		{name: "operations object missing", err: fmt.Errorf("reading the operations: %w", storage.ErrNotFound), giveUp: true},
		{name: "operations object corrupt", err: fmt.Errorf("%w: EOF", backup.ErrCorruptOperations), giveUp: true,
			reason: "the operations object is corrupt: EOF"},
		{name: "forbidden", err: fmt.Errorf("reading the credentials: %w", forbidden), giveUp: true},
		{name: "marked permanent", err: failure.Permanent(errors.New("no way")), giveUp: true, reason: "no way"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			giveUp, reason := pollFailureOutcome(tc.err, tc.failingFor, time.Hour)
			if giveUp != tc.giveUp {
				t.Fatalf("giveUp = %v, want %v", giveUp, tc.giveUp)
			}
			want := tc.reason
			if want == "" && tc.giveUp {
				want = tc.err.Error()
			}
			if reason != want {
				t.Errorf("reason %q, want %q", reason, want)
			}
		})
	}
}

func TestOperationTotals(t *testing.T) {
	st := cairnv1.BackupStatus{BackupItemOperationsAttempted: 5, BackupItemOperationsCompleted: 2, BackupItemOperationsFailed: 1}
	done := backup.Operation{Phase: backup.OperationCompleted}
	failed := backup.Operation{Phase: backup.OperationFailed}
	tests := []struct {
		name                         string
		ops                          []backup.Operation
		known                        bool
		attempted, completed, failed int32
	}{
		{name: "unknown: whatever did not complete failed", known: false, attempted: 5, completed: 2, failed: 3},
		{name: "known: counted from the operations", ops: []backup.Operation{done, failed, failed}, known: true, attempted: 3, completed: 1, failed: 2},
		{name: "known and none", known: true},
	}
	for _, tc := range tests {
		a, c, f := operationTotals(backupOperationsStatus(&st), tc.ops, tc.known)
		if a != tc.attempted || c != tc.completed || f != tc.failed {
			t.Errorf("%s: got %d, %d, %d; want %d, %d, %d", tc.name, a, c, f, tc.attempted, tc.completed, tc.failed)
		}
	}
}
