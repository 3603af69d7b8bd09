// Package schedule holds the reconciler of Schedules (DESIGN.md section 10): it owns their
// status and makes their backups; the decisions are internal/schedule's.
package schedule

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/requester"
	"github.com/cairn-backup/cairn/internal/schedule"
	"github.com/cairn-backup/cairn/internal/validation"
)

// Reconciler runs Schedules (DESIGN.md section 10): it owns every field of a
// schedule's status and creates the schedule's backups, New, for the queue to take; it owns no
// backup phase. It wakes exactly when the next run is due (RequeueAfter from the injected
// clock), never by polling. Which run happens is schedule.Decide's call: a new schedule waits
// for its first tick, missed ticks make one run, a run while a backup of the schedule has not
// ended is skipped with an event, and a paused or invalid schedule makes none. A schedule with
// spec.retention also deletes the backups its retention keeps no longer (retain), after each
// of them ends and whenever the schedule changes, and shows the counts in status.retention.
type Reconciler struct {
	client.Client
	// Namespace is the operator's namespace (storage locations, the tenancy rule).
	Namespace string
	Clock     clock.Clock
	Recorder  events.EventRecorder
	// Requesters says whom a schedule's backups act for: a schedule in a namespace where the
	// requester rule applies and with no trustworthy requester fails validation (DESIGN.md
	// section 15); nil acts for the operator everywhere (tests of other behaviour).
	Requesters *requester.Resolver
	// APIReader reads a schedule's backups past the cache before its retention deletes any
	// (a backup the cache has not seen yet may change the answer); nil trusts the cache.
	APIReader client.Reader
	// DefaultBackupTTL is the ttl of a backup without spec.ttl (--default-backup-ttl), checked
	// against the location's teamLimits.maxTTL; 0 means cairnv1.DefaultBackupTTL.
	DefaultBackupTTL time.Duration
}

