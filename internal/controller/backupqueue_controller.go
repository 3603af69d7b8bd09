package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
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
// the only thing remembered between passes is each backup's resolved namespaces (a cache keyed
// by its UID and generation and the cluster's namespaces, never a record of what runs).
//
// One failed write (a conflict, a status the API server rejects) never stops a pass: it is
// logged, the pass goes on with the other backups, and the pass ends with an error so that
// the failed write is retried with backoff.
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
	// resolutions are the namespace sets of the backups, resolved once per backup generation
	// and cluster namespace list; made on the first pass.
	resolutions *queue.Resolutions
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
	// failed are the backups whose write failed in this pass: later steps of the pass leave
	// them alone, and the next pass retries them.
	failed   map[types.UID]bool
	failures []error
}

// record notes the outcome of a write for backup b: a failure is logged and remembered, and
// the pass goes on. It returns err.
func (p *queuePass) record(ctx context.Context, b *cairnv1.Backup, err error) error {
	if err == nil {
		return nil
	}
	ctrl.LoggerFrom(ctx).Error(err, "Could not write a backup's queue status; the queue goes on and retries it later", "backup", qualifiedName(b))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed == nil {
		p.failed = map[types.UID]bool{}
	}
	p.failed[b.UID] = true
	p.failures = append(p.failures, err)
	return err
}

// hasFailed reports whether a write for b failed earlier in this pass.
func (p *queuePass) hasFailed(b *cairnv1.Backup) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed[b.UID]
}

