package controller

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// messageNoDeletionInProgress is the DeletionFailed message of a backup found Deleting with no
// deletion running in this process: the process that ran it stopped.
const messageNoDeletionInProgress = "no deletion in progress (the operator restarted), retrying"

// deletionState is what a deletion goroutine reports through the deletions map.
type deletionState string

const (
	deletionRunning deletionState = "Deleting"
	deletionDone    deletionState = "Deleted"
	deletionFailed  deletionState = "DeletionFailed"
)

// deletionRecord is one backup's entry in the deletions map.
type deletionRecord struct {
	State   deletionState
	Message string
}

// newDeletions returns the in-memory map of the deletions this process runs, keyed by backup
// UID (Longhorn's inProgressDeletingMap): the goroutine that deletes a backup's data writes its
// outcome here, and the reconciler reads it. A backup in Deleting with no entry was being
// deleted by a process that is gone.
func newDeletions() *uidMap[deletionRecord] { return &uidMap[deletionRecord]{} }

// deletionStep is what the deletion reconciler does next with a backup being deleted.
type deletionStep string

const (
	// stepNone: not the deletion reconciler's business (yet).
	stepNone deletionStep = "None"
	// stepRelease: remove the finalizer; no data to remove, or the user keeps it.
	stepRelease deletionStep = "Release"
	// stepStart: phase Deleting, record it, start the goroutine.
	stepStart deletionStep = "Start"
	// stepWait: the goroutine runs; its end triggers the next reconcile.
	stepWait deletionStep = "Wait"
	// stepVerify: the goroutine reports success; check the store and remove the finalizer.
	stepVerify deletionStep = "Verify"
	// stepFail: phase DeletionFailed with the message, next attempt after the backoff.
	stepFail deletionStep = "Fail"
	// stepBackoff: DeletionFailed, the next attempt is not due yet.
	stepBackoff deletionStep = "Backoff"
)

// deletionInput is what nextDeletionStep decides on.
type deletionInput struct {
	Phase cairnv1.BackupPhase
	// Deleted: the backup has a deletion timestamp and still the data finalizer.
	Deleted bool
	// KeepData: the user set cairn.dev/keep-data: "true".
	KeepData bool
	// HasData: the backup started (status.startTimestamp), so it may have written data to its
	// location. One that never started wrote nothing, and its location may be the very reason.
	HasData bool
	// Record is this process's map entry for the backup, if any.
	Record *deletionRecord
	// NextAttempt is status.nextDeletionAttempt.
	NextAttempt *metav1.Time
	Now         time.Time
}

// nextDeletionStep is the deletion reconciler's decision (DESIGN.md section 6), and the
// message that goes with a failure.
func nextDeletionStep(in deletionInput) (deletionStep, string) {
	owned := in.Phase.IsTerminal() || in.Phase == cairnv1.BackupPhaseDeleting || in.Phase == cairnv1.BackupPhaseDeletionFailed
	switch {
	case !in.Deleted || !owned:
		return stepNone, "" // a running backup is cancelled by its phase's owner first
	case in.Record != nil && in.Record.State == deletionRunning:
		// Also when keep-data was set meanwhile, or the read is stale: the object must not go
		// while this process still deletes under its name.
		return stepWait, ""
	case in.KeepData:
		return stepRelease, ""
	case in.Phase.IsTerminal() && !in.HasData:
		return stepRelease, ""
	case in.Phase.IsTerminal():
		return stepStart, ""
	case in.Phase == cairnv1.BackupPhaseDeletionFailed:
		if in.NextAttempt != nil && in.Now.Before(in.NextAttempt.Time) {
			return stepBackoff, ""
		}
		return stepStart, ""
	}
	// Deleting.
	switch {
	case in.Record == nil:
		return stepFail, messageNoDeletionInProgress
	case in.Record.State == deletionRunning:
		return stepWait, ""
	case in.Record.State == deletionDone:
		return stepVerify, ""
	}
	return stepFail, in.Record.Message
}
