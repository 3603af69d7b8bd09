package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
	"github.com/cairn-backup/cairn/internal/scope"
)

const (
	// DefaultQueueResyncPeriod is how often the queue is reconciled without any event: a safety
	// net, never the way hand-offs happen.
	DefaultQueueResyncPeriod = 30 * time.Second
	// renumberQuietPeriod is how long the queue must be still before renumbered positions and
	// changed wait reasons of backups that stay queued are written, so that a burst of
	// dequeues costs one renumbering, not one per dequeue.
	renumberQuietPeriod = 500 * time.Millisecond
	// renumberMaxDelay bounds how stale positions get while the queue never stands still.
	renumberMaxDelay = 30 * time.Second
	// enqueueParallelism is how many New → Queued (or Queued → ReadyToStart) writes go out at once.
	enqueueParallelism = 8
	// renumberBatch is the most renumbering writes one pass makes; the rest follow in the next
	// passes, so a long renumbering never delays a dequeue by more than one batch.
	renumberBatch = 10
	// cacheCatchUpTimeout bounds the wait for the cache to show the queue's own writes.
	cacheCatchUpTimeout = 5 * time.Second
)

// queueRequest is the one request the queue reconciles: every trigger maps to it, so triggers
// coalesce and the queue is handled by one thread, whole, without locks.
var queueRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "backup-queue"}}

// BackupQueueReconciler is the queue (DESIGN.md section 3). It owns the phases New (and "")
// and Queued: it validates new backups (→ FailedValidation) or queues them (→ Queued, with
// status.queuePosition), moves queued backups that may run to ReadyToStart, fails cancelled or
// deleted ones (→ Failed), and keeps the positions of the rest at 1..n in queue order with a
// Queued condition saying why each waits. What runs is derived from the API on every pass;
// nothing about other backups is remembered between passes.
type BackupQueueReconciler struct {
	client.Client
	// Namespace is the operator's namespace (storage locations, administrators' backups).
	Namespace string
	// ConcurrentBackups is how many backups may be ReadyToStart or InProgress at once.
	ConcurrentBackups int
	// ResyncPeriod is how often the queue is reconciled without any event.
	ResyncPeriod time.Duration
	Clock        clock.Clock
	Recorder     events.EventRecorder
	// Gate is waited on before the first pass (restart recovery).
	Gate interface {
		Wait(ctx context.Context) error
	}

	// lastChange (the last pass that moved a backup in or out of the queue) and staleSince (the
	// first such pass since positions were last exact) pace the coalesced renumbering. They are
	// touched only by the single reconcile thread and hold no state about backups.
	lastChange, staleSince time.Time
}

// +kubebuilder:rbac:groups=cairn.dev,resources=backups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=backups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=cairn.dev,resources=backupstoragelocations,verbs=get;list;watch,namespace=cairn-system

// queuePass is what one pass of the queue fetched and decided.
type queuePass struct {
	now      time.Time
	running  []queue.Entry
	deleting map[string]string
	// waiting are the New and Queued backups in queue order: queued ones by position, then
	// new ones by creation.
	waiting []candidate

	mu         sync.Mutex // guards the fields below, written by concurrent patches
	structural bool
	written    []client.Object
}

// candidate is a New or Queued backup with what the queue needs to know of it.
type candidate struct {
	backup *cairnv1.Backup
	entry  queue.Entry
	// validationErrors are a New backup's validation problems.
	validationErrors []string
}

