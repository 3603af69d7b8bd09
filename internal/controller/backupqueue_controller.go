package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
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
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/deletion"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/queue"
	"github.com/cairn-backup/cairn/internal/requester"
	"github.com/cairn-backup/cairn/internal/restore"
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
	// cacheCatchUpInterval is how often that wait looks at the cache. The informer usually
	// shows a write within a few milliseconds, and the queue's one thread waits meanwhile, so
	// the interval is short: each look is a read of the local cache.
	cacheCatchUpInterval = 5 * time.Millisecond
)

// queueRequest is the one request the queue reconciles: every trigger maps to it, so triggers
// coalesce and the queue is handled by one thread, whole, without locks.
var queueRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "backup-queue"}}

// BackupQueueReconciler is the queue of backups and restores (DESIGN.md sections 3 and 9): one
// line for both kinds. It owns the phases New (and "", but for a backup with the annotation
// cairn.dev/synced-from, which the sync reconciler owns) and Queued of both: it validates new
// backups and restores (→ FailedValidation) or queues them (→ Queued, with
// status.queuePosition), moves queued ones that may run to ReadyToStart, fails cancelled or
// deleted ones (→ Failed), and keeps the positions of the rest at 1..n in queue order with a
// Queued condition saying why each waits. Nothing that touches the same namespace runs at once,
// whatever the kinds (queue.Decide); backups and restores have their own concurrency slots.
// What runs is derived from the API on every pass; the only thing remembered between passes is
// each backup's resolved namespaces (a cache keyed by its UID and generation and the cluster's
// namespaces, never a record of what runs).
//
// One failed write (a conflict, a status the API server rejects) never stops a pass: it is
// logged, the pass goes on with the others, and the pass ends with an error so that the failed
// write is retried with backoff.
type BackupQueueReconciler struct {
	client.Client
	// Namespace is the operator's namespace (storage locations, administrators' backups).
	Namespace string
	// ConcurrentBackups is how many backups may be ReadyToStart or InProgress at once.
	ConcurrentBackups int
	// ConcurrentRestores is how many restores may be ReadyToStart or InProgress at once; 0
	// means 1. Restores do not take backup slots, nor backups restore slots.
	ConcurrentRestores int
	// ResyncPeriod is how often the queue is reconciled without any event.
	ResyncPeriod time.Duration
	Clock        clock.Clock
	Recorder     events.EventRecorder
	// Gate is waited on before the first pass (restart recovery).
	Gate interface {
		Wait(ctx context.Context) error
	}
	// Catalog holds the names committed in each location that no backup of the cluster stands
	// for (written by the sync reconciler): a new backup that takes one fails validation.
	Catalog *backupsync.Catalog
	// RestoreAccess, when set, says why the operator may not carry out a new restore ("" when
	// it may); its answer is one of the restore's validation errors (restorepermission.go).
	RestoreAccess func(ctx context.Context, rs *cairnv1.Restore) (string, error)
	// Requesters says whom a backup or restore acts for: one in a namespace where the
	// requester rule applies and with no trustworthy requester fails validation (DESIGN.md
	// section 15); nil acts for the operator everywhere (tests of other behaviour).
	Requesters *requester.Resolver

	// lastChange (the last pass that moved a backup or restore in or out of the queue) and
	// staleSince (the first such pass since positions were last exact) pace the coalesced
	// renumbering. They are touched only by the single reconcile thread and hold no state
	// about backups or restores.
	lastChange, staleSince time.Time
	// resolutions are the namespace sets of the backups, resolved once per backup generation
	// and cluster namespace list; made on the first pass.
	resolutions *queue.Resolutions
}

// +kubebuilder:rbac:groups=cairn.dev,resources=backups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=backups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=cairn.dev,resources=backupstoragelocations,verbs=get;list;watch,namespace=cairn-system
// +kubebuilder:rbac:groups=cairn.dev,resources=restores,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=restores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=restores/finalizers,verbs=update

// queuePass is what one pass of the queue fetched and decided.
type queuePass struct {
	now time.Time
	// running are the backups and restores that run (ReadyToStart or InProgress).
	running  []queue.Entry
	deleting map[string]string
	// waiting are the New and Queued backups and restores in queue order: queued ones by
	// position, then new ones by creation.
	waiting []candidate

	mu         sync.Mutex // guards the fields below, written by concurrent patches
	structural bool
	written    []client.Object
	// failed are the backups and restores whose write failed in this pass: later steps of the
	// pass leave them alone, and the next pass retries them.
	failed   map[types.UID]bool
	failures []error
}

