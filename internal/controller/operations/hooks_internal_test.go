package operations

import (
	"testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/restore"
)

// The hooks the operations ran are added to the run's once, by the write that leaves the
// waiting phases; every write made while waiting (or made again after a failed one, from the
// object as it was) leaves the run's counts as they are.
func TestWithOperationHooks(t *testing.T) {
	kind := Backups(backup.NewRegistry(nil))
	ops := []backup.Operation{{Phase: backup.OperationCompleted, Result: []byte(`{"hooks":{"attempted":2,"failed":1},"continued":1}`)}}
	run := backup.HookCounts{Attempted: 3}
	for _, tc := range []struct {
		phase        cairnv1.BackupPhase
		want         backup.HookCounts
		wantWarnings int32
	}{
		{cairnv1.BackupPhaseWaitingForPluginOperations, run, 4},
		{cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed, run, 4},
		{cairnv1.BackupPhaseFinalizing, backup.HookCounts{Attempted: 5, Failed: 1}, 5},
		{cairnv1.BackupPhaseFinalizingPartiallyFailed, backup.HookCounts{Attempted: 5, Failed: 1}, 5},
		{cairnv1.BackupPhaseFinalizingCancelled, backup.HookCounts{Attempted: 5, Failed: 1}, 5},
	} {
		s := operationsStatus[cairnv1.BackupPhase]{Phase: tc.phase, Hooks: run, Warnings: 4}
		withOperationHooks(kind, &s, ops)
		if s.Hooks != tc.want || s.Warnings != tc.wantWarnings {
			t.Errorf("%s: %+v and %d warnings, want %+v and %d", tc.phase, s.Hooks, s.Warnings, tc.want, tc.wantWarnings)
		}
	}
	// The status round trip the backup kind's patch makes.
	b := &cairnv1.Backup{Status: cairnv1.BackupStatus{HookStatus: &cairnv1.HookStatus{HooksAttempted: 3}}}
	if got := kind.status(b).Hooks; got != run {
		t.Errorf("read %+v, want %+v", got, run)
	}
	// And the restore kind's.
	rs := &cairnv1.Restore{Status: cairnv1.RestoreStatus{HookStatus: &cairnv1.HookStatus{HooksAttempted: 3}, Warnings: 2}}
	if got := Restores(restore.NewActions(), &Held{}).status(rs); got.Hooks != run || got.Warnings != 2 {
		t.Errorf("read %+v, want %+v and 2 warnings", got, run)
	}
}
