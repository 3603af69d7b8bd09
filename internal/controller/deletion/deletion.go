// Package deletion removes the data of deleted backups: the deletion reconciler, owner of
// Deleting and DeletionFailed (DESIGN.md sections 1 and 6). Its decisions (nextDeletionStep,
// RemovingData) are pure functions of the backup and of what this process remembers of its
// deletions; RemovingData is also the queue's deletion lock on a location (DESIGN.md section 3).
package deletion

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
)

// messageNoDeletionInProgress is the DeletionFailed message of a backup found Deleting with no
// deletion running in this process: the process that ran it stopped.
const messageNoDeletionInProgress = "no deletion in progress (the operator restarted), retrying"

// deletionState is what a deletion goroutine reports through the deletions map.
type deletionState string

const (
	// deletionWaiting: handed to the slots, waiting for a running deletion to end.
	deletionWaiting deletionState = "Waiting"
	deletionRunning deletionState = "Deleting"
	deletionDone    deletionState = "Deleted"
	deletionFailed  deletionState = "DeletionFailed"
)

// deletionRecord is one backup's entry in the deletions map.
type deletionRecord struct {
	State   deletionState
	Message string
	// Since is when the deletion was handed to the slots.
	Since time.Time
	// Shown: the backup's phase says Deleting (written when the deletion started, or once it
	// ran for deletingShownAfter).
	Shown bool
	// RetainedUntil: the deletion failed because Object Lock keeps the backup's objects until
	// then (storage.RetainedError); zero for any other outcome.
	RetainedUntil time.Time
}

// retainedRetryMargin is how long after its objects' retain-until date a locked backup's
// deletion is retried: the storage service decides by its own clock.
const retainedRetryMargin = 5 * time.Second

// nextDeletionAttempt is when a failed deletion is tried again: after the backoff, or, for a
// backup whose objects Object Lock keeps until retainedUntil, just after that date: not every
// minute until then, since no attempt before it can succeed.
func nextDeletionAttempt(backoff, retainedUntil time.Time) time.Time {
	if retainedUntil.IsZero() {
		return backoff
	}
	return retainedUntil.Add(retainedRetryMargin)
}

// deletingShownAfter is how long a backup's first deletion runs before its phase is set to
// Deleting. Most deletions end well within it (a few storage calls), and the object simply
// goes: a Deleting status and its event would be two more writes to the API server for each
// of a schedule's backups expiring together, for a phase nobody would see. One that takes
// longer (a big backup, a slow or stalled location) shows Deleting from then on; a failure is
// DeletionFailed at once. docs/architecture.md ("Deleting is shown after a second") says why
// this departs from DESIGN.md section 6.
const deletingShownAfter = time.Second

// pending reports whether this process will still delete under the backup's name: its
// deletion runs or waits for a slot.
func (r deletionRecord) pending() bool {
	return r.State == deletionWaiting || r.State == deletionRunning
}

// newDeletions returns the in-memory map of the deletions this process runs, keyed by backup
// UID (Longhorn's inProgressDeletingMap): the goroutine that deletes a backup's data writes its
// outcome here, and the reconciler reads it. A backup in Deleting with no entry was being
// deleted by a process that is gone.
func newDeletions() *lifecycle.UIDMap[deletionRecord] { return &lifecycle.UIDMap[deletionRecord]{} }

// deletionStep is what the deletion reconciler does next with a backup being deleted.
type deletionStep string

const (
	// stepNone: not the deletion reconciler's business (yet).
	stepNone deletionStep = "None"
	// stepRelease: remove the finalizer; no data to remove, or the user keeps it.
	stepRelease deletionStep = "Release"
	// stepStart: record the deletion and start the goroutine; the phase stays as it is
	// until the deletion has run for deletingShownAfter.
	stepStart deletionStep = "Start"
	// stepStartDeleting: phase Deleting first, then as stepStart: a retry after
	// DeletionFailed, or a deletion that waited for a restore (the user watches it).
	stepStartDeleting deletionStep = "StartDeleting"
	// stepShowDeleting: the first deletion has run for deletingShownAfter: phase Deleting.
	stepShowDeleting deletionStep = "ShowDeleting"
	// stepWait: the goroutine runs or waits for a slot; its end triggers the next reconcile.
	stepWait deletionStep = "Wait"
	// stepWithdraw: keep-data was set while the deletion still waits for a slot: take it out
	// of the line and remove the finalizer without touching storage.
	stepWithdraw deletionStep = "Withdraw"
	// stepVerify: the goroutine reports success; check the store and remove the finalizer.
	stepVerify deletionStep = "Verify"
	// stepFail: phase DeletionFailed with the message, next attempt after the backoff.
	stepFail deletionStep = "Fail"
	// stepBackoff: DeletionFailed, the next attempt is not due yet.
	stepBackoff deletionStep = "Backoff"
	// stepWaitForRestore: a restore that has not ended reads the backup; it stays where it is
	// (condition DeletionBlocked) until that restore ends.
	stepWaitForRestore deletionStep = "WaitForRestore"
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
	// DataMissing: sync from storage found the backup's commit marker gone from its location
	// (DataAvailable=False): deleting it needs no storage call.
	DataMissing bool
	// Record is this process's map entry for the backup, if any.
	Record *deletionRecord
	// NextAttempt is status.nextDeletionAttempt.
	NextAttempt *metav1.Time
	// ReadBy is the name of a restore that has not ended and reads the backup; "" when none.
	ReadBy string
	// Blocked: the backup's DeletionBlocked condition is True (it waited for a restore).
	Blocked bool
	Now     time.Time
}

