package restore

import (
	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

// NextAfterOperations is the phase of a restore in WaitingForPluginOperations* given its
// operations (backup.AfterOperations decides, as for backups): it stays (turning PartiallyFailed
// once one failed) while any runs, then goes to Finalizing or FinalizingPartiallyFailed.
func NextAfterOperations(phase cairnv1.RestorePhase, ops []backup.Operation) cairnv1.RestorePhase {
	waiting, partial := backup.AfterOperations(phase == cairnv1.RestorePhaseWaitingForPluginOperationsPartiallyFailed, ops)
	switch {
	case waiting && partial:
		return cairnv1.RestorePhaseWaitingForPluginOperationsPartiallyFailed
	case waiting:
		return cairnv1.RestorePhaseWaitingForPluginOperations
	case partial:
		return cairnv1.RestorePhaseFinalizingPartiallyFailed
	}
	return cairnv1.RestorePhaseFinalizing
}
