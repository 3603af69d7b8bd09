package lifecycle

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/readiness"
)

// The lifecycle that backups and restores share (DESIGN.md section 8): how a cancel or a
// deletion stops one, how its run starts, ends and is found Orphaned, how long it may wait for
// its storage, what a tenant is told, and how a restart ends the runs it interrupted. It is
// written once, here and in lifecycle_run.go, over a RunKind: the small adapter that holds what
// truly differs between the kinds (lifecycle_kinds.go has one per kind). PatchStatus
// (status.go) is its one status writer. None of it knows a reconciler: it takes a client, a
// clock, a recorder and the object.

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

// Cancellation says whether the object was asked to stop, by spec.cancel or by its deletion,
// and why: the reason of its Cancelled condition and the failureReason it ends with. A cancel
// that came before the deletion says why. Every owner of a non-terminal phase asks this one
// function.
func (k *RunKind[O, S, P]) Cancellation(obj O) (reason, failureReason string, ok bool) {
	switch {
	case k.cancelRequested(obj):
		return cairnv1.ReasonCancelledByUser, k.failureReasonCancelled, true
	case obj.GetDeletionTimestamp() != nil:
		return k.reasonDeleted, k.failureReasonDeleted, true
	}
	return "", "", false
}

// StopReasons is why an object that stopped on a cancel stopped (Cancellation). One whose
// phase says it was cancelled but that shows neither a cancel nor a deletion cannot come
// through the API (cancel never goes back), but no object may stay unexplained: it is taken
// for the user's cancel.
func (k *RunKind[O, S, P]) StopReasons(obj O) (reason, failureReason string) {
	if reason, failureReason, ok := k.Cancellation(obj); ok {
		return reason, failureReason
	}
	return cairnv1.ReasonCancelledByUser, k.failureReasonCancelled
}

// CancelledCondition is the Cancelled=True condition of an object stopped by a cancel or a
// deletion, with message.
func (k *RunKind[O, S, P]) CancelledCondition(obj O, message string, now metav1.Time) metav1.Condition {
	reason, _ := k.StopReasons(obj)
	return metav1.Condition{Type: conditionCancelled, Status: metav1.ConditionTrue, Reason: reason,
		Message: message, ObservedGeneration: obj.GetGeneration(), LastTransitionTime: now}
}

// CancelledStatus is the end of every cancelled object that ends at once: Failed with its
// failureReason, out of the queue, condition Cancelled=True with message. s is obj's status, as
// a status write's mutate gets it.
func (k *RunKind[O, S, P]) CancelledStatus(obj O, s *S, message string, now metav1.Time) {
	reason, failureReason := k.StopReasons(obj)
	f := k.fields(s)
	*f.phase = k.failed
	*f.failureReason = failureReason
	*f.queuePosition = 0
	*f.completionTimestamp = &now
	switch {
	case k.queuedConditionGoes:
		meta.RemoveStatusCondition(f.conditions, conditionQueued)
	case meta.IsStatusConditionTrue(*f.conditions, conditionQueued):
		meta.SetStatusCondition(f.conditions, metav1.Condition{
			Type: conditionQueued, Status: metav1.ConditionFalse, Reason: reason,
			Message: message, ObservedGeneration: obj.GetGeneration(), LastTransitionTime: now,
		})
	}
	meta.SetStatusCondition(f.conditions, k.CancelledCondition(obj, message, now))
}

// AfterRun is the phase a run that went through every item goes to (DESIGN.md sections 1 and
// 9): WaitingForPluginOperations while async operations it started are waited for, else
// Finalizing; PartiallyFailed in either when something failed. Each kind's run says what
// waiting and partial mean for it (the run of internal/controller/backup, restoreEnding in
// internal/controller/restore).
func (k *RunKind[O, S, P]) AfterRun(waiting, partial bool) P {
	switch {
	case waiting && partial:
		return k.waitingForOperationsPartial
	case waiting:
		return k.waitingForOperations
	case partial:
		return k.finalizingPartial
	}
	return k.finalizing
}

// ToTenant is err as the status and events of obj may say it: for an object outside the
// operator's namespace (a team's) a location's problem names nothing of its configuration — no
// endpoint, bucket, path or Secret — and the details stay in the manager's log and the
// location's own status.
func ToTenant(obj client.Object, operatorNamespace, locationName string, err error) error {
	if err == nil || obj.GetNamespace() == operatorNamespace {
		return err
	}
	return errors.New(location.TenantMessage(locationName))
}