// Reconcile runs one pass over the whole queue.
func (r *BackupQueueReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	if err := r.Gate.Wait(ctx); err != nil {
		return ctrl.Result{}, err
	}
	pass, err := r.fetch(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	result, err := r.run(ctx, pass)
	// Whatever happened, wait until the cache shows what was written, so the next pass does
	// not decide on a view older than its own writes.
	if waitErr := r.waitForCache(ctx, pass.written); waitErr != nil && err == nil {
		err = waitErr
	}
	return result, err
}

// fetch reads the backups, namespaces and storage locations, and sorts the backups into the
// running ones, the ones being deleted, and the queue.
func (r *BackupQueueReconciler) fetch(ctx context.Context) (*queuePass, error) {
	var backups cairnv1.BackupList
	if err := r.List(ctx, &backups); err != nil {
		return nil, err
	}
	var namespaces corev1.NamespaceList
	if err := r.List(ctx, &namespaces); err != nil {
		return nil, err
	}
	clusterNamespaces := make([]string, 0, len(namespaces.Items))
	for _, ns := range namespaces.Items {
		clusterNamespaces = append(clusterNamespaces, ns.Name)
	}

	pass := &queuePass{now: r.Clock.Now(), deleting: map[string]string{}}
	var waiting []*cairnv1.Backup
	for i := range backups.Items {
		b := &backups.Items[i]
		switch b.EffectivePhase() {
		case cairnv1.BackupPhaseReadyToStart, cairnv1.BackupPhaseInProgress:
			pass.running = append(pass.running, r.entry(b, b.Status.StorageLocation, clusterNamespaces))
		case cairnv1.BackupPhaseDeleting:
			if loc := b.Status.StorageLocation; loc != "" {
				if _, seen := pass.deleting[loc]; !seen {
					pass.deleting[loc] = qualifiedName(b)
				}
			}
		case cairnv1.BackupPhaseNew, cairnv1.BackupPhaseQueued:
			waiting = append(waiting, b)
		}
	}
	queue.Order(waiting)

	var locations cairnv1.BackupStorageLocationList
	if err := r.List(ctx, &locations, client.InNamespace(r.Namespace)); err != nil {
		return nil, err
	}
	for _, b := range waiting {
		c := candidate{backup: b}
		loc := b.Status.StorageLocation
		if b.EffectivePhase() == cairnv1.BackupPhaseNew && !leavesQueue(b) {
			c.validationErrors, loc = queue.Validate(b, r.Namespace, locations.Items)
		}
		c.entry = r.entry(b, loc, clusterNamespaces)
		pass.waiting = append(pass.waiting, c)
	}
	return pass, nil
}

// run applies the pass: first the backups that leave the queue without running, then the
// start decisions, then (coalesced) the positions and reasons of those that stay.
func (r *BackupQueueReconciler) run(ctx context.Context, pass *queuePass) (ctrl.Result, error) {
	var order []candidate
	var entries []queue.Entry
	for _, c := range pass.waiting {
		left, err := r.leave(ctx, pass, c)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !left {
			order = append(order, c)
			entries = append(entries, c.entry)
		}
	}

	decisions := queue.Decide(r.ConcurrentBackups, pass.running, entries, pass.deleting)

	// New backups join the queue after the last position, in order. Their writes go out
	// together: each takes a position no one else holds.
	enqueue := make([]func() error, 0, len(order))
	lastPosition := maxPosition(order)
	for i, c := range order {
		if c.backup.EffectivePhase() == cairnv1.BackupPhaseNew {
			lastPosition++
			c, position, d := c, lastPosition, decisions[i]
			enqueue = append(enqueue, func() error { return r.enqueue(ctx, pass, c, position, d) })
		}
	}
	if err := runBounded(enqueueParallelism, enqueue); err != nil {
		return ctrl.Result{}, err
	}

	// Those that may run leave the queue together (position 0 is no one's place).
	position := int32(0)
	var stay []staying
	var dequeue []func() error
	for i, c := range order {
		b, d := c.backup, decisions[i]
		if d.Start {
			dequeue = append(dequeue, func() error { return r.dequeue(ctx, pass, b) })
			continue
		}
		position++
		stay = append(stay, staying{backup: b, position: position, decision: d})
	}
	if err := runBounded(enqueueParallelism, dequeue); err != nil {
		return ctrl.Result{}, err
	}

	if pass.structural {
		r.lastChange = pass.now
		if r.staleSince.IsZero() {
			r.staleSince = pass.now
		}
	}
	return r.renumber(ctx, pass, stay)
}

// staying is a backup that stays queued after this pass, with its exact position and reason.
type staying struct {
	backup   *cairnv1.Backup
	position int32
	decision queue.Decision
}

// leave fails a New or Queued backup that was cancelled or deleted, and a New backup that does
// not validate. It reports whether the backup left the queue.
func (r *BackupQueueReconciler) leave(ctx context.Context, pass *queuePass, c candidate) (bool, error) {
	b := c.backup
	now := metav1.NewTime(pass.now)
	switch {
	case leavesQueue(b):
		reason, failureReason, _ := cancellation(b)
		message := failureReason + " before it started"
		err := r.patchBackupStatus(ctx, pass, b, func(s *cairnv1.BackupStatus) {
			cancelledStatus(s, b.Generation, reason, failureReason, message, now)
		})
		if err == nil {
			r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Cancelled", "Cancel", message)
		}
		return true, err
	case len(c.validationErrors) > 0:
		if err := addDataFinalizer(ctx, r.Client, b); err != nil {
			return true, err
		}
		err := r.patchBackupStatus(ctx, pass, b, func(s *cairnv1.BackupStatus) {
			s.Phase = cairnv1.BackupPhaseFailedValidation
			s.ValidationErrors = c.validationErrors
			s.QueuePosition = 0
			s.CompletionTimestamp = &now
		})
		if err == nil {
			r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "FailedValidation", "Validate",
				"Backup failed validation: %s", strings.Join(c.validationErrors, "; "))
		}
		return true, err
	}
	return false, nil
}

