package queue

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/queue"
)

// Places in the line: joining it (New → Queued), leaving it for a slot (Queued →
// ReadyToStart), and the coalesced renumbering of those that stay, with the status writes
// that record each in the pass.

// staying is a backup or restore that stays queued after this pass, with its exact position
// and reason.
type staying struct {
	candidate
	position int32
	decision queue.Decision
	// failed: a write for it failed in this pass; it is not written again until the next.
	failed bool
}

// enqueue moves a valid New backup or restore to Queued at position.
func (r *Reconciler) enqueue(ctx context.Context, pass *queuePass, c candidate, position int32, d queue.Decision) error {
	reason, message := d.Reason, d.Message
	if d.Start {
		reason, message = cairnv1.ReasonEnqueued, "Queued; starting now"
	}
	now := metav1.NewTime(pass.now)
	if rs := c.restore; rs != nil {
		err := r.patchRestoreStatus(ctx, pass, rs, func(s *cairnv1.RestoreStatus) {
			s.Phase = cairnv1.RestorePhaseQueued
			s.QueuePosition = position
			s.BackupName = c.backupName
			setQueuedCondition(&s.Conditions, metav1.ConditionTrue, reason, message, rs.Generation, now)
		})
		return err
	}
	b := c.backup
	if err := addFinalizer(ctx, r.Client, b, cairnv1.BackupDataFinalizer); err != nil {
		return err
	}
	err := r.patchBackupStatus(ctx, pass, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseQueued
		s.QueuePosition = position
		s.StorageLocation = c.entry.Location
		setQueuedCondition(&s.Conditions, metav1.ConditionTrue, reason, message, b.Generation, now)
	})
	return err
}

// dequeue moves a Queued backup or restore to ReadyToStart.
func (r *Reconciler) dequeue(ctx context.Context, pass *queuePass, c candidate) error {
	now := metav1.NewTime(pass.now)
	// Condition times have one-second resolution, and so has the wait reported.
	message := "Dequeued without waiting"
	if q := c.queuedCondition(); q != nil && q.Status == metav1.ConditionTrue && q.Reason != cairnv1.ReasonEnqueued {
		message = fmt.Sprintf("Dequeued after waiting %s", pass.now.Sub(q.LastTransitionTime.Time).Round(time.Second))
	}
	var err error
	if rs := c.restore; rs != nil {
		err = r.patchRestoreStatus(ctx, pass, rs, func(s *cairnv1.RestoreStatus) {
			s.Phase = cairnv1.RestorePhaseReadyToStart
			s.QueuePosition = 0
			setQueuedCondition(&s.Conditions, metav1.ConditionFalse, cairnv1.ReasonDequeued, message, rs.Generation, now)
		})
	} else {
		b := c.backup
		err = r.patchBackupStatus(ctx, pass, b, func(s *cairnv1.BackupStatus) {
			s.Phase = cairnv1.BackupPhaseReadyToStart
			s.QueuePosition = 0
			setQueuedCondition(&s.Conditions, metav1.ConditionFalse, cairnv1.ReasonDequeued, message, b.Generation, now)
		})
	}
	if err == nil {
		r.Recorder.Eventf(c.object(), nil, corev1.EventTypeNormal, "Dequeued", "Dequeue", message)
	}
	return err
}

func maxPosition(waiting []candidate) int32 {
	var highest int32
	for _, c := range waiting {
		highest = max(highest, c.storedPosition())
	}
	return highest
}