// nextDeletionStep is the deletion reconciler's decision (DESIGN.md section 6), and the
// message that goes with a failure or a wait for a restore. A backup that a restore still
// reads is not deleted (DESIGN.md section 9): keep-data, or a backup that never started
// (nothing to read, nothing to delete), still lets the object go, since neither touches
// storage; a backup already Deleting or DeletionFailed can have no new reader, since a
// restore of a backup being deleted fails validation. A terminal backup's first deletion
// shows Deleting only once it has run for deletingShownAfter.
func nextDeletionStep(in deletionInput) (deletionStep, string) {
	owned := in.Phase.IsTerminal() || in.Phase == cairnv1.BackupPhaseDeleting || in.Phase == cairnv1.BackupPhaseDeletionFailed
	rec := in.Record
	switch {
	case !in.Deleted || !owned:
		return stepNone, "" // a running backup is cancelled by its phase's owner first
	case rec != nil && rec.State == deletionWaiting && in.KeepData:
		return stepWithdraw, ""
	case rec != nil && rec.pending() && in.Phase.IsTerminal() && !rec.Shown && !in.Now.Before(rec.Since.Add(deletingShownAfter)):
		return stepShowDeleting, ""
	case rec != nil && rec.pending():
		// Also when keep-data was set once the deletion started, or the read is stale: the
		// object must not go while this process still deletes under its name.
		return stepWait, ""
	case rec != nil && rec.State == deletionDone:
		return stepVerify, ""
	case rec != nil && rec.State == deletionFailed:
		return stepFail, rec.Message
	case in.KeepData:
		return stepRelease, ""
	case in.Phase.IsTerminal() && (!in.HasData || in.DataMissing):
		return stepRelease, ""
	case in.Phase.IsTerminal() && in.ReadBy != "":
		return stepWaitForRestore, fmt.Sprintf("waiting for restore %s to end before deleting", in.ReadBy)
	case in.Phase.IsTerminal() && in.Blocked:
		return stepStartDeleting, ""
	case in.Phase.IsTerminal():
		return stepStart, ""
	case in.Phase == cairnv1.BackupPhaseDeletionFailed:
		if in.NextAttempt != nil && in.Now.Before(in.NextAttempt.Time) {
			return stepBackoff, ""
		}
		return stepStartDeleting, ""
	}
	// Deleting, and this process runs no deletion of it.
	return stepFail, messageNoDeletionInProgress
}

// RemovingData reports whether a backup's data may be being removed from its location, which
// holds the queue's deletion lock on that location (DESIGN.md section 3): Deleting, or a
// terminal backup with a deletion timestamp and the data finalizer, whose first deletion shows
// Deleting only after deletingShownAfter. Not when nothing of it is removed: it never started,
// keeps its data, its data is already missing, or it waits for a restore.
func RemovingData(b *cairnv1.Backup) bool {
	in := deletionInputOf(b, time.Time{})
	return in.Phase == cairnv1.BackupPhaseDeleting ||
		in.Phase.IsTerminal() && in.Deleted && in.HasData && !in.KeepData && !in.DataMissing && !in.Blocked
}

// deletionInputOf is what the backup itself says for nextDeletionStep, at now; the deletion
// record and the restore reading it are the reconciler's to add.
func deletionInputOf(b *cairnv1.Backup, now time.Time) deletionInput {
	_, dataMissing := backupsync.DataMissing(b)
	return deletionInput{
		Phase:   b.Status.Phase,
		Deleted: b.DeletionTimestamp != nil && controllerutil.ContainsFinalizer(b, cairnv1.BackupDataFinalizer),
		// A backup synced from a Velero location keeps its data: Cairn never changes Velero's bucket.
		KeepData:    b.Annotations[cairnv1.KeepDataAnnotation] == "true" || b.IsFromVelero(),
		HasData:     b.Status.StartTimestamp != nil,
		DataMissing: dataMissing, // sync from storage: the data is gone, nothing to delete
		NextAttempt: b.Status.NextDeletionAttempt,
		Blocked:     meta.IsStatusConditionTrue(b.Status.Conditions, cairnv1.BackupConditionDeletionBlocked),
		Now:         now,
	}
}

