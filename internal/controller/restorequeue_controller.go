package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/queue"
	"github.com/cairn-backup/cairn/internal/restore"
)

// restoreQueueRequest is the one request of the restore queue: every restore event triggers a
// pass over all restores.
var restoreQueueRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "restore-queue"}}

// failureReasonRestoreDeleted is the failureReason of a restore deleted before it finished.
const failureReasonRestoreDeleted = "Restore deleted before it finished"

// RestoreQueueReconciler is the queue of restores (DESIGN.md section 9). It owns "", New and
// Queued restores: it adds the restore-data finalizer, validates a new restore
// (restore.Validate: filters, tenancy, mapping, backup, location) → FailedValidation or Queued
// with a position; and moves Queued restores to ReadyToStart in their order while fewer than
// --concurrent-restores are ReadyToStart or InProgress. A cancelled or deleted restore in its
// phases → Failed. Like the backup queue it runs one pass at a time and derives everything
// from the API, so a restart loses nothing. (The next step joins it with the backup queue,
// for the overlap rule across kinds.)
type RestoreQueueReconciler struct {
	client.Client
	Namespace          string
	ConcurrentRestores int
	ResyncPeriod       time.Duration
	Clock              clock.Clock
	Recorder           events.EventRecorder
	Gate               interface {
		Wait(ctx context.Context) error
	}
}

// +kubebuilder:rbac:groups=cairn.dev,resources=restores,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=restores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=restores/finalizers,verbs=update

