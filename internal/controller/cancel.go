package controller

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// Why a backup was stopped, as reasons of its Cancelled condition and its log.
const (
	// failureReasonDeleted is the failureReason of a backup deleted before it finished.
	failureReasonDeleted = "Backup deleted by user"
)

// cancellation says whether a backup was asked to stop, by spec.cancel or by its deletion, and
// why: the condition reason and the failureReason it ends with. Every owner of a non-terminal
// phase asks this one function.
func cancellation(b *cairnv1.Backup) (reason, failureReason string, ok bool) {
	switch {
	case b.Spec.Cancel:
		return cairnv1.ReasonCancelledByUser, cairnv1.FailureReasonCancelled, true
	case b.DeletionTimestamp != nil:
		return cairnv1.ReasonBackupDeleted, failureReasonDeleted, true
	}
	return "", "", false
}

// cancelRequester says who asked a backup to stop and when, for its log: the field manager that
// set spec.cancel (kubectl patch is "kubectl-patch") and the time of that write, or the deletion
// time. The API server records the manager, not the user; the audit log has the user.
func cancelRequester(b *cairnv1.Backup) string {
	if !b.Spec.Cancel && b.DeletionTimestamp != nil {
		return "deletion of the Backup at " + b.DeletionTimestamp.UTC().Format(time.RFC3339)
	}
	for _, mf := range b.ManagedFields {
		if mf.FieldsV1 == nil || !strings.Contains(mf.FieldsV1.GetRawString(), `"f:cancel"`) {
			continue
		}
		when := "an unknown time"
		if mf.Time != nil {
			when = mf.Time.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("field manager %q at %s", mf.Manager, when)
	}
	return "spec.cancel (the field manager is not recorded)"
}

// cancelledStatus is the end of every cancelled backup: Failed with its failureReason, out of
// the queue, condition Cancelled=True.
func cancelledStatus(s *cairnv1.BackupStatus, generation int64, reason, failureReason, message string, now metav1.Time) {
	s.Phase = cairnv1.BackupPhaseFailed
	s.FailureReason = failureReason
	s.QueuePosition = 0
	s.CompletionTimestamp = &now
	if meta.IsStatusConditionTrue(s.Conditions, cairnv1.BackupConditionQueued) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: cairnv1.BackupConditionQueued, Status: metav1.ConditionFalse, Reason: reason,
			Message: message, ObservedGeneration: generation, LastTransitionTime: now,
		})
	}
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: cairnv1.BackupConditionCancelled, Status: metav1.ConditionTrue, Reason: reason,
		Message: message, ObservedGeneration: generation, LastTransitionTime: now,
	})
}