// deletionWait is how long a backup whose deletion runs (stepWait) waits before the next
// reconcile, should the goroutine's end not bring it first: until its phase is to show
// Deleting, or deletionSafetyRequeue.
func deletionWait(in deletionInput) time.Duration {
	if rec := in.Record; rec != nil && in.Phase.IsTerminal() && !rec.Shown {
		return max(rec.Since.Add(deletingShownAfter).Sub(in.Now), time.Millisecond)
	}
	return deletionSafetyRequeue
}

// restoreReads reports whether restore rs (of the backup's namespace) reads backup b: the
// backup it resolved to (status.backupName), or before that the one it names, or any backup
// of the schedule it names (the queue has not yet resolved which).
func restoreReads(rs *cairnv1.Restore, b *cairnv1.Backup) bool {
	switch {
	case rs.Namespace != b.Namespace:
		return false
	case rs.Status.BackupName != "":
		return rs.Status.BackupName == b.Name
	case rs.Spec.BackupName != "":
		return rs.Spec.BackupName == b.Name
	}
	return rs.Spec.ScheduleName != "" && b.Labels[cairnv1.ScheduleNameLabel] == rs.Spec.ScheduleName
}

// readingRestore is the name of the first restore, by name, that has not ended and reads b;
// "" when none does.
func readingRestore(restores []cairnv1.Restore, b *cairnv1.Backup) string {
	first := ""
	for i := range restores {
		rs := &restores[i]
		if !rs.EffectivePhase().IsTerminal() && restoreReads(rs, b) && (first == "" || rs.Name < first) {
			first = rs.Name
		}
	}
	return first
}

// DefaultConcurrentDeletions is how many backups' data are deleted at once, at most: a burst of
// deletions (a namespace of backups deleted at once, a schedule's backups expiring together)
// neither starts a goroutine per backup nor floods the storage service. Each deletion is a few
// small storage calls and one API LIST (its VolumeSnapshots), mostly waiting: 32 at once keep
// 200 expiring backups within about two seconds (docs/benchmarks.md, "Expiry"), far below what
// an S3 service allows on one prefix.
const DefaultConcurrentDeletions = 32

// deletionSlots runs at most limit deletions at once. The others wait in line, first come first
// served, and start as running ones end; waiting costs a list entry, not a goroutine, and
// submitting never blocks the reconciler. A waiting deletion is recorded as waiting (the
// backup is Deleting; keep-data takes it out of the line). The line lives in memory: the
// waiting backups are already Deleting, so after a restart they are found with no record and
// retried like any interrupted deletion. Safe for concurrent use.
type deletionSlots struct {
	limit int
	// run deletes one backup's data and reports the outcome; it must not panic.
	run func(ctx context.Context, b *cairnv1.Backup)

	mu      sync.Mutex
	running int
	waiting []queuedDeletion
}

// queuedDeletion is a deletion waiting for a slot.
type queuedDeletion struct {
	ctx    context.Context
	backup *cairnv1.Backup
}

// submit starts the backup's deletion now if a slot is free (true), or puts it in line.
func (s *deletionSlots) submit(ctx context.Context, b *cairnv1.Backup) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running >= s.limit {
		s.waiting = append(s.waiting, queuedDeletion{ctx: ctx, backup: b})
		return false
	}
	s.running++
	go s.drain(queuedDeletion{ctx: ctx, backup: b})
	return true
}

// drain runs the deletion, then the waiting ones, until none is left; it holds one slot.
func (s *deletionSlots) drain(d queuedDeletion) {
	for ok := true; ok; d, ok = s.next() {
		s.run(d.ctx, d.backup)
	}
}

// next takes the first waiting deletion whose manager still runs, or frees the caller's slot.
func (s *deletionSlots) next() (queuedDeletion, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.waiting) > 0 {
		d := s.waiting[0]
		s.waiting[0] = queuedDeletion{}
		s.waiting = s.waiting[1:]
		if d.ctx.Err() == nil {
			return d, true
		}
	}
	s.running--
	return queuedDeletion{}, false
}

// withdraw takes a waiting deletion out of the line; false when it is not there (it started).
func (s *deletionSlots) withdraw(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, d := range s.waiting {
		if d.backup.UID == uid {
			s.waiting = slices.Delete(s.waiting, i, i+1)
			return true
		}
	}
	return false
}
