// Package queue holds Reconciler, the one queue of backups and restores (DESIGN.md sections 3
// and 9) and the owner of their New and Queued phases. pass.go is one pass over the line;
// leave.go says what leaves it without running; positions.go gives places
// in it; restorepermission.go asks whether the operator may restore at all. What it shares
// with other owners is passed in setup.go: the sync reconciler's backupsync.Catalog (the names
// a new backup may not take), the deletion's rule for a backup whose data is being removed
// (RemovingData), and whom a backup or restore acts for (requester.Resolver).
package queue

import (
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/queue"
	"github.com/cairn-backup/cairn/internal/requester"
)

const (
	// DefaultResyncPeriod is how often the queue is reconciled without any event: a safety
	// net, never the way hand-offs happen.
	DefaultResyncPeriod = 30 * time.Second
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

// Reconciler is the queue of backups and restores (DESIGN.md sections 3 and 9): one
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
type Reconciler struct {
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
	// RemovingData is the deletion's rule: whether a backup's data may be being removed from
	// its location, which then holds that location's deletion lock (DESIGN.md section 3); nil
	// holds no lock (tests of other behaviour).
	RemovingData func(*cairnv1.Backup) bool
	// DefaultBackupTTL is the ttl of a backup without spec.ttl (--default-backup-ttl), checked
	// against its location's teamLimits.maxTTL; 0 means cairnv1.DefaultBackupTTL.
	DefaultBackupTTL time.Duration

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

// Reconcile runs one pass over the whole queue.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
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

// run applies the pass: first the backups that leave the queue without running, then the
// start decisions, then (coalesced) the positions and reasons of those that stay. A write that
// fails is recorded in the pass and the rest goes on; the backup it was for is left alone for
// the rest of the pass, and the pass returns an error so that it is retried with backoff.
func (r *Reconciler) run(ctx context.Context, pass *queuePass) (ctrl.Result, error) {
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

// waitForCache waits until the cache holds each written object at its written resourceVersion
// or later (or no longer holds it).
func (r *Reconciler) waitForCache(ctx context.Context, written []client.Object) error {
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
func (r *Reconciler) cacheShows(ctx context.Context, obj client.Object) bool {
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
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	toQueue := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{queueRequest}
	})
	return lifecycle.Register("backupqueue", ctrl.NewControllerManagedBy(mgr).
		Watches(&cairnv1.Backup{}, toQueue, builder.WithPredicates(backupTrigger(r.removingData))).
		Watches(&cairnv1.Restore{}, toQueue, builder.WithPredicates(restoreTrigger())).
		Watches(&corev1.Namespace{}, toQueue, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
		})).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 1}),
		r)
}

// removingData is RemovingData, or false when there is none.
func (r *Reconciler) removingData(b *cairnv1.Backup) bool {
	return r.RemovingData != nil && r.RemovingData(b)
}

// backupTrigger passes the backup events that can change the queue: creations and deletions,
// phase changes (a backup entering Queued, leaving InProgress or ReadyToStart, a deletion
// ending), a cancel, a deletion request, a backup taking or releasing its location's deletion
// lock (removingData: also when its deletion comes to wait for a restore), and any update of a
// New backup.
func backupTrigger(removingData func(*cairnv1.Backup) bool) predicate.Predicate {
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
				removingData(old) != removingData(cur) ||
				cur.EffectivePhase() == cairnv1.BackupPhaseNew
		},
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}
