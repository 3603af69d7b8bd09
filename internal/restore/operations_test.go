package restore_test

import (
	"testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/restore"
)

func TestNextAfterOperations(t *testing.T) {
	running := backup.Operation{Phase: backup.OperationInProgress}
	done := backup.Operation{Phase: backup.OperationCompleted}
	failed := backup.Operation{Phase: backup.OperationFailed}
	const (
		waiting        = cairnv1.RestorePhaseWaitingForPluginOperations
		waitingPartial = cairnv1.RestorePhaseWaitingForPluginOperationsPartiallyFailed
		final          = cairnv1.RestorePhaseFinalizing
		finalPartial   = cairnv1.RestorePhaseFinalizingPartiallyFailed
	)
	tests := []struct {
		name  string
		phase cairnv1.RestorePhase
		ops   []backup.Operation
		want  cairnv1.RestorePhase
	}{
		{"none left running", waiting, []backup.Operation{done, done}, final},
		{"one still running", waiting, []backup.Operation{done, running}, waiting},
		{"one failed, one running", waiting, []backup.Operation{failed, running}, waitingPartial},
		{"one failed, none running", waiting, []backup.Operation{failed, done}, finalPartial},
		{"partial stays partial", waitingPartial, []backup.Operation{done}, finalPartial},
		{"partial while running", waitingPartial, []backup.Operation{running}, waitingPartial},
		{"no operations", waiting, nil, final},
		{"a new operation (no phase yet) runs", waiting, []backup.Operation{{}}, waiting},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := restore.NextAfterOperations(tt.phase, tt.ops); got != tt.want {
				t.Errorf("NextAfterOperations = %s, want %s", got, tt.want)
			}
		})
	}
}
