// Package readiness decides the conditions that kstatus-based tools read (Ready, Reconciling,
// Stalled) from the phase of a Backup, Restore, Schedule or BackupStorageLocation. It decides
// only: the readiness reconciler (internal/controller) fetches and writes.
package readiness

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// Conditions are the kstatus conditions an object should carry: Ready always; Reconciling and
// Stalled only when True, as kstatus's "abnormal-true" convention has it (nil: absent).
type Conditions struct {
	Ready       metav1.Condition
	Reconciling *metav1.Condition
	Stalled     *metav1.Condition
}

// state is what the phase says, before it is made into conditions.
type state int

const (
	working state = iota // Reconciling
	ready                // Ready
	stalled              // Stalled
	idle                 // none of them: Ready=False, nothing going on (a paused schedule)
)

// build makes the conditions of an object in phase reason, observed at generation.
func build(s state, reason, message string, generation int64) Conditions {
	cond := func(t string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: t, Status: status, Reason: reason, Message: message, ObservedGeneration: generation}
	}
	c := Conditions{Ready: cond(cairnv1.ConditionReady, metav1.ConditionFalse)}
	switch s {
	case ready:
		c.Ready.Status = metav1.ConditionTrue
	case working:
		r := cond(cairnv1.ConditionReconciling, metav1.ConditionTrue)
		c.Reconciling = &r
	case stalled:
		st := cond(cairnv1.ConditionStalled, metav1.ConditionTrue)
		c.Stalled = &st
	}
	return c
}

// Backup is what a backup's phase says: Ready when Completed; Stalled when it ended otherwise;
// Reconciling while it runs or is being deleted.
func Backup(b *cairnv1.Backup) Conditions {
	phase := b.EffectivePhase()
	s, message := working, ""
	switch phase {
	case cairnv1.BackupPhaseNew:
		message = "waiting to be validated and queued"
	case cairnv1.BackupPhaseQueued:
		message = queuedMessage
	case cairnv1.BackupPhaseReadyToStart:
		message = "dequeued: starting"
	case cairnv1.BackupPhaseInProgress:
		message = "backing up items"
	case cairnv1.BackupPhaseWaitingForPluginOperations, cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed:
		message = "waiting for asynchronous plugin operations (such as volume snapshots)"
	case cairnv1.BackupPhaseFinalizing, cairnv1.BackupPhaseFinalizingPartiallyFailed:
		message = "writing the backup's last items and metadata"
	case cairnv1.BackupPhaseFinalizingCancelled:
		message = "cancelled: removing its data"
	case cairnv1.BackupPhaseFinalizingFailed:
		message = "failed: removing its partial data: " + b.Status.FailureReason
	case cairnv1.BackupPhaseCompleted:
		s, message = ready, "completed: "+itemsMessage(b.Status.Progress)
	case cairnv1.BackupPhasePartiallyFailed:
		s, message = stalled, fmt.Sprintf("completed with %d errors and %d warnings: restorable, but some items are missing (see its log)", b.Status.Errors, b.Status.Warnings)
	case cairnv1.BackupPhaseFailed:
		s, message = stalled, b.Status.FailureReason
	case cairnv1.BackupPhaseFailedValidation:
		s, message = stalled, strings.Join(b.Status.ValidationErrors, "; ")
	case cairnv1.BackupPhaseDeleting:
		message = "deleting its data"
		if exp := b.Status.Expiration; exp != nil && b.DeletionTimestamp != nil && !b.DeletionTimestamp.Before(exp) {
			// Deleted at or after its expiration: how the GC deletes, and the why of this phase.
			message = fmt.Sprintf("the backup expired at %s: deleting its data", exp.UTC().Format(time.RFC3339))
		}
	case cairnv1.BackupPhaseDeletionFailed:
		message = fmt.Sprintf("attempt %d to delete its data failed: %s", b.Status.DeletionAttempts, b.Status.LastDeletionError)
		if next := b.Status.NextDeletionAttempt; next != nil {
			message += "; next attempt at " + next.UTC().Format(time.RFC3339)
		}
	}
	return build(s, string(phase), message, b.Generation)
}

