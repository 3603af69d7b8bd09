package lifecycle

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/readiness"
	"github.com/cairn-backup/cairn/internal/restore"
)

// What the shared lifecycle knows of each kind (RunKind): Backup (DESIGN.md section 1) and
// Restore (section 9).

const (
	// failureReasonDeleted is the failureReason of a backup deleted before it finished.
	failureReasonDeleted = "Backup deleted by user"
	// FailureReasonRestoreDeleted is the failureReason of a restore deleted before it finished.
	FailureReasonRestoreDeleted = "Restore deleted before it finished"
)

// FailureReasonRestarted is the failureReason of a backup that was running when the operator
// stopped.
const FailureReasonRestarted = "the operator restarted during the backup"

// FailureReasonRestoreRestarted is the failureReason of a restore that was running when the
// operator stopped.
const FailureReasonRestoreRestarted = "the operator restarted during the restore"

// Backups is the lifecycle's adapter for backups.
var Backups = &RunKind[*cairnv1.Backup, cairnv1.BackupStatus, cairnv1.BackupPhase]{
	name:      "backup",
	newObject: func() *cairnv1.Backup { return &cairnv1.Backup{} },
	list:      listAll(func(l *cairnv1.BackupList) []cairnv1.Backup { return l.Items }),
	status:    func(b *cairnv1.Backup) *cairnv1.BackupStatus { return &b.Status },
	fields: func(s *cairnv1.BackupStatus) statusFields[cairnv1.BackupPhase] {
		return statusFields[cairnv1.BackupPhase]{phase: &s.Phase, failureReason: &s.FailureReason, queuePosition: &s.QueuePosition,
			completionTimestamp: &s.CompletionTimestamp, phaseTransitionTime: &s.PhaseTransitionTime, conditions: &s.Conditions}
	},
	table: phases.Backup,
	variant: func(b *cairnv1.Backup) phases.Variant {
		if b.IsSyncPending() {
			return phases.VariantSyncPending
		}
		return ""
	},
	readiness: readiness.Backup,
	runOwner:  phases.OwnerBackup,

	readyToStart:                cairnv1.BackupPhaseReadyToStart,
	inProgress:                  cairnv1.BackupPhaseInProgress,
	failed:                      cairnv1.BackupPhaseFailed,
	waitingForOperations:        cairnv1.BackupPhaseWaitingForPluginOperations,
	waitingForOperationsPartial: cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed,
	finalizing:                  cairnv1.BackupPhaseFinalizing,
	finalizingPartial:           cairnv1.BackupPhaseFinalizingPartiallyFailed,

	cancelRequested:        func(b *cairnv1.Backup) bool { return b.Spec.Cancel },
	failureReasonCancelled: cairnv1.FailureReasonCancelled,
	failureReasonDeleted:   failureReasonDeleted,
	reasonDeleted:          cairnv1.ReasonBackupDeleted,
	beforeStartMessages: func(failureReason string) (string, string) {
		message := failureReason + " before it started"
		return message, message
	},
	cancelCause:      backup.ErrCancelRequested,
	awaitedStorage:   func(b *cairnv1.Backup) string { return "storage location " + b.Status.StorageLocation },
	afterInterrupted: afterInterruptedBackup,
	recoveryStep:     "end-interrupted-backups",
}

// afterInterruptedBackup is where a backup goes that was InProgress when the operator stopped:
// a cancelled (or deleted) one is cleaned up as cancelled, so a cancel is never lost; any other
// fails, and its partial data is removed (both by the finalizer).
func afterInterruptedBackup(cancelled bool) (cairnv1.BackupPhase, string) {
	if cancelled {
		return cairnv1.BackupPhaseFinalizingCancelled, ""
	}
	return cairnv1.BackupPhaseFinalizingFailed, FailureReasonRestarted
}

// Restores is the lifecycle's adapter for restores.
var Restores = &RunKind[*cairnv1.Restore, cairnv1.RestoreStatus, cairnv1.RestorePhase]{
	name:      "restore",
	newObject: func() *cairnv1.Restore { return &cairnv1.Restore{} },
	list:      listAll(func(l *cairnv1.RestoreList) []cairnv1.Restore { return l.Items }),
	status:    func(rs *cairnv1.Restore) *cairnv1.RestoreStatus { return &rs.Status },
	fields: func(s *cairnv1.RestoreStatus) statusFields[cairnv1.RestorePhase] {
		return statusFields[cairnv1.RestorePhase]{phase: &s.Phase, failureReason: &s.FailureReason, queuePosition: &s.QueuePosition,
			completionTimestamp: &s.CompletionTimestamp, phaseTransitionTime: &s.PhaseTransitionTime, conditions: &s.Conditions}
	},
	table:     phases.Restore,
	variant:   func(*cairnv1.Restore) phases.Variant { return "" },
	readiness: readiness.Restore,
	runOwner:  phases.OwnerRestore,

	readyToStart:                cairnv1.RestorePhaseReadyToStart,
	inProgress:                  cairnv1.RestorePhaseInProgress,
	failed:                      cairnv1.RestorePhaseFailed,
	waitingForOperations:        cairnv1.RestorePhaseWaitingForPluginOperations,
	waitingForOperationsPartial: cairnv1.RestorePhaseWaitingForPluginOperationsPartiallyFailed,
	finalizing:                  cairnv1.RestorePhaseFinalizing,
	finalizingPartial:           cairnv1.RestorePhaseFinalizingPartiallyFailed,

	cancelRequested:        func(rs *cairnv1.Restore) bool { return rs.Spec.Cancel },
	failureReasonCancelled: cairnv1.FailureReasonRestoreCancelled,
	failureReasonDeleted:   FailureReasonRestoreDeleted,
	reasonDeleted:          cairnv1.ReasonRestoreDeleted,
	queuedConditionGoes:    true,
	beforeStartMessages: func(failureReason string) (string, string) {
		return "the restore was stopped before it started: nothing was restored", failureReason + " before it started: nothing was restored"
	},
	cancelCause: restore.ErrCancelRequested,
	// A ReadyToStart restore has no location of its own yet: it reads its backup's.
	awaitedStorage:   func(*cairnv1.Restore) string { return "the backup's storage location" },
	afterInterrupted: afterInterruptedRestore,
	recoveryStep:     "fail-interrupted-restores",
}

