package operations

import (
	"testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

// The hooks the operations ran are added to the run's once, by the write that leaves the
// waiting phases; every write made while waiting (or made again after a failed one, from the
// object as it was) leaves the run's counts as they are.
func TestWithOperationHooks(t *testing.T) {
	kind := Backups(backup.NewRegistry(nil))
	ops := []backup.Operation{{Phase: backup.OperationCompleted, Result: []byte(`{"hooks":{"attempted":2,"failed":1}}`)}}
	run := backup.HookCounts{Attempted: 3}
	for _, tc := range []struct {
		phase cairnv1.BackupPhase
		want  backup.HookCounts
	}{
		{cairnv1.BackupPhaseWaitingForPluginOperations, run},
		{cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed, run},
		{cairnv1.BackupPhaseFinalizing, backup.HookCounts{Attempted: 5, Failed: 1}},
		{cairnv1.BackupPhaseFinalizingPartiallyFailed, backup.HookCounts{Attempted: 5, Failed: 1}},
		{cairnv1.BackupPhaseFinalizingCancelled, backup.HookCounts{Attempted: 5, Failed: 1}},
	} {
		s := operationsStatus[cairnv1.BackupPhase]{Phase: tc.phase, Hooks: run}
		withOperationHooks(kind, &s, ops)
		if s.Hooks != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.phase, s.Hooks, tc.want)
		}
	}
	// The status round trip the backup kind's patch makes.
	b := &cairnv1.Backup{Status: cairnv1.BackupStatus{HookStatus: &cairnv1.HookStatus{HooksAttempted: 3}}}
	if got := kind.status(b).Hooks; got != run {
		t.Errorf("read %+v, want %+v", got, run)
	}
}