// err is what the pass returns: nil, or an error that brings the pass back with backoff.
func (p *queuePass) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.failures) == 0 {
		return nil
	}
	return fmt.Errorf("%d of the queue's writes failed (each is logged; retrying), the first: %w", len(p.failures), p.failures[0])
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
	// Only the names are read: the cache's own objects are enough.
	var namespaces corev1.NamespaceList
	if err := r.List(ctx, &namespaces, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var locations cairnv1.BackupStorageLocationList
	if err := r.List(ctx, &locations, client.InNamespace(r.Namespace)); err != nil {
		return nil, err
	}
	clusterNamespaces := make([]string, 0, len(namespaces.Items))
	for _, ns := range namespaces.Items {
		clusterNamespaces = append(clusterNamespaces, ns.Name)
	}
	if r.resolutions == nil {
		r.resolutions = queue.NewResolutions(r.Namespace)
	}
	r.resolutions.Begin(clusterNamespaces)
	defer r.resolutions.End()

	pass := &queuePass{now: r.Clock.Now(), deleting: map[string]string{}}
	var waiting []*cairnv1.Backup
	for i := range backups.Items {
		b := &backups.Items[i]
		switch b.EffectivePhase() {
		case cairnv1.BackupPhaseReadyToStart, cairnv1.BackupPhaseInProgress:
			pass.running = append(pass.running, r.entry(b, b.Status.StorageLocation))
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

	for _, b := range waiting {
		c := candidate{backup: b}
		loc := b.Status.StorageLocation
		if b.EffectivePhase() == cairnv1.BackupPhaseNew && !leavesQueue(b) {
			c.validationErrors, loc = queue.Validate(b, r.Namespace, locations.Items)
		}
		c.entry = r.entry(b, loc)
		pass.waiting = append(pass.waiting, c)
	}
	return pass, nil
}

// run applies the pass: first the backups that leave the queue without running, then the
// start decisions, then (coalesced) the positions and reasons of those that stay. A write that
// fails is recorded in the pass and the rest goes on; the backup it was for is left alone for
// the rest of the pass, and the pass returns an error so that it is retried with backoff.
func (r *BackupQueueReconciler) run(ctx context.Context, pass *queuePass) (ctrl.Result, error) {
	var order []candidate
	var entries []queue.Entry
	for _, c := range pass.waiting {
		// A backup whose write failed is leaving all the same: it is not decided on.
		left, err := r.leave(ctx, pass, c)
		if pass.record(ctx, c.backup, err) == nil && !left {
			order = append(order, c)
			entries = append(entries, c.entry)
		}
	}

	decisions := queue.Decide(r.ConcurrentBackups, pass.running, entries, pass.deleting)

	// New backups join the queue after the last position, in order. Their writes go out
	// together: each takes a position no one else holds. The group has no context, so one
	// failed write never cancels the others; each failure is recorded in the pass.
	enqueue := writeGroup()
	lastPosition := maxPosition(order)
	for i, c := range order {
		if c.backup.EffectivePhase() == cairnv1.BackupPhaseNew {
			lastPosition++
			position, d := lastPosition, decisions[i]
			enqueue.Go(func() error { return pass.record(ctx, c.backup, r.enqueue(ctx, pass, c, position, d)) })
		}
	}
	_ = enqueue.Wait() // every failure is in the pass

	// Those that may run leave the queue together (position 0 is no one's place). A new
	// backup that could not be queued is not started.
	dequeue := writeGroup()
	for i, c := range order {
		if b := c.backup; decisions[i].Start && !pass.hasFailed(b) {
			dequeue.Go(func() error { return pass.record(ctx, b, r.dequeue(ctx, pass, b)) })
		}
	}
	_ = dequeue.Wait()

	// The rest stay, at positions 1..n in order. A backup whose dequeue failed is still
	// queued and keeps its place; one that could not be queued has none.
	position := int32(0)
	var stay []staying
	for i, c := range order {
		b, d := c.backup, decisions[i]
		failed := pass.hasFailed(b)
		if (d.Start && !failed) || (failed && b.EffectivePhase() == cairnv1.BackupPhaseNew) {
			continue
		}
		position++
		stay = append(stay, staying{backup: b, position: position, decision: d, failed: failed})
	}

	if pass.structural {
		r.lastChange = pass.now
		if r.staleSince.IsZero() {
			r.staleSince = pass.now
		}
	}
	result := r.renumber(ctx, pass, stay)
	if err := pass.err(); err != nil {
		return ctrl.Result{}, err
	}
	return result, nil
}

// writeGroup runs a pass's writes, enqueueParallelism at a time.
func writeGroup() *errgroup.Group {
	g := new(errgroup.Group)
	g.SetLimit(enqueueParallelism)
	return g
}

// staying is a backup that stays queued after this pass, with its exact position and reason.
type staying struct {
	backup   *cairnv1.Backup
	position int32
	decision queue.Decision
	// failed: a write for it failed in this pass; it is not written again until the next.
	failed bool
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
		problems := queue.CapValidationErrors(c.validationErrors)
		err := r.patchBackupStatus(ctx, pass, b, func(s *cairnv1.BackupStatus) {
			s.Phase = cairnv1.BackupPhaseFailedValidation
			s.ValidationErrors = problems
			s.QueuePosition = 0
			s.CompletionTimestamp = &now
		})
		if err == nil {
			r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "FailedValidation", "Validate",
				"Backup failed validation: %s", strings.Join(problems, "; "))
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
//
// Positions are written in queue order, and a backup moves only to a position above every
// position stored for the backups ahead of it: when one write fails, that backup keeps its
// old place, and those behind it wait rather than jump over it.
func (r *BackupQueueReconciler) renumber(ctx context.Context, pass *queuePass, stay []staying) ctrl.Result {
	dirty := func(s staying) bool {
		return s.backup.EffectivePhase() == cairnv1.BackupPhaseQueued && !s.failed && !upToDate(s)
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
	ahead := int32(0) // the highest position stored for a backup ahead
	for _, s := range stay {
		b := s.backup
		if dirty(s) && writes < renumberBatch && (s.position > ahead || s.position == b.Status.QueuePosition) {
			writes++
			_ = pass.record(ctx, b, r.patchBackupStatus(ctx, pass, b, func(st *cairnv1.BackupStatus) {
				st.QueuePosition = s.position
				setQueuedReason(st, b.Generation, s.decision, metav1.NewTime(pass.now))
			}))
		}
		ahead = max(ahead, b.Status.QueuePosition)
	}
	if writes < toWrite {
		// Come back at once for the rest, after whatever events arrived meanwhile.
		return ctrl.Result{RequeueAfter: time.Millisecond}
	}
	r.staleSince = time.Time{}
	return result
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

func (r *BackupQueueReconciler) entry(b *cairnv1.Backup, location string) queue.Entry {
	return queue.Entry{
		Namespace:  b.Namespace,
		Name:       b.Name,
		Namespaces: r.resolutions.Resolve(b),
		Location:   location,
	}
}

func qualifiedName(b *cairnv1.Backup) string { return b.Namespace + "/" + b.Name }

// patchBackupStatus writes b's status (the package's patchBackupStatus) and records the write
// in the pass. When the write fails, b keeps the status it had, so the rest of the pass sees
// the backup as the API server does.
func (r *BackupQueueReconciler) patchBackupStatus(ctx context.Context, pass *queuePass, b *cairnv1.Backup, mutate func(*cairnv1.BackupStatus)) error {
	old := b.Status.DeepCopy()
	if err := patchBackupStatus(ctx, r.Client, r.Clock, b, mutate); err != nil {
		b.Status = *old
		if apierrors.IsNotFound(err) {
			return nil // gone meanwhile: its delete event brings another pass
		}
		return err
	}
	pass.mu.Lock()
	defer pass.mu.Unlock()
	pass.structural = pass.structural || old.Phase != b.Status.Phase
	pass.written = append(pass.written, b)
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
			if apierrors.IsNotFound(err) {
				break
			}
			// resourceVersions compare as the integers etcd makes them; any other form only
			// by equality.
			cmp, cmpErr := resourceversion.CompareResourceVersion(cached.ResourceVersion, want)
			if err == nil && (cached.ResourceVersion == want || (cmpErr == nil && cmp >= 0)) {
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