// afterInterruptedRestore is where a restore goes that was InProgress when the operator
// stopped, cancelled or not: Failed. The objects it created stay; its files in storage are
// whatever it had written (none).
func afterInterruptedRestore(bool) (cairnv1.RestorePhase, string) {
	return cairnv1.RestorePhaseFailed, FailureReasonRestoreRestarted
}

// listAll lists every object of a kind in every namespace: L is its list type, and items
// where a list holds the objects.
func listAll[T any, L any, PL interface {
	*L
	client.ObjectList
}](items func(PL) []T) func(context.Context, client.Reader) ([]*T, error) {
	return func(ctx context.Context, c client.Reader) ([]*T, error) {
		list := PL(new(L))
		if err := c.List(ctx, list); err != nil {
			return nil, err
		}
		all := items(list)
		out := make([]*T, len(all))
		for i := range all {
			out[i] = &all[i]
		}
		return out, nil
	}
}

// phase is a kind's status.phase type (cairnv1.BackupPhase, cairnv1.RestorePhase).
type phase interface {
	~string
	IsTerminal() bool
}

// RunKind is what the shared lifecycle needs to know of one kind of object that queues, runs
// and ends: O is a pointer to the object, S its status, P its phase type.
type RunKind[O client.Object, S any, P phase] struct {
	// name is the kind as messages say it: "backup", "restore".
	name string
	// newObject returns an empty object of the kind.
	newObject func() O
	// list lists the kind's objects in every namespace.
	list func(ctx context.Context, c client.Reader) ([]O, error)
	// status is the object's status; fields points into a status at the fields the lifecycle
	// writes.
	status func(O) *S
	fields func(*S) statusFields[P]
	// table is the kind's phase-owner table, which every status write is checked against;
	// variant tells apart objects of one phase that different reconcilers own.
	table   *phases.Table
	variant func(O) phases.Variant
	// readiness is the kstatus conditions the object's status calls for.
	readiness func(O) readiness.Conditions
	// runOwner owns ReadyToStart and InProgress: it starts the run and writes how it ended.
	runOwner phases.Owner

	// The phases the lifecycle moves an object to.
	readyToStart, inProgress, failed                  P
	waitingForOperations, waitingForOperationsPartial P
	finalizing, finalizingPartial                     P

	// cancelRequested tells whether the object's spec.cancel is set.
	cancelRequested func(O) bool
	// The failureReasons of a cancel and of a deletion, and the reason of the Cancelled
	// condition after a deletion (after a cancel it is cairnv1.ReasonCancelledByUser).
	failureReasonCancelled, failureReasonDeleted, reasonDeleted string
	// queuedConditionGoes: a cancelled object loses its Queued condition. When false (backups)
	// a Queued=True condition turns False with the cancel's reason, and one that is already
	// False (the object left the line) stays as it was.
	queuedConditionGoes bool
	// beforeStartMessages are the Cancelled condition's message and the Cancelled event of an
	// object stopped before it started, for its failureReason.
	beforeStartMessages func(failureReason string) (condition, event string)
	// cancelCause is the cause a run's context is cancelled with when the object asks to stop
	// (the run tells it from the manager stopping by it).
	cancelCause error
	// awaitedStorage names what a ReadyToStart object waits for when its storage cannot be used,
	// for its StorageReady condition.
	awaitedStorage func(O) string
	// afterInterrupted is where an InProgress object goes when the operator restarted during its
	// run (DESIGN.md section 7), given whether it was cancelled or deleted: its phase and
	// failureReason.
	afterInterrupted func(cancelled bool) (P, string)
	// recoveryStep names the restart-recovery step that ends the interrupted runs.
	recoveryStep string
}

// statusFields points into a status at the fields the lifecycle writes, which both kinds have
// under the same names.
type statusFields[P phase] struct {
	phase               *P
	failureReason       *string
	queuePosition       *int32
	completionTimestamp **metav1.Time
	phaseTransitionTime **metav1.Time
	conditions          *[]metav1.Condition
}

// The condition types the lifecycle writes: backups and restores name them alike
// (TestLifecycleConditionTypes).
const (
	conditionQueued       = cairnv1.BackupConditionQueued
	conditionCancelled    = cairnv1.BackupConditionCancelled
	conditionStorageReady = cairnv1.BackupConditionStorageReady
)

// phaseOf is the object's status.phase.
func (k *RunKind[O, S, P]) phaseOf(obj O) P { return *k.fields(k.status(obj)).phase }