// leavesQueue: a cancelled or deleted backup that has not started leaves the queue at once.
func leavesQueue(b *cairnv1.Backup) bool {
	_, _, cancelled := cancellation(b)
	return cancelled
}

// addDataFinalizer puts the finalizer cairn.dev/backup-data on a new backup, before anything
// can be written for it: deleting the Backup then waits until the deletion reconciler has
// removed its data. A conflict is retried by the next pass.
func addDataFinalizer(ctx context.Context, c client.Client, b *cairnv1.Backup) error {
	if controllerutil.ContainsFinalizer(b, cairnv1.BackupDataFinalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(b, cairnv1.BackupDataFinalizer)
	if err := c.Patch(ctx, b, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("adding the finalizer to backup %s: %w", qualifiedName(b), err)
	}
	return nil
}

// enqueue moves a valid New backup to Queued at position.
func (r *BackupQueueReconciler) enqueue(ctx context.Context, pass *queuePass, c candidate, position int32, d queue.Decision) error {
	b := c.backup
	reason, message := d.Reason, d.Message
	if d.Start {
		reason, message = cairnv1.ReasonEnqueued, "Queued; starting now"
	}
	now := metav1.NewTime(pass.now)
	if err := addDataFinalizer(ctx, r.Client, b); err != nil {
		return err
	}
	err := r.patchBackupStatus(ctx, pass, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseQueued
		s.QueuePosition = position
		s.StorageLocation = c.entry.Location
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: cairnv1.BackupConditionQueued, Status: metav1.ConditionTrue, Reason: reason,
			Message: message, ObservedGeneration: b.Generation, LastTransitionTime: now,
		})
	})
	if err == nil {
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Queued", "Enqueue", "Queued at position %d", position)
	}
	return err
}

// dequeue moves a Queued backup to ReadyToStart.
func (r *BackupQueueReconciler) dequeue(ctx context.Context, pass *queuePass, b *cairnv1.Backup) error {
	now := metav1.NewTime(pass.now)
	// Condition times have one-second resolution, and so has the wait reported.
	message := "Dequeued without waiting"
	if c := meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionQueued); c != nil &&
		c.Status == metav1.ConditionTrue && c.Reason != cairnv1.ReasonEnqueued {
		message = fmt.Sprintf("Dequeued after waiting %s", pass.now.Sub(c.LastTransitionTime.Time).Round(time.Second))
	}
	err := r.patchBackupStatus(ctx, pass, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseReadyToStart
		s.QueuePosition = 0
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: cairnv1.BackupConditionQueued, Status: metav1.ConditionFalse, Reason: cairnv1.ReasonDequeued,
			Message: message, ObservedGeneration: b.Generation, LastTransitionTime: now,
		})
	})
	if err == nil {
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Dequeued", "Dequeue", message)
	}
	return err
}

// renumber writes the exact positions and wait reasons of the backups that stay queued, once
// the queue has been still for renumberQuietPeriod (or renumberMaxDelay has passed since the
// last renumbering). Until then their stored positions may have gaps, but never the wrong
// order.
func (r *BackupQueueReconciler) renumber(ctx context.Context, pass *queuePass, stay []staying) (ctrl.Result, error) {
	var dirty []staying
	for _, s := range stay {
		if s.backup.EffectivePhase() == cairnv1.BackupPhaseQueued && !upToDate(s) {
			dirty = append(dirty, s)
		}
	}
	result := ctrl.Result{RequeueAfter: r.ResyncPeriod}
	if len(dirty) == 0 {
		r.staleSince = time.Time{}
		return result, nil
	}
	due := r.lastChange.Add(renumberQuietPeriod)
	if !r.staleSince.IsZero() {
		if latest := r.staleSince.Add(renumberMaxDelay); latest.Before(due) {
			due = latest
		}
	}
	if wait := due.Sub(pass.now); wait > 0 {
		return ctrl.Result{RequeueAfter: min(wait, r.ResyncPeriod)}, nil
	}
	if len(dirty) > renumberBatch {
		// Come back at once for the rest, after whatever events arrived meanwhile.
		dirty, result = dirty[:renumberBatch], ctrl.Result{RequeueAfter: time.Millisecond}
	} else {
		r.staleSince = time.Time{}
	}
	for _, s := range dirty {
		err := r.patchBackupStatus(ctx, pass, s.backup, func(st *cairnv1.BackupStatus) {
			st.QueuePosition = s.position
			setQueuedReason(st, s.backup.Generation, s.decision, metav1.NewTime(pass.now))
		})
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	return result, nil
}

// upToDate reports whether a staying backup already shows its position and reason.
func upToDate(s staying) bool {
	if s.backup.Status.QueuePosition != s.position {
		return false
	}
	c := meta.FindStatusCondition(s.backup.Status.Conditions, cairnv1.BackupConditionQueued)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == s.decision.Reason && c.Message == s.decision.Message
}

func setQueuedReason(s *cairnv1.BackupStatus, generation int64, d queue.Decision, now metav1.Time) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: cairnv1.BackupConditionQueued, Status: metav1.ConditionTrue, Reason: d.Reason,
		Message: d.Message, ObservedGeneration: generation, LastTransitionTime: now,
	})
}

