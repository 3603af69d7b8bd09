package phases

import (
	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// Backup phases, as Phase values.
const (
	backupNew                     = Phase(cairnv1.BackupPhaseNew)
	backupQueued                  = Phase(cairnv1.BackupPhaseQueued)
	backupReadyToStart            = Phase(cairnv1.BackupPhaseReadyToStart)
	backupInProgress              = Phase(cairnv1.BackupPhaseInProgress)
	backupWaiting                 = Phase(cairnv1.BackupPhaseWaitingForPluginOperations)
	backupWaitingPartiallyFailed  = Phase(cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed)
	backupFinalizing              = Phase(cairnv1.BackupPhaseFinalizing)
	backupFinalizingPartialFailed = Phase(cairnv1.BackupPhaseFinalizingPartiallyFailed)
	backupFinalizingCancelled     = Phase(cairnv1.BackupPhaseFinalizingCancelled)
	backupFinalizingFailed        = Phase(cairnv1.BackupPhaseFinalizingFailed)
	backupCompleted               = Phase(cairnv1.BackupPhaseCompleted)
	backupPartiallyFailed         = Phase(cairnv1.BackupPhasePartiallyFailed)
	backupFailed                  = Phase(cairnv1.BackupPhaseFailed)
	backupFailedValidation        = Phase(cairnv1.BackupPhaseFailedValidation)
	backupDeleting                = Phase(cairnv1.BackupPhaseDeleting)
	backupDeletionFailed          = Phase(cairnv1.BackupPhaseDeletionFailed)
)

// Backup is the owner table of backups (DESIGN.md section 1), with the arrows the code adds to
// it (each says so in its When, and docs/architecture.md says why).
var Backup = &Table{
	Kind:    KindBackup,
	Initial: backupNew,
	States: []State{
		{Phases: []Phase{backupNew}, Meaning: "just created", Owner: OwnerQueue, Arrows: []Arrow{
			{To: backupQueued},
			{To: backupFailedValidation},
			{To: backupFailed, When: "cancelled or deleted"},
		}},
		{Phases: []Phase{backupNew}, Variant: VariantSyncPending, Shown: "`\"\"` with annotation `cairn.dev/synced-from`",
			Meaning: "made by the sync from storage (docs/disaster-recovery.md); the queue never takes it", Owner: OwnerSync, Arrows: []Arrow{
				{To: backupCompleted, When: "from the commit marker"},
				{To: backupPartiallyFailed, When: "from the commit marker"},
				{To: backupFailedValidation, When: "no such committed backup, or one the sync refuses"},
			}},
		{Phases: []Phase{backupQueued}, Meaning: "waiting; `status.queuePosition` = 1..n", Owner: OwnerQueue, Arrows: []Arrow{
			{To: backupReadyToStart},
			{To: backupFailedValidation, When: "DESIGN.md's; the queue validates only New backups"},
			{To: backupFailed, When: "cancelled or deleted"},
		}},
		{Phases: []Phase{backupReadyToStart}, Meaning: "dequeued; a concurrency slot is taken", Owner: OwnerBackup, Arrows: []Arrow{
			{To: backupInProgress},
			{To: backupFailedValidation, When: "location, spec or requester checked again at the start"},
			{To: backupFailed, When: "cancelled or deleted, or its storage unreachable for `--phase-timeout`"},
		}},
		{Phases: []Phase{backupInProgress}, Meaning: "items are being backed up by this backup's own worker pool", Owner: OwnerBackup, Arrows: []Arrow{
			{To: backupWaiting, When: "items written, async operations running"},
			{To: backupWaitingPartiallyFailed, When: "the same, with errors"},
			{To: backupFinalizing, When: "items written"},
			{To: backupFinalizingPartialFailed, When: "items written, with errors"},
			{To: backupFinalizingCancelled, When: "cancelled or deleted, also when the operator restarted during it"},
			{To: backupFinalizingFailed, When: "the run failed, or the operator restarted during it"},
		}},
		{Phases: []Phase{backupWaiting}, Meaning: "async plugin operations still running", Owner: OperationsOwner(KindBackup), Arrows: []Arrow{
			{To: backupWaitingPartiallyFailed, When: "an operation failed while others still run: an addition to DESIGN.md"},
			{To: backupFinalizing, When: "every operation completed"},
			{To: backupFinalizingPartialFailed, When: "an operation failed, or they could not be followed for `--phase-timeout`"},
			{To: backupFinalizingCancelled, When: "cancelled or deleted: every unfinished operation cancelled"},
		}},
		{Phases: []Phase{backupWaitingPartiallyFailed}, Meaning: "the same, with errors already counted", Owner: OperationsOwner(KindBackup), Arrows: []Arrow{
			{To: backupFinalizingPartialFailed, When: "no operation runs any more, or they could not be followed"},
			{To: backupFinalizingCancelled, When: "cancelled or deleted"},
		}},
		{Phases: []Phase{backupFinalizing}, Meaning: "post-operation items are added, final upload", Owner: OwnerFinalizer, Arrows: []Arrow{
			{To: backupCompleted},
			{To: backupFinalizingCancelled, When: "cancelled or deleted before the commit marker is written"},
			{To: backupFinalizingFailed, When: "cannot be committed"},
		}},
		{Phases: []Phase{backupFinalizingPartialFailed}, Meaning: "the same, with errors already counted", Owner: OwnerFinalizer, Arrows: []Arrow{
			{To: backupPartiallyFailed},
			{To: backupFinalizingCancelled, When: "cancelled or deleted before the commit marker is written"},
			{To: backupFinalizingFailed, When: "cannot be committed"},
		}},
		{Phases: []Phase{backupFinalizingCancelled}, Meaning: "cancelled: backup data is removed, logs are kept", Owner: OwnerFinalizer, Arrows: []Arrow{
			{To: backupFailed, When: "`failureReason: Backup cancelled by user`, condition `Cancelled=True`"},
		}},
		{Phases: []Phase{backupFinalizingFailed}, Meaning: "failed (`failureReason` says why): its partial data is removed, the log is kept", Owner: OwnerFinalizer, Arrows: []Arrow{
			{To: backupFailed, When: "condition `CleanedUp`"},
		}},
		{Phases: []Phase{backupCompleted, backupPartiallyFailed, backupFailed, backupFailedValidation},
			Meaning: "terminal; once deleted, the deletion reconciler's", Owner: OwnerDeletion, Arrows: []Arrow{
				{To: backupDeleting, When: "deleted, once its deletion has run a second: a departure, see \"Deletion\""},
				{To: backupDeletionFailed, When: "its deletion failed within that second"},
			}, Ends: "object gone (its data removed within that second, or nothing to remove)"},
		{Phases: []Phase{backupDeleting}, Meaning: "data deletion runs asynchronously", Owner: OwnerDeletion, Arrows: []Arrow{
			{To: backupDeletionFailed, When: "the deletion failed, or the operator restarted during it"},
		}, Ends: "object gone"},
		{Phases: []Phase{backupDeletionFailed}, Meaning: "the last deletion attempt failed; retried with backoff", Owner: OwnerDeletion, Arrows: []Arrow{
			{To: backupDeleting, When: "the next attempt is due"},
		}},
	},
}

// OperationsOwner is the reconciler that owns the WaitingForPluginOperations* phases of kind.
func OperationsOwner(k Kind) Owner {
	if k == KindRestore {
		return OwnerRestoreOperations
	}
	return OwnerOperations
}

// Restore phases, as Phase values.
const (
	restoreNew                     = Phase(cairnv1.RestorePhaseNew)
	restoreQueued                  = Phase(cairnv1.RestorePhaseQueued)
	restoreReadyToStart            = Phase(cairnv1.RestorePhaseReadyToStart)
	restoreInProgress              = Phase(cairnv1.RestorePhaseInProgress)
	restoreWaiting                 = Phase(cairnv1.RestorePhaseWaitingForPluginOperations)
	restoreWaitingPartiallyFailed  = Phase(cairnv1.RestorePhaseWaitingForPluginOperationsPartiallyFailed)
	restoreFinalizing              = Phase(cairnv1.RestorePhaseFinalizing)
	restoreFinalizingPartialFailed = Phase(cairnv1.RestorePhaseFinalizingPartiallyFailed)
	restoreFinalizingCancelled     = Phase(cairnv1.RestorePhaseFinalizingCancelled)
	restoreCompleted               = Phase(cairnv1.RestorePhaseCompleted)
	restorePartiallyFailed         = Phase(cairnv1.RestorePhasePartiallyFailed)
	restoreFailed                  = Phase(cairnv1.RestorePhaseFailed)
	restoreFailedValidation        = Phase(cairnv1.RestorePhaseFailedValidation)
)

// Restore is the owner table of restores (DESIGN.md section 9), with the arrows the code adds.
var Restore = &Table{
	Kind:    KindRestore,
	Initial: restoreNew,
	States: []State{
		{Phases: []Phase{restoreNew}, Meaning: "just created", Owner: OwnerQueue, Arrows: []Arrow{
			{To: restoreQueued},
			{To: restoreReadyToStart, When: "DESIGN.md's; the queue writes Queued first"},
			{To: restoreFailedValidation},
			{To: restoreFailed, When: "cancelled or deleted"},
		}},
		{Phases: []Phase{restoreQueued}, Meaning: "waiting in the one line with backups; `status.queuePosition` = 1..n", Owner: OwnerQueue, Arrows: []Arrow{
			{To: restoreReadyToStart, When: "nothing overlapping its target namespaces runs or is queued ahead, and a restore slot is free"},
			{To: restoreFailedValidation, When: "DESIGN.md's; the queue validates only New restores"},
			{To: restoreFailed, When: "cancelled or deleted"},
		}},
		{Phases: []Phase{restoreReadyToStart}, Meaning: "dequeued; a restore slot is taken", Owner: OwnerRestore, Arrows: []Arrow{
			{To: restoreInProgress},
			{To: restoreFailedValidation, When: "backup, location or commit marker gone meanwhile"},
			{To: restoreFailed, When: "cancelled or deleted, or storage unreachable for `--phase-timeout`"},
		}},
		{Phases: []Phase{restoreInProgress}, Meaning: "items are being created by the restore's own worker pool", Owner: OwnerRestore, Arrows: []Arrow{
			{To: restoreWaiting, When: "async operations running"},
			{To: restoreWaitingPartiallyFailed, When: "the same, with errors"},
			{To: restoreFinalizing},
			{To: restoreFinalizingPartialFailed, When: "items failed"},
			{To: restoreFinalizingCancelled, When: "cancelled or deleted: the pool stopped, its operations cancelled"},
			{To: restoreFailed, When: "fatal: archive checksum mismatch, unreadable archive, a target namespace still terminating after `--restore-namespace-timeout`; or the operator restarted"},
		}},
		{Phases: []Phase{restoreWaiting}, Meaning: "async operations still running", Owner: OperationsOwner(KindRestore), Arrows: []Arrow{
			{To: restoreWaitingPartiallyFailed, When: "an operation failed while others still run: an addition to DESIGN.md"},
			{To: restoreFinalizing, When: "every operation completed"},
			{To: restoreFinalizingPartialFailed, When: "an operation failed, or they could not be followed for `--phase-timeout`"},
			{To: restoreFinalizingCancelled, When: "cancelled or deleted: every unfinished operation cancelled"},
		}},
		{Phases: []Phase{restoreWaitingPartiallyFailed}, Meaning: "the same, with errors already counted", Owner: OperationsOwner(KindRestore), Arrows: []Arrow{
			{To: restoreFinalizingPartialFailed, When: "no operation runs any more, or they could not be followed"},
			{To: restoreFinalizingCancelled, When: "cancelled or deleted"},
		}},
		{Phases: []Phase{restoreFinalizing}, Meaning: "every item handled, the restore is being ended", Owner: OwnerRestoreFinalizer, Arrows: []Arrow{
			{To: restoreCompleted},
			{To: restoreFailed, When: "cancelled or deleted while finalizing: `Cancelled=True`"},
		}},
		{Phases: []Phase{restoreFinalizingPartialFailed}, Meaning: "the same, with errors already counted", Owner: OwnerRestoreFinalizer, Arrows: []Arrow{
			{To: restorePartiallyFailed},
			{To: restoreFailed, When: "cancelled or deleted while finalizing: `Cancelled=True`"},
		}},
		{Phases: []Phase{restoreFinalizingCancelled}, Meaning: "cancelled: the objects it created stay", Owner: OwnerRestoreFinalizer, Arrows: []Arrow{
			{To: restoreFailed, When: "`failureReason: Restore cancelled by user`, `Cancelled=True`"},
		}},
		{Phases: []Phase{restoreCompleted, restorePartiallyFailed, restoreFailed, restoreFailedValidation},
			Meaning: "terminal; on delete the restore finalizer removes the restore's files, then its finalizer `cairn.dev/restore-data`",
			Ends:    "object gone"},
	},
}

// The phases of a PodVolumeBackup or PodVolumeRestore (DESIGN.md section 16; cairnv1.PodVolumePhase).
const (
	volumeNew        Phase = "New"
	volumeInProgress Phase = "InProgress"
	volumeCompleted  Phase = "Completed"
	volumeFailed     Phase = "Failed"
	volumeCancelled  Phase = "Cancelled"
)

// volumeTable is the owner table of one pod volume's copy, the same for both directions.
func volumeTable(k Kind, copies string) *Table {
	return &Table{
		Kind:    k,
		Initial: volumeNew,
		States: []State{
			{Phases: []Phase{volumeNew}, Meaning: "created by the " + copies + "; waits for its node's agent", Owner: OwnerNodeAgent, Arrows: []Arrow{
				{To: volumeInProgress}, {To: volumeFailed}, {To: volumeCancelled},
			}},
			{Phases: []Phase{volumeInProgress}, Meaning: "the node agent of `spec.node` copies the volume", Owner: OwnerNodeAgent, Arrows: []Arrow{
				{To: volumeCompleted}, {To: volumeFailed}, {To: volumeCancelled},
			}},
			{Phases: []Phase{volumeCompleted, volumeFailed, volumeCancelled}, Meaning: "terminal"},
		},
	}
}

// PodVolumeBackup is the owner table of PodVolumeBackups (DESIGN.md section 16).
var PodVolumeBackup = volumeTable(KindPodVolumeBackup, "backup")

// PodVolumeRestore is the owner table of PodVolumeRestores (DESIGN.md section 16).
var PodVolumeRestore = volumeTable(KindPodVolumeRestore, "restore")