// +kubebuilder:rbac:groups=cairn.dev,resources=schedules,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=schedules/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=backups,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=cairn.dev,resources=backupstoragelocations,verbs=get;list;watch,namespace=cairn-system
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile validates a schedule, makes its due run, and requeues at the next one.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var s cairnv1.Schedule
	if err := r.Get(ctx, req.NamespacedName, &s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	var locations cairnv1.BackupStorageLocationList
	if err := r.List(ctx, &locations, client.InNamespace(r.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing storage locations: %w", err)
	}
	facts := validation.LimitFacts{DefaultTTL: r.DefaultBackupTTL}
	if s.Namespace != r.Namespace { // an administrator's schedule is not limited by its location
		var ns corev1.Namespace
		if err := r.Get(ctx, client.ObjectKey{Name: s.Namespace}, &ns); err != nil {
			return ctrl.Result{}, fmt.Errorf("reading namespace %s: %w", s.Namespace, err)
		}
		facts.NamespaceLabels = ns.Labels
	}
	errs := schedule.Validate(&s, r.Namespace, locations.Items, facts)
	_, why, err := r.Requesters.For(ctx, &s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if why != "" {
		errs = append(errs, why)
	}
	if len(errs) > 0 {
		return ctrl.Result{}, r.patchStatus(ctx, &s, func(st *cairnv1.ScheduleStatus) {
			st.Phase, st.ValidationErrors, st.NextBackup = cairnv1.SchedulePhaseFailedValidation, errs, nil
		})
	}
	cron, err := schedule.Parse(s.Spec.Schedule)
	if err != nil { // Validate parsed it already
		return ctrl.Result{}, err
	}
	var backups cairnv1.BackupList
	if err := r.List(ctx, &backups, client.InNamespace(s.Namespace), client.MatchingLabels{cairnv1.ScheduleNameLabel: s.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the backups of schedule %s: %w", lifecycle.ObjectName(&s), err)
	}
	now := r.Clock.Now()
	// Retention trouble (a storage location gone, an API server slow to answer a delete) must
	// never cost a run: the run is made, the status keeps the last retention counts, and the
	// error brings the schedule back with backoff to try the deletions again.
	kept, retainErr := r.retain(ctx, &s, backups.Items, locations.Items, now)
	if retainErr != nil {
		ctrl.LoggerFrom(ctx).Error(retainErr, "Could not apply the schedule's retention; will retry", "schedule", lifecycle.ObjectName(&s))
		kept = s.Status.Retention
	}
	d := schedule.Decide(decideInput(&s, cron, now, backups.Items))
	result, err := r.act(ctx, &s, d, now, kept)
	if err != nil {
		return result, err
	}
	return result, retainErr
}

// decideInput is what schedule.Decide needs of a schedule and its backups.
func decideInput(s *cairnv1.Schedule, cron interface{ Next(time.Time) time.Time }, now time.Time, backups []cairnv1.Backup) schedule.Input {
	since := s.CreationTimestamp.Time
	for _, t := range []*metav1.Time{s.Status.LastBackup, s.Status.LastSkipped} {
		if t != nil && t.After(since) {
			since = t.Time
		}
	}
	phase := s.EffectivePhase()
	in := schedule.Input{
		Schedule:        cron,
		Name:            s.Name,
		Now:             now,
		Since:           since,
		Paused:          s.Spec.Paused,
		SkipImmediately: s.Spec.SkipImmediately,
		Resumed:         phase == cairnv1.SchedulePhaseNew || phase == cairnv1.SchedulePhasePaused,
	}
	for _, b := range backups {
		in.Backups = append(in.Backups, schedule.BackupState{Name: b.Name, Phase: b.EffectivePhase()})
	}
	return in
}

// act carries out a decision: creates the run's backup, writes the status, and requeues at
// the next tick.
func (r *Reconciler) act(ctx context.Context, s *cairnv1.Schedule, d schedule.Decision, now time.Time, kept *cairnv1.RetentionStatus) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	stamp := metav1.NewTime(now)
	var mutate func(*cairnv1.ScheduleStatus)
	switch d.Action {
	case schedule.Create, schedule.Done:
		if d.Action == schedule.Create {
			b := schedule.NewBackup(s, d.Tick)
			err := r.Create(ctx, b)
			switch {
			case apierrors.IsAlreadyExists(err):
				// Created before a restart, or seen late by the cache: it is this tick's run.
			case err != nil:
				return ctrl.Result{}, fmt.Errorf("creating backup %s of schedule %s: %w", b.Name, lifecycle.ObjectName(s), err)
			default:
				log.Info("Created a scheduled backup", "backup", b.Name, "tick", d.Tick)
				r.Recorder.Eventf(s, b, corev1.EventTypeNormal, "BackupCreated", "Run", "Created backup %s", b.Name)
			}
		}
		mutate = func(st *cairnv1.ScheduleStatus) {
			st.LastBackup = &stamp
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: cairnv1.ScheduleConditionSkipped,
				Status: metav1.ConditionFalse, Reason: cairnv1.ReasonRunDue, ObservedGeneration: s.Generation,
				Message: fmt.Sprintf("The run due at %s created backup %s", d.Tick.UTC().Format(time.RFC3339), d.Backup)})
		}
	case schedule.SkipRunning:
		message := fmt.Sprintf("Skipped the run due at %s: backup %s has not ended", d.Tick.UTC().Format(time.RFC3339), d.Running)
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "Skipped", "Run", message)
		log.Info("Skipped a scheduled run; the previous backup has not ended", "backup", d.Running, "tick", d.Tick)
		mutate = func(st *cairnv1.ScheduleStatus) {
			st.LastSkipped = &stamp
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: cairnv1.ScheduleConditionSkipped,
				Status: metav1.ConditionTrue, Reason: cairnv1.ReasonBackupStillRunning, ObservedGeneration: s.Generation, Message: message})
		}
	case schedule.SkipImmediately:
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "SkippedImmediately", "Run",
			"Skipped the run missed while paused (spec.skipImmediately); the next is at %s", d.Next.UTC().Format(time.RFC3339))
		mutate = func(st *cairnv1.ScheduleStatus) { st.LastSkipped = &stamp }
	default:
		mutate = func(*cairnv1.ScheduleStatus) {}
	}
	if err := r.patchStatus(ctx, s, func(st *cairnv1.ScheduleStatus) {
		mutate(st)
		st.Retention = retentionStatus(st.Retention, kept)
		st.Phase, st.ValidationErrors, st.NextBackup = cairnv1.SchedulePhaseEnabled, nil, nil
		if s.Spec.Paused {
			st.Phase = cairnv1.SchedulePhasePaused
		}
		if !d.Next.IsZero() {
			next := metav1.NewTime(d.Next)
			st.NextBackup = &next
		}
	}); err != nil {
		return ctrl.Result{}, err
	}
	if d.Action == schedule.SkipImmediately {
		// It applies once: the status (lastSkipped, phase Enabled) is written first, so that a
		// failure here leaves the flag set but never makes the skipped run again.
		patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
		s.Spec.SkipImmediately = false
		if err := r.Patch(ctx, s, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("resetting spec.skipImmediately of schedule %s: %w", lifecycle.ObjectName(s), err)
		}
	}
	if d.Next.IsZero() {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: max(d.Next.Sub(now), 0)}, nil
}