// Restore is what a restore's phase says: Ready when Completed; Stalled when it ended
// otherwise; Reconciling while it runs.
func Restore(rs *cairnv1.Restore) Conditions {
	phase := rs.EffectivePhase()
	s, message := working, ""
	switch phase {
	case cairnv1.RestorePhaseNew:
		message = "waiting to be validated and queued"
	case cairnv1.RestorePhaseQueued:
		message = queuedMessage
	case cairnv1.RestorePhaseReadyToStart:
		message = "dequeued: starting"
	case cairnv1.RestorePhaseInProgress:
		message = "restoring items"
	case cairnv1.RestorePhaseWaitingForPluginOperations, cairnv1.RestorePhaseWaitingForPluginOperationsPartiallyFailed:
		message = "waiting for asynchronous plugin operations (such as volumes restored from snapshots)"
	case cairnv1.RestorePhaseFinalizing, cairnv1.RestorePhaseFinalizingPartiallyFailed:
		message = "writing the restore's results"
	case cairnv1.RestorePhaseFinalizingCancelled:
		message = "cancelled: writing the restore's results"
	case cairnv1.RestorePhaseCompleted:
		s, message = ready, fmt.Sprintf("completed: %s, %d warnings", restoredMessage(rs.Status.Progress), rs.Status.Warnings)
	case cairnv1.RestorePhasePartiallyFailed:
		s, message = stalled, fmt.Sprintf("completed with %d errors and %d warnings (see its results)", rs.Status.Errors, rs.Status.Warnings)
	case cairnv1.RestorePhaseFailed:
		s, message = stalled, rs.Status.FailureReason
	case cairnv1.RestorePhaseFailedValidation:
		s, message = stalled, strings.Join(rs.Status.ValidationErrors, "; ")
	}
	return build(s, string(phase), message, rs.Generation)
}

// Schedule is what a schedule's phase says: Ready when Enabled; Stalled when it failed
// validation; neither when paused; Reconciling while its reconciler has not seen its latest
// spec. Its conditions observe the generation the schedule reconciler last observed.
func Schedule(sc *cairnv1.Schedule) Conditions {
	phase := sc.EffectivePhase()
	observed := sc.Status.ObservedGeneration
	if observed < sc.Generation {
		return build(working, cairnv1.ReasonProgressing, "the schedule's latest spec has not been read yet", observed)
	}
	switch phase {
	case cairnv1.SchedulePhaseEnabled:
		return build(ready, string(phase), "enabled: it makes backups on its schedule", observed)
	case cairnv1.SchedulePhasePaused:
		return build(idle, string(phase), "paused: it makes no backups", observed)
	case cairnv1.SchedulePhaseFailedValidation:
		return build(stalled, string(phase), strings.Join(sc.Status.ValidationErrors, "; "), observed)
	}
	return build(working, string(phase), "waiting to be validated", observed)
}

// StorageLocation is what a location's phase says: Ready when Available; Stalled when
// Unavailable (it is checked again, but usually needs a person: credentials, a bucket);
// Reconciling until it is first checked.
func StorageLocation(l *cairnv1.BackupStorageLocation) Conditions {
	switch l.Status.Phase {
	case cairnv1.StorageLocationPhaseAvailable:
		return build(ready, string(l.Status.Phase), "available", l.Generation)
	case cairnv1.StorageLocationPhaseUnavailable:
		return build(stalled, string(l.Status.Phase), l.Status.Message, l.Generation)
	}
	return build(working, "NotValidated", "not checked yet", l.Generation)
}

// Apply makes conditions carry c: Ready set, Reconciling and Stalled set or removed. A
// condition whose status changes gets now as its lastTransitionTime. It reports whether
// anything changed (and so must be written).
func Apply(conditions *[]metav1.Condition, c Conditions, now time.Time) bool {
	changed := false
	set := func(t string, cond *metav1.Condition) {
		if cond == nil {
			changed = meta.RemoveStatusCondition(conditions, t) || changed
			return
		}
		cond.LastTransitionTime = metav1.NewTime(now)
		changed = meta.SetStatusCondition(conditions, *cond) || changed
	}
	set(cairnv1.ConditionReady, &c.Ready)
	set(cairnv1.ConditionReconciling, c.Reconciling)
	set(cairnv1.ConditionStalled, c.Stalled)
	return changed
}

// queuedMessage is the same for every queued backup and restore, so that the queue's
// renumbering does not rewrite the conditions of everything behind.
const queuedMessage = "waiting in the queue (status.queuePosition and the Queued condition say where and why)"

func itemsMessage(p *cairnv1.BackupProgress) string {
	if p == nil {
		return "no items"
	}
	return fmt.Sprintf("%d of %d items backed up", p.ItemsBackedUp, p.TotalItems)
}

func restoredMessage(p *cairnv1.RestoreProgress) string {
	if p == nil {
		return "no items"
	}
	return fmt.Sprintf("%d of %d items restored", p.ItemsRestored, p.TotalItems)
}