func maxPosition(waiting []candidate) int32 {
	var highest int32
	for _, c := range waiting {
		if b := c.backup; b.EffectivePhase() == cairnv1.BackupPhaseQueued && b.Status.QueuePosition > highest {
			highest = b.Status.QueuePosition
		}
	}
	return highest
}

func (r *BackupQueueReconciler) entry(b *cairnv1.Backup, location string, clusterNamespaces []string) queue.Entry {
	return queue.Entry{
		Namespace:  b.Namespace,
		Name:       b.Name,
		Namespaces: scope.ForBackup(b, r.Namespace).Resolve(clusterNamespaces),
		Location:   location,
	}
}

func qualifiedName(b *cairnv1.Backup) string { return b.Namespace + "/" + b.Name }

// patchBackupStatus writes b's status (the package's patchBackupStatus) and records the write
// in the pass.
func (r *BackupQueueReconciler) patchBackupStatus(ctx context.Context, pass *queuePass, b *cairnv1.Backup, mutate func(*cairnv1.BackupStatus)) error {
	oldPhase := b.Status.Phase
	if err := patchBackupStatus(ctx, r.Client, r.Clock, b, mutate); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // gone meanwhile: its delete event brings another pass
		}
		return err
	}
	pass.mu.Lock()
	defer pass.mu.Unlock()
	pass.structural = pass.structural || oldPhase != b.Status.Phase
	pass.written = append(pass.written, b)
	return nil
}

// runBounded runs the jobs, at most limit at a time, and returns the first error.
func runBounded(limit int, jobs []func() error) error {
	sem := make(chan struct{}, limit)
	errs := make(chan error, len(jobs))
	var wg sync.WaitGroup
	for _, job := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- job()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// waitForCache waits until the cache holds each written object at its written resourceVersion
// or later (or no longer holds it).
func (r *BackupQueueReconciler) waitForCache(ctx context.Context, written []client.Object) error {
	if len(written) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cacheCatchUpTimeout)
	defer cancel()
	for _, obj := range written {
		want := obj.GetResourceVersion()
		for {
			var cached cairnv1.Backup
			err := r.Get(ctx, client.ObjectKeyFromObject(obj), &cached)
			if apierrors.IsNotFound(err) || (err == nil && resourceVersionAtLeast(cached.ResourceVersion, want)) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("the cache did not show the queue's write to %s within %s", client.ObjectKeyFromObject(obj), cacheCatchUpTimeout)
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	return nil
}

// resourceVersionAtLeast compares resourceVersions as the integers etcd makes them; where they
// are not integers, only equality counts.
func resourceVersionAtLeast(have, want string) bool {
	h, err1 := strconv.ParseUint(have, 10, 64)
	w, err2 := strconv.ParseUint(want, 10, 64)
	if err1 != nil || err2 != nil {
		return have == want
	}
	return h >= w
}

// SetupWithManager registers the queue: every relevant event maps to the one queue request.
func (r *BackupQueueReconciler) SetupWithManager(mgr ctrl.Manager) error {
	toQueue := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{queueRequest}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("backupqueue").
		Watches(&cairnv1.Backup{}, toQueue, builder.WithPredicates(queueTrigger())).
		Watches(&corev1.Namespace{}, toQueue, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
		})).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// queueTrigger passes the backup events that can change the queue: creations and deletions,
// phase changes (a backup entering Queued, leaving InProgress or ReadyToStart, a deletion
// ending), a cancel, a deletion request, and any update of a New backup.
func queueTrigger() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*cairnv1.Backup)
			cur, ok2 := e.ObjectNew.(*cairnv1.Backup)
			if !ok1 || !ok2 {
				return false
			}
			return old.Status.Phase != cur.Status.Phase ||
				old.Spec.Cancel != cur.Spec.Cancel ||
				(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) ||
				cur.EffectivePhase() == cairnv1.BackupPhaseNew
		},
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}