// Reconcile runs one pass of the restore queue.
func (r *RestoreQueueReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	if err := r.Gate.Wait(ctx); err != nil {
		return ctrl.Result{}, err
	}
	var list cairnv1.RestoreList
	if err := r.List(ctx, &list); err != nil {
		return ctrl.Result{}, err
	}
	restores := list.Items
	sort.Slice(restores, func(i, j int) bool {
		a, b := &restores[i], &restores[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	var errs []error
	last := int32(0)
	for i := range restores {
		if rs := &restores[i]; rs.Status.Phase == cairnv1.RestorePhaseQueued && rs.Status.QueuePosition > last {
			last = rs.Status.QueuePosition
		}
	}
	for i := range restores {
		rs := &restores[i]
		switch rs.EffectivePhase() {
		case cairnv1.RestorePhaseNew:
			if err := r.admit(ctx, rs, &last); err != nil {
				errs = append(errs, err)
			}
		case cairnv1.RestorePhaseQueued:
			if _, ok := restoreCancellation(rs); ok {
				if err := r.cancel(ctx, rs); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	errs = append(errs, r.dequeue(ctx, restores)...)
	resync := r.ResyncPeriod
	if resync <= 0 {
		resync = DefaultQueueResyncPeriod
	}
	return ctrl.Result{RequeueAfter: resync}, errors.Join(errs...)
}

// admit handles a new restore: the finalizer, then cancel → Failed, validation →
// FailedValidation, else Queued at the end of the line.
func (r *RestoreQueueReconciler) admit(ctx context.Context, rs *cairnv1.Restore, last *int32) error {
	if rs.DeletionTimestamp == nil && !controllerutil.ContainsFinalizer(rs, cairnv1.RestoreDataFinalizer) {
		controllerutil.AddFinalizer(rs, cairnv1.RestoreDataFinalizer)
		if err := r.Update(ctx, rs); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	if _, ok := restoreCancellation(rs); ok {
		return r.cancel(ctx, rs)
	}
	facts, backupName, err := restoreValidationFacts(ctx, r.Client, r.Namespace, rs)
	if err != nil {
		return err
	}
	now := metav1.NewTime(r.Clock.Now())
	if problems := restore.Validate(rs, r.Namespace, facts); len(problems) > 0 {
		problems = queue.CapValidationErrors(problems)
		r.Recorder.Eventf(rs, nil, corev1.EventTypeWarning, "FailedValidation", "Validate", "Restore failed validation: %s", problems[0])
		return client.IgnoreNotFound(patchRestoreStatus(ctx, r.Client, r.Clock, rs, func(s *cairnv1.RestoreStatus) {
			s.Phase = cairnv1.RestorePhaseFailedValidation
			s.BackupName = backupName
			s.ValidationErrors = problems
			s.CompletionTimestamp = &now
		}))
	}
	*last++
	position := *last
	err = patchRestoreStatus(ctx, r.Client, r.Clock, rs, func(s *cairnv1.RestoreStatus) {
		s.Phase = cairnv1.RestorePhaseQueued
		s.BackupName = backupName
		s.QueuePosition = position
	})
	if err != nil {
		*last--
		return client.IgnoreNotFound(err)
	}
	r.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "Queued", "Enqueue", "Restore of backup %s queued at position %d", backupName, position)
	return nil
}

// cancel ends a cancelled or deleted restore that has not started: Failed, nothing done.
func (r *RestoreQueueReconciler) cancel(ctx context.Context, rs *cairnv1.Restore) error {
	return endRestoreBeforeStart(ctx, r.Client, r.Clock, r.Recorder, rs)
}

// dequeue moves Queued restores, in position order, to ReadyToStart while a slot is free, and
// renumbers the rest 1..n with a Queued condition saying what they wait for.
func (r *RestoreQueueReconciler) dequeue(ctx context.Context, restores []cairnv1.Restore) []error {
	running := 0
	var runningName string
	var queued []*cairnv1.Restore
	for i := range restores {
		rs := &restores[i]
		switch rs.Status.Phase {
		case cairnv1.RestorePhaseReadyToStart, cairnv1.RestorePhaseInProgress:
			running++
			runningName = objectName(rs)
		case cairnv1.RestorePhaseQueued:
			queued = append(queued, rs)
		}
	}
	sort.SliceStable(queued, func(i, j int) bool { return queued[i].Status.QueuePosition < queued[j].Status.QueuePosition })
	limit := max(r.ConcurrentRestores, 1)
	var errs []error
	position := int32(0)
	now := metav1.NewTime(r.Clock.Now())
	for _, rs := range queued {
		if running < limit {
			err := patchRestoreStatus(ctx, r.Client, r.Clock, rs, func(s *cairnv1.RestoreStatus) {
				s.Phase = cairnv1.RestorePhaseReadyToStart
				s.QueuePosition = 0
				meta.SetStatusCondition(&s.Conditions, metav1.Condition{
					Type: cairnv1.RestoreConditionQueued, Status: metav1.ConditionFalse, Reason: cairnv1.ReasonDequeued,
					Message: "Dequeued: a restore slot is free", ObservedGeneration: rs.Generation, LastTransitionTime: now,
				})
			})
			if err == nil {
				running++
				runningName = objectName(rs)
				continue
			}
			errs = append(errs, client.IgnoreNotFound(err))
		}
		position++
		message := fmt.Sprintf("waiting for restore %s to finish (%d of %d restore slots taken)", runningName, running, limit)
		if rs.Status.QueuePosition == position && hasConditionMessage(rs.Status.Conditions, cairnv1.RestoreConditionQueued, message) {
			continue
		}
		p := position
		err := patchRestoreStatus(ctx, r.Client, r.Clock, rs, func(s *cairnv1.RestoreStatus) {
			s.QueuePosition = p
			meta.SetStatusCondition(&s.Conditions, metav1.Condition{
				Type: cairnv1.RestoreConditionQueued, Status: metav1.ConditionTrue, Reason: cairnv1.ReasonWaitingForConcurrencySlot,
				Message: message, ObservedGeneration: rs.Generation, LastTransitionTime: now,
			})
		})
		if err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
		}
	}
	return errs
}

func hasConditionMessage(conditions []metav1.Condition, condType, message string) bool {
	c := meta.FindStatusCondition(conditions, condType)
	return c != nil && c.Message == message
}

// restoreValidationFacts fetches what restore.Validate needs: the restore's backup (by name,
// or the newest Completed one of its schedule) and the storage locations. backupName is the
// backup the restore reads ("" when a schedule has none).
func restoreValidationFacts(ctx context.Context, c client.Reader, operatorNamespace string, rs *cairnv1.Restore) (facts restore.ValidationFacts, backupName string, err error) {
	if rs.Spec.ScheduleName != "" {
		var backups cairnv1.BackupList
		if err := c.List(ctx, &backups, client.InNamespace(rs.Namespace), client.MatchingLabels{restore.ScheduleNameLabel: rs.Spec.ScheduleName}); err != nil {
			return facts, "", err
		}
		facts.Backup = restore.NewestScheduleBackup(backups.Items)
	} else {
		var b cairnv1.Backup
		err := c.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: rs.Spec.BackupName}, &b)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return facts, "", err
		default:
			facts.Backup = &b
		}
	}
	if facts.Backup != nil {
		backupName = facts.Backup.Name
	} else {
		backupName = rs.Spec.BackupName
	}
	var locations cairnv1.BackupStorageLocationList
	if err := c.List(ctx, &locations, client.InNamespace(operatorNamespace)); err != nil {
		return facts, "", err
	}
	facts.Locations = locations.Items
	return facts, backupName, nil
}

// restoreCancellation says whether a restore must stop, and the failureReason: spec.cancel,
// or a deletion.
func restoreCancellation(rs *cairnv1.Restore) (failureReason string, ok bool) {
	switch {
	case rs.Spec.Cancel:
		return cairnv1.FailureReasonRestoreCancelled, true
	case rs.DeletionTimestamp != nil:
		return failureReasonRestoreDeleted, true
	}
	return "", false
}

// endRestoreBeforeStart ends a cancelled or deleted restore that has not started: Failed.
func endRestoreBeforeStart(ctx context.Context, c client.Client, clk clock.Clock, rec events.EventRecorder, rs *cairnv1.Restore) error {
	failureReason, _ := restoreCancellation(rs)
	now := metav1.NewTime(clk.Now())
	err := patchRestoreStatus(ctx, c, clk, rs, func(s *cairnv1.RestoreStatus) {
		s.Phase = cairnv1.RestorePhaseFailed
		s.FailureReason = failureReason
		s.QueuePosition = 0
		s.CompletionTimestamp = &now
		meta.RemoveStatusCondition(&s.Conditions, cairnv1.RestoreConditionQueued)
	})
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	rec.Eventf(rs, nil, corev1.EventTypeNormal, "Cancelled", "Cancel", "%s before it started: nothing was restored", failureReason)
	return nil
}

// restoreQueueTrigger passes the restore events that can change the queue: creations and
// deletions, phase changes, a cancel, a deletion request, and any update of a New restore (not
// a running restore's progress).
func restoreQueueTrigger() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*cairnv1.Restore)
			cur, ok2 := e.ObjectNew.(*cairnv1.Restore)
			if !ok1 || !ok2 {
				return false
			}
			return old.Status.Phase != cur.Status.Phase || old.Spec.Cancel != cur.Spec.Cancel ||
				(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) || cur.EffectivePhase() == cairnv1.RestorePhaseNew
		},
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}

// SetupWithManager registers the queue: every restore event that can change it triggers one pass.
func (r *RestoreQueueReconciler) SetupWithManager(mgr ctrl.Manager) error {
	toQueue := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{restoreQueueRequest}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("restorequeue").
		Watches(&cairnv1.Restore{}, toQueue, builder.WithPredicates(restoreQueueTrigger())).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}
