package lifecycle

import (
	"fmt"
	"strings"
	"time"

	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/phases"
)

// CancelRequester says who asked a backup to stop and when, for its log: the field manager that
// set spec.cancel (kubectl patch is "kubectl-patch") and the time of that write, or the deletion
// time. The API server records the manager, not the user; the audit log has the user.
func CancelRequester(b *cairnv1.Backup) string {
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

// EndBeforeStart ends a cancelled or deleted object that has not started: Failed, out of the
// queue, Cancelled=True, and a Cancelled event. owner is the reconciler that owns its phase (the
// queue for New and Queued, the run's owner for ReadyToStart).
func (k *RunKind[O, S, P]) EndBeforeStart(ctx context.Context, c client.Client, clk clock.PassiveClock, rec events.EventRecorder, owner phases.Owner, obj O) error {
	_, failureReason := k.StopReasons(obj)
	condition, message := k.beforeStartMessages(failureReason)
	now := metav1.NewTime(clk.Now())
	if err := PatchStatus(ctx, c, clk, k, owner, obj, func(s *S) { k.CancelledStatus(obj, s, condition, now) }); err != nil {
		return client.IgnoreNotFound(err)
	}
	rec.Eventf(obj, nil, corev1.EventTypeNormal, "Cancelled", "Cancel", "%s", message)
	return nil
}