// renumber writes the exact positions and wait reasons of the backups and restores that stay
// queued, once the queue has been still for renumberQuietPeriod (or renumberMaxDelay has
// passed since the last renumbering). Until then their stored positions may have gaps, but
// never the wrong order.
//
// Positions are written in queue order, and an entry moves only to a position above every
// position stored for the entries ahead of it: when one write fails, that entry keeps its old
// place, and those behind it wait rather than jump over it.
func (r *Reconciler) renumber(ctx context.Context, pass *queuePass, stay []staying) ctrl.Result {
	dirty := func(s staying) bool {
		return !s.isNew() && !s.failed && !upToDate(s)
	}
	toWrite := 0
	for _, s := range stay {
		if dirty(s) {
			toWrite++
		}
	}
	result := ctrl.Result{RequeueAfter: r.ResyncPeriod}
	if toWrite == 0 {
		r.staleSince = time.Time{}
		return result
	}
	due := r.lastChange.Add(renumberQuietPeriod)
	if !r.staleSince.IsZero() {
		if latest := r.staleSince.Add(renumberMaxDelay); latest.Before(due) {
			due = latest
		}
	}
	if wait := due.Sub(pass.now); wait > 0 {
		return ctrl.Result{RequeueAfter: min(wait, r.ResyncPeriod)}
	}
	writes := 0
	ahead := int32(0) // the highest position stored for an entry ahead
	for _, s := range stay {
		if dirty(s) && writes < renumberBatch && (s.position > ahead || s.position == s.storedPosition()) {
			writes++
			_ = pass.record(ctx, s.object(), r.writePosition(ctx, pass, s))
		}
		ahead = max(ahead, s.storedPosition())
	}
	if writes < toWrite {
		// Come back at once for the rest, after whatever events arrived meanwhile.
		return ctrl.Result{RequeueAfter: time.Millisecond}
	}
	r.staleSince = time.Time{}
	return result
}

// writePosition writes a staying entry's position and the reason it waits.
func (r *Reconciler) writePosition(ctx context.Context, pass *queuePass, s staying) error {
	now := metav1.NewTime(pass.now)
	if rs := s.restore; rs != nil {
		return r.patchRestoreStatus(ctx, pass, rs, func(st *cairnv1.RestoreStatus) {
			st.QueuePosition = s.position
			setQueuedCondition(&st.Conditions, metav1.ConditionTrue, s.decision.Reason, s.decision.Message, rs.Generation, now)
		})
	}
	b := s.backup
	return r.patchBackupStatus(ctx, pass, b, func(st *cairnv1.BackupStatus) {
		st.QueuePosition = s.position
		setQueuedCondition(&st.Conditions, metav1.ConditionTrue, s.decision.Reason, s.decision.Message, b.Generation, now)
	})
}

// upToDate reports whether a staying entry already shows its position and reason.
func upToDate(s staying) bool {
	if s.storedPosition() != s.position {
		return false
	}
	c := s.queuedCondition()
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == s.decision.Reason && c.Message == s.decision.Message
}

// setQueuedCondition sets the Queued condition (the same type on backups and restores).
func setQueuedCondition(conditions *[]metav1.Condition, status metav1.ConditionStatus, reason, message string, generation int64, now metav1.Time) {
	meta.SetStatusCondition(conditions, metav1.Condition{
		Type: cairnv1.BackupConditionQueued, Status: status, Reason: reason,
		Message: message, ObservedGeneration: generation, LastTransitionTime: now,
	})
}

// patchBackupStatus writes b's status (lifecycle.PatchBackupStatus) and records the write in
// the pass. When the write fails, b keeps the status it had, so the rest of the pass sees
// the backup as the API server does.
func (r *Reconciler) patchBackupStatus(ctx context.Context, pass *queuePass, b *cairnv1.Backup, mutate func(*cairnv1.BackupStatus)) error {
	old := b.Status.DeepCopy()
	if err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerQueue, b, mutate); err != nil {
		b.Status = *old
		if apierrors.IsNotFound(err) {
			return nil // gone meanwhile: its delete event brings another pass
		}
		return err
	}
	pass.wrote(b, old.Phase != b.Status.Phase)
	return nil
}

// patchRestoreStatus is patchBackupStatus for a restore.
func (r *Reconciler) patchRestoreStatus(ctx context.Context, pass *queuePass, rs *cairnv1.Restore, mutate func(*cairnv1.RestoreStatus)) error {
	oldPhase := rs.Status.Phase
	if err := lifecycle.PatchRestoreStatus(ctx, r.Client, r.Clock, phases.OwnerQueue, rs, mutate); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // gone meanwhile: its delete event brings another pass
		}
		return err
	}
	pass.wrote(rs, oldPhase != rs.Status.Phase)
	return nil
}