// record notes the outcome of a write for obj (a backup or a restore): a failure is logged
// and remembered, and the pass goes on. It returns err.
func (p *queuePass) record(ctx context.Context, obj client.Object, err error) error {
	if err == nil {
		return nil
	}
	ctrl.LoggerFrom(ctx).Error(err, "Could not write the queue status of a backup or restore; the queue goes on and retries it later",
		kindOf(obj).String(), lifecycle.ObjectName(obj))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed == nil {
		p.failed = map[types.UID]bool{}
	}
	p.failed[obj.GetUID()] = true
	p.failures = append(p.failures, err)
	return err
}

// hasFailed reports whether a write for obj failed earlier in this pass.
func (p *queuePass) hasFailed(obj client.Object) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed[obj.GetUID()]
}

// wrote notes a successful write of obj, for the cache catch-up and the renumbering's pace.
func (p *queuePass) wrote(obj client.Object, phaseChanged bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.structural = p.structural || phaseChanged
	p.written = append(p.written, obj)
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

// candidate is a New or Queued backup or restore with what the queue needs to know of it.
// Exactly one of backup and restore is set.
type candidate struct {
	backup  *cairnv1.Backup
	restore *cairnv1.Restore
	entry   queue.Entry
	// validationErrors are a New backup's or restore's validation problems.
	validationErrors []string
	// backupName is the backup a restore reads: what a new one resolved to, or status.backupName.
	backupName string
}

// object is the backup or the restore.
func (c candidate) object() client.Object {
	if c.restore != nil {
		return c.restore
	}
	return c.backup
}

// isNew reports whether it is New (or ""): not yet in the line.
func (c candidate) isNew() bool {
	if c.restore != nil {
		return c.restore.EffectivePhase() == cairnv1.RestorePhaseNew
	}
	return c.backup.EffectivePhase() == cairnv1.BackupPhaseNew
}

// storedPosition is the queue position its status holds (0 when New).
func (c candidate) storedPosition() int32 {
	switch {
	case c.isNew():
		return 0
	case c.restore != nil:
		return c.restore.Status.QueuePosition
	}
	return c.backup.Status.QueuePosition
}

// queuedCondition is its Queued condition, if any.
func (c candidate) queuedCondition() *metav1.Condition {
	if c.restore != nil {
		return meta.FindStatusCondition(c.restore.Status.Conditions, cairnv1.RestoreConditionQueued)
	}
	return meta.FindStatusCondition(c.backup.Status.Conditions, cairnv1.BackupConditionQueued)
}

// kindOf says whether obj is a backup or a restore.
func kindOf(obj client.Object) queue.Kind {
	if _, ok := obj.(*cairnv1.Restore); ok {
		return queue.KindRestore
	}
	return queue.KindBackup
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

// fetch reads the backups, restores, namespaces and storage locations, and sorts the backups
// and restores into the running ones, the backups being deleted, and the queue.
func (r *BackupQueueReconciler) fetch(ctx context.Context) (*queuePass, error) {
	var backups cairnv1.BackupList
	if err := r.List(ctx, &backups); err != nil {
		return nil, err
	}
	var restores cairnv1.RestoreList
	if err := r.List(ctx, &restores); err != nil {
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
	var waiting []client.Object
	byName := make(map[types.NamespacedName]*cairnv1.Backup, len(backups.Items))
	for i := range backups.Items {
		b := &backups.Items[i]
		byName[client.ObjectKeyFromObject(b)] = b
		if loc := b.Status.StorageLocation; loc != "" && deletion.RemovingData(b) {
			if _, seen := pass.deleting[loc]; !seen {
				pass.deleting[loc] = lifecycle.ObjectName(b)
			}
			continue
		}
		switch b.EffectivePhase() {
		case cairnv1.BackupPhaseReadyToStart, cairnv1.BackupPhaseInProgress:
			pass.running = append(pass.running, r.entry(b, b.Status.StorageLocation))
		case cairnv1.BackupPhaseNew, cairnv1.BackupPhaseQueued:
			if b.IsSyncPending() {
				continue // made by the sync from storage, which owns it (DESIGN.md section 11)
			}
			waiting = append(waiting, b)
		}
	}
	// readBackup is the backup a restore reads, when the cache holds it.
	readBackup := func(rs *cairnv1.Restore) *cairnv1.Backup {
		return byName[types.NamespacedName{Namespace: rs.Namespace, Name: rs.Status.BackupName}]
	}
	for i := range restores.Items {
		rs := &restores.Items[i]
		switch rs.EffectivePhase() {
		case cairnv1.RestorePhaseReadyToStart, cairnv1.RestorePhaseInProgress:
			pass.running = append(pass.running, r.restoreEntry(rs, readBackup(rs)))
		case cairnv1.RestorePhaseNew, cairnv1.RestorePhaseQueued:
			waiting = append(waiting, rs)
		}
	}
	queue.Order(waiting)

	for _, obj := range waiting {
		switch x := obj.(type) {
		case *cairnv1.Backup:
			c := candidate{backup: x}
			loc := x.Status.StorageLocation
			if x.EffectivePhase() == cairnv1.BackupPhaseNew && !leavesQueue(x) {
				_, why, err := r.Requesters.For(ctx, x)
				if pass.record(ctx, x, err) != nil {
					continue // not decided on; the next pass tries again
				}
				c.validationErrors, loc = queue.Validate(x, r.Namespace, locations.Items)
				c.validationErrors = append(c.validationErrors, syncNameConflict(r.Catalog, x, loc, locations.Items)...)
				if why != "" {
					c.validationErrors = append(c.validationErrors, why)
				}
			}
			c.entry = r.entry(x, loc)
			pass.waiting = append(pass.waiting, c)
		case *cairnv1.Restore:
			c := candidate{restore: x, backupName: x.Status.BackupName}
			backup := readBackup(x)
			if x.EffectivePhase() == cairnv1.RestorePhaseNew {
				if _, _, cancelled := lifecycle.Restores.Cancellation(x); !cancelled {
					// Validated as the restore reconciler will validate it again when it starts.
					facts, backupName, err := restoreValidationFacts(ctx, r.Client, r.Namespace, x)
					if pass.record(ctx, x, err) != nil {
						continue // not decided on; the next pass tries again
					}
					c.validationErrors = restore.Validate(x, r.Namespace, facts)
					_, why, err := r.Requesters.For(ctx, x)
					if pass.record(ctx, x, err) != nil {
						continue
					}
					if why != "" {
						c.validationErrors = append(c.validationErrors, why)
					}
					if r.RestoreAccess != nil { // the operator may be installed to back up only
						denied, err := r.RestoreAccess(ctx, x)
						if pass.record(ctx, x, err) != nil {
							continue
						}
						if denied != "" {
							c.validationErrors = append(c.validationErrors, denied)
						}
					}
					c.backupName, backup = backupName, facts.Backup
				}
			}
			c.entry = r.restoreEntry(x, backup)
			pass.waiting = append(pass.waiting, c)
		}
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
		// A backup or restore whose write failed is leaving all the same: it is not decided on.
		left, err := r.leave(ctx, pass, c)
		if pass.record(ctx, c.object(), err) == nil && !left {
			order = append(order, c)
			entries = append(entries, c.entry)
		}
	}

	limits := queue.Limits{Backups: r.ConcurrentBackups, Restores: max(r.ConcurrentRestores, 1)}
	decisions := queue.Decide(limits, pass.running, entries, pass.deleting)

	// New backups and restores join the queue after the last position, in order. Their writes
	// go out together: each takes a position no one else holds. The group has no context, so
	// one failed write never cancels the others; each failure is recorded in the pass.
	enqueue := writeGroup()
	lastPosition := maxPosition(order)
	for i, c := range order {
		if c.isNew() {
			lastPosition++
			position, d := lastPosition, decisions[i]
			enqueue.Go(func() error { return pass.record(ctx, c.object(), r.enqueue(ctx, pass, c, position, d)) })
		}
	}
	_ = enqueue.Wait() // every failure is in the pass

	// One that could not be queued is not started, and is not in the line for this pass:
	// decide again without it, so that the slot it would have taken goes to the next in line.
	if kept := slices.DeleteFunc(slices.Clone(order), func(c candidate) bool { return c.isNew() && pass.hasFailed(c.object()) }); len(kept) < len(order) {
		order, entries = kept, entries[:0]
		for _, c := range order {
			entries = append(entries, c.entry)
		}
		decisions = queue.Decide(limits, pass.running, entries, pass.deleting)
	}

	// Those that may run leave the queue together (position 0 is no one's place).
	dequeue := writeGroup()
	for i, c := range order {
		if decisions[i].Start {
			dequeue.Go(func() error { return pass.record(ctx, c.object(), r.dequeue(ctx, pass, c)) })
		}
	}
	_ = dequeue.Wait()

	// The rest stay, at positions 1..n in order. One whose dequeue failed is still queued and
	// keeps its place.
	position := int32(0)
	var stay []staying
	for i, c := range order {
		d := decisions[i]
		failed := pass.hasFailed(c.object())
		if d.Start && !failed {
			continue
		}
		position++
		stay = append(stay, staying{candidate: c, position: position, decision: d, failed: failed})
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

// staying is a backup or restore that stays queued after this pass, with its exact position
// and reason.
type staying struct {
	candidate
	position int32
	decision queue.Decision
	// failed: a write for it failed in this pass; it is not written again until the next.
	failed bool
}

// leave fails a New or Queued backup or restore that was cancelled or deleted, and a New one
// that does not validate. It reports whether it left the queue.
func (r *BackupQueueReconciler) leave(ctx context.Context, pass *queuePass, c candidate) (bool, error) {
	if c.restore != nil {
		return r.leaveRestore(ctx, pass, c)
	}
	b := c.backup
	now := metav1.NewTime(pass.now)
	switch {
	case leavesQueue(b):
		if err := lifecycle.Backups.EndBeforeStart(ctx, r.Client, r.Clock, r.Recorder, phases.OwnerQueue, b); err != nil {
			return true, err
		}
		pass.wrote(b, true)
		return true, nil
	case len(c.validationErrors) > 0:
		if err := addFinalizer(ctx, r.Client, b, cairnv1.BackupDataFinalizer); err != nil {
			return true, err
		}
		problems := queue.CapValidationErrors(c.validationErrors)
		err := r.patchBackupStatus(ctx, pass, b, func(s *cairnv1.BackupStatus) {
			s.Phase = cairnv1.BackupPhaseFailedValidation
			s.ValidationErrors = problems
			s.QueuePosition = 0
			s.CompletionTimestamp = &now
		})
		return true, err
	}
	return false, nil
}

// leavesQueue: a cancelled or deleted backup that has not started leaves the queue at once.
func leavesQueue(b *cairnv1.Backup) bool {
	_, _, cancelled := lifecycle.Backups.Cancellation(b)
	return cancelled
}

// addFinalizer puts finalizer on a new backup (cairn.dev/backup-data) or restore
// (cairn.dev/restore-data), before anything can be written for it: deleting the object then
// waits until its data or files are removed. A conflict is retried by the next pass.
func addFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) error {
	if controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(obj, finalizer)
	if err := c.Patch(ctx, obj, patch); err != nil && !apierrors.IsNotFound(err) {
		controllerutil.RemoveFinalizer(obj, finalizer)
		return fmt.Errorf("adding the finalizer to %s %s: %w", kindOf(obj), lifecycle.ObjectName(obj), err)
	}
	return nil
}

// enqueue moves a valid New backup or restore to Queued at position.
func (r *BackupQueueReconciler) enqueue(ctx context.Context, pass *queuePass, c candidate, position int32, d queue.Decision) error {
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
func (r *BackupQueueReconciler) dequeue(ctx context.Context, pass *queuePass, c candidate) error {
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

// renumber writes the exact positions and wait reasons of the backups and restores that stay
// queued, once the queue has been still for renumberQuietPeriod (or renumberMaxDelay has
// passed since the last renumbering). Until then their stored positions may have gaps, but
// never the wrong order.
//
// Positions are written in queue order, and an entry moves only to a position above every
// position stored for the entries ahead of it: when one write fails, that entry keeps its old
// place, and those behind it wait rather than jump over it.
func (r *BackupQueueReconciler) renumber(ctx context.Context, pass *queuePass, stay []staying) ctrl.Result {
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
func (r *BackupQueueReconciler) writePosition(ctx context.Context, pass *queuePass, s staying) error {
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

func maxPosition(waiting []candidate) int32 {
	var highest int32
	for _, c := range waiting {
		highest = max(highest, c.storedPosition())
	}
	return highest
}

func (r *BackupQueueReconciler) entry(b *cairnv1.Backup, location string) queue.Entry {
	return queue.Entry{
		Kind:       queue.KindBackup,
		Namespace:  b.Namespace,
		Name:       b.Name,
		Namespaces: r.resolutions.Resolve(b),
		Location:   location,
	}
}

// restoreEntry is a restore as the queue sees it: the namespaces it may write into, from the
// backup it reads (nil when unknown).
func (r *BackupQueueReconciler) restoreEntry(rs *cairnv1.Restore, b *cairnv1.Backup) queue.Entry {
	return queue.Entry{
		Kind:       queue.KindRestore,
		Namespace:  rs.Namespace,
		Name:       rs.Name,
		Namespaces: queue.RestoreTargets(rs, b, r.Namespace),
	}
}

// lifecycle.PatchBackupStatus writes b's status (the package's lifecycle.PatchBackupStatus) and records the write
// in the pass. When the write fails, b keeps the status it had, so the rest of the pass sees
// the backup as the API server does.
func (r *BackupQueueReconciler) patchBackupStatus(ctx context.Context, pass *queuePass, b *cairnv1.Backup, mutate func(*cairnv1.BackupStatus)) error {
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

// lifecycle.PatchRestoreStatus is lifecycle.PatchBackupStatus for a restore.
func (r *BackupQueueReconciler) patchRestoreStatus(ctx context.Context, pass *queuePass, rs *cairnv1.Restore, mutate func(*cairnv1.RestoreStatus)) error {
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

// waitForCache waits until the cache holds each written object at its written resourceVersion
// or later (or no longer holds it).
func (r *BackupQueueReconciler) waitForCache(ctx context.Context, written []client.Object) error {
	if len(written) == 0 {
		return nil
	}
	// One timeout for them all; written[caughtUp:] are those the cache has not shown yet.
	caughtUp := 0
	err := wait.PollUntilContextTimeout(ctx, cacheCatchUpInterval, cacheCatchUpTimeout, true, func(ctx context.Context) (bool, error) {
		for ; caughtUp < len(written); caughtUp++ {
			if !r.cacheShows(ctx, written[caughtUp]) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the cache did not show the queue's write to %s within %s", client.ObjectKeyFromObject(written[caughtUp]), cacheCatchUpTimeout)
	}
	return nil
}

// cacheShows reports whether the cache holds obj at its resourceVersion or later, or no longer
// holds it.
func (r *BackupQueueReconciler) cacheShows(ctx context.Context, obj client.Object) bool {
	cached := obj.DeepCopyObject().(client.Object)
	err := r.Get(ctx, client.ObjectKeyFromObject(obj), cached)
	if apierrors.IsNotFound(err) {
		return true
	}
	// resourceVersions compare as the integers etcd makes them; any other form only by
	// equality.
	want := obj.GetResourceVersion()
	cmp, cmpErr := resourceversion.CompareResourceVersion(cached.GetResourceVersion(), want)
	return err == nil && (cached.GetResourceVersion() == want || (cmpErr == nil && cmp >= 0))
}

// SetupWithManager registers the queue: every relevant backup, restore and namespace event maps
// to the one queue request.
func (r *BackupQueueReconciler) SetupWithManager(mgr ctrl.Manager) error {
	toQueue := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{queueRequest}
	})
	return lifecycle.Register("backupqueue", ctrl.NewControllerManagedBy(mgr).
		Watches(&cairnv1.Backup{}, toQueue, builder.WithPredicates(queueTrigger())).
		Watches(&cairnv1.Restore{}, toQueue, builder.WithPredicates(restoreQueueTrigger())).
		Watches(&corev1.Namespace{}, toQueue, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
		})).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 1}),
		r)
}

// queueTrigger passes the backup events that can change the queue: creations and deletions,
// phase changes (a backup entering Queued, leaving InProgress or ReadyToStart, a deletion
// ending), a cancel, a deletion request, a backup taking or releasing its location's deletion
// lock (deletion.RemovingData: also when its deletion comes to wait for a restore), and any
// update of a New backup.
func queueTrigger() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			b, ok := e.Object.(*cairnv1.Backup)
			return !ok || !b.IsSyncPending() // the sync's, not the queue's
		},
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*cairnv1.Backup)
			cur, ok2 := e.ObjectNew.(*cairnv1.Backup)
			if !ok1 || !ok2 || old.IsSyncPending() || cur.IsSyncPending() {
				return false // the sync's, from start to end
			}
			return old.Status.Phase != cur.Status.Phase ||
				old.Spec.Cancel != cur.Spec.Cancel ||
				(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) ||
				deletion.RemovingData(old) != deletion.RemovingData(cur) ||
				cur.EffectivePhase() == cairnv1.BackupPhaseNew
		},
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}