// patchStatus writes a schedule's status with an optimistic lock, if mutate changed it, with
// observedGeneration and whom it acts as (actingAs, formerRequesters). Waking at a tick that is not due yet
// changes nothing, and writes nothing.
func (r *Reconciler) patchStatus(ctx context.Context, s *cairnv1.Schedule, mutate func(*cairnv1.ScheduleStatus)) error {
	old := s.DeepCopy()
	mutate(&s.Status)
	s.Status.ObservedGeneration = s.Generation
	s.Status.ActingAs, s.Status.FormerRequesters = schedule.ActingAs(old.Status, s, r.Clock.Now())
	if equality.Semantic.DeepEqual(old.Status, s.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, s, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		s.Status = old.Status
		return fmt.Errorf("updating the status of schedule %s: %w", lifecycle.ObjectName(s), err)
	}
	return nil
}

// SetupWithManager watches Schedules, the storage locations their validation depends on, and
// the backups they created (by the schedule-name label): a backup's events re-read the
// schedule, but only a due tick makes a run.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	toSchedule := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name, ok := o.GetLabels()[cairnv1.ScheduleNameLabel]
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
	})
	hasScheduleLabel := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetLabels()[cairnv1.ScheduleNameLabel]
		return ok
	})
	toInvalidSchedules := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list cairnv1.ScheduleList
		if err := r.List(ctx, &list); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Could not list schedules after a storage location changed")
			return nil
		}
		var reqs []reconcile.Request
		for _, s := range list.Items {
			if s.Status.Phase == cairnv1.SchedulePhaseFailedValidation || s.Status.Phase == cairnv1.SchedulePhaseEnabled {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
			}
		}
		return reqs
	})
	return lifecycle.Register("schedule", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Schedule{}).
		Watches(&cairnv1.Backup{}, toSchedule, builder.WithPredicates(hasScheduleLabel, predicate.Funcs{
			// Only a backup ending or going away can matter, and only for the next run.
			CreateFunc: func(event.CreateEvent) bool { return false },
			UpdateFunc: func(e event.UpdateEvent) bool {
				old, ok1 := e.ObjectOld.(*cairnv1.Backup)
				cur, ok2 := e.ObjectNew.(*cairnv1.Backup)
				return ok1 && ok2 && old.Status.Phase != cur.Status.Phase
			},
		})).
		Watches(&cairnv1.BackupStorageLocation{}, toInvalidSchedules, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool { return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() },
		})),
		r)
}
