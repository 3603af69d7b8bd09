package deletion

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/metrics"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/storage"
)

// deletionSafetyRequeue re-checks a backup whose deletion goroutine runs, should its report
// ever be missed.
const deletionSafetyRequeue = time.Minute

// Reconciler removes the data of deleted backups (DESIGN.md section 6, Longhorn's
// asynchronous deletion). It owns Deleting and DeletionFailed, and terminal backups with a
// deletion timestamp: it starts their deletion at once and moves them to Deleting only once it
// has run for deletingShownAfter (most are over by then, and the object simply goes); a backup
// deleted before it ended is first cancelled by the owner of its phase. The removal — every
// object under the backup's directory in its location, and the VolumeSnapshots labelled with
// its UID — runs in a goroutine, which reports through an in-memory map keyed by UID and wakes
// the reconciler when it ends. Success, checked against the store, removes the finalizer
// cairn.dev/backup-data and the object goes; a failure is DeletionFailed with the error,
// retried with backoff; Deleting with no map entry means the operator restarted mid-deletion:
// DeletionFailed, retried. The annotation cairn.dev/keep-data: "true" removes the finalizer
// without touching storage. A terminal backup that a restore still reads is not deleted until
// that restore ends (condition DeletionBlocked says which); the restore's end brings the
// backup back here.
type Reconciler struct {
	client.Client
	// Leftovers removes what the backup's async operations made: CSI VolumeSnapshots and
	// volume snapshots; their records, the PodVolumeBackups, go with the object.
	Leftovers lifecycle.Leftovers
	Stores    stores.Stores
	Clock     clock.Clock
	Recorder  events.EventRecorder
	Gate      interface {
		Wait(ctx context.Context) error
	}
	// BackoffMin and BackoffMax bound the wait between deletion attempts.
	BackoffMin, BackoffMax time.Duration

	deletions *lifecycle.UIDMap[deletionRecord]
	// retries spaces out the attempts (the one backoff of the reconcilers, on flowcontrol).
	retries *lifecycle.RetryBackoff
	// slots runs at most DefaultConcurrentDeletions deletions at once; the others wait in line.
	slots *deletionSlots
	// ended carries the backups whose deletion goroutine ended, to reconcile them at once.
	ended chan event.GenericEvent
	// life is the manager's lifetime: deletion goroutines outlive the reconcile that starts
	// them, not the manager.
	life *lifetime
}

// +kubebuilder:rbac:groups=cairn.dev,resources=backups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=backups/finalizers,verbs=update
// +kubebuilder:rbac:groups=cairn.dev,resources=restores,verbs=get;list;watch

// Reconcile moves one deleted backup's deletion on.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b cairnv1.Backup
	if found, err := lifecycle.Fetch(ctx, r.Gate, r.Client, req, &b); !found {
		return ctrl.Result{}, err
	}
	in := deletionInputOf(&b, r.Clock.Now())
	if rec, ok := r.deletions.Get(b.UID); ok {
		in.Record = &rec
	}
	if in.Deleted && in.Phase.IsTerminal() {
		var restores cairnv1.RestoreList
		if err := r.List(ctx, &restores, client.InNamespace(b.Namespace)); err != nil {
			return ctrl.Result{}, err
		}
		in.ReadBy = readingRestore(restores.Items, &b)
	}
	step, message := nextDeletionStep(in)
	switch step {
	case stepRelease:
		return ctrl.Result{}, r.release(ctx, &b, in.KeepData)
	case stepWithdraw:
		if !r.deletionSlots().withdraw(b.UID) {
			return ctrl.Result{RequeueAfter: deletionSafetyRequeue}, nil // it started meanwhile
		}
		return ctrl.Result{}, r.release(ctx, &b, true)
	case stepWaitForRestore:
		return ctrl.Result{}, r.waitForRestore(ctx, &b, in.ReadBy, message)
	case stepStart:
		return r.start(ctx, &b, false)
	case stepStartDeleting:
		return r.start(ctx, &b, true)
	case stepShowDeleting:
		return r.showDeleting(ctx, &b)
	case stepWait:
		return ctrl.Result{RequeueAfter: deletionWait(in)}, nil
	case stepVerify:
		return r.verify(ctx, &b)
	case stepFail:
		return r.fail(ctx, &b, message)
	case stepBackoff:
		return ctrl.Result{RequeueAfter: b.Status.NextDeletionAttempt.Sub(in.Now)}, nil
	}
	return ctrl.Result{}, nil
}

// start records the deletion and runs it in a goroutine, with the phase Deleting written
// first when shown (a retry, or a deletion the user watched wait for a restore); otherwise the
// phase says Deleting only once the deletion has run for deletingShownAfter, and most are
// over by then. Should this process stop meanwhile, the next one finds the backup terminal
// with its deletion timestamp (or Deleting with no record) and deletes again.
func (r *Reconciler) start(ctx context.Context, b *cairnv1.Backup, shown bool) (ctrl.Result, error) {
	base, ok := r.life.context()
	if !ok {
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if shown {
		if err := r.markDeleting(ctx, b); err != nil {
			return ctrl.Result{}, err
		}
	}
	// Recorded before it is submitted: the goroutine marks it running as it starts.
	r.deletions.Set(b.UID, deletionRecord{State: deletionWaiting, Since: r.Clock.Now(), Shown: shown})
	metrics.DeletionStarted()
	if slots := r.deletionSlots(); !slots.submit(base, b.DeepCopy()) {
		ctrl.LoggerFrom(ctx).Info("Backup's deletion waits for a slot", "backup", lifecycle.ObjectName(b), "running", slots.limit)
	}
	if shown {
		return ctrl.Result{RequeueAfter: deletionSafetyRequeue}, nil
	}
	return ctrl.Result{RequeueAfter: deletingShownAfter}, nil
}

// showDeleting sets the phase Deleting of a backup whose first deletion has run for
// deletingShownAfter.
func (r *Reconciler) showDeleting(ctx context.Context, b *cairnv1.Backup) (ctrl.Result, error) {
	if err := r.markDeleting(ctx, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.deletions.Update(b.UID, func(rec *deletionRecord) { rec.Shown = true })
	return ctrl.Result{RequeueAfter: deletionSafetyRequeue}, nil
}

// markDeleting writes the phase Deleting. Its event (PhaseWatcher's, which says when an
// expired backup expired) is the only one of a deletion that goes well.
func (r *Reconciler) markDeleting(ctx context.Context, b *cairnv1.Backup) error {
	return lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerDeletion, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseDeleting
		s.NextDeletionAttempt = nil
		meta.RemoveStatusCondition(&s.Conditions, cairnv1.BackupConditionDeletionBlocked)
	})
}

// waitForRestore keeps a deleted backup that a restore still reads where it is, saying so in
// its DeletionBlocked condition (and an event, when the restore it waits for changes). The end
// of that restore brings the backup back (the watch on restores).
func (r *Reconciler) waitForRestore(ctx context.Context, b *cairnv1.Backup, restoreName, message string) error {
	if c := meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionDeletionBlocked); c != nil &&
		c.Status == metav1.ConditionTrue && c.Message == message {
		return nil
	}
	now := metav1.NewTime(r.Clock.Now())
	if err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerDeletion, b, func(s *cairnv1.BackupStatus) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: cairnv1.BackupConditionDeletionBlocked, Status: metav1.ConditionTrue, Reason: cairnv1.ReasonReadByRestore,
			Message: message, ObservedGeneration: b.Generation, LastTransitionTime: now,
		})
	}); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "DeletionBlocked", "Delete",
		"Waiting for restore %s to end before deleting the backup's data", restoreName)
	return nil
}

// runDeletion removes a backup's data and reports the outcome in the map, then wakes the
// reconciler. A panic is a failure like any other. It only updates the backup's entry: one
// forgotten meanwhile (the object is gone) stays forgotten.
func (r *Reconciler) runDeletion(ctx context.Context, b *cairnv1.Backup) {
	report := func(state deletionState, message string) {
		r.deletions.Update(b.UID, func(rec *deletionRecord) { rec.State, rec.Message = state, message })
	}
	report(deletionRunning, "")
	defer func() {
		if p := recover(); p != nil {
			report(deletionFailed, fmt.Sprintf("the deletion panicked: %v", p))
		}
		select {
		case r.ended <- event.GenericEvent{Object: b}:
		case <-ctx.Done():
		}
	}()
	if err := r.removeData(ctx, b); err != nil {
		until, _ := storage.RetainedUntil(err)
		r.deletions.Update(b.UID, func(rec *deletionRecord) {
			rec.State, rec.Message, rec.RetainedUntil = deletionFailed, err.Error(), until
		})
		return
	}
	report(deletionDone, "")
}

// removeData deletes every object under the backup's own directory in its location (the
// directory key ends in "/", so backup b1 never touches b10) and the VolumeSnapshots its
// operations made. Its errors say what a person can do.
func (r *Reconciler) removeData(ctx context.Context, b *cairnv1.Backup) error {
	bsl, err := r.Stores.Location(ctx, b)
	if err != nil {
		return fmt.Errorf("%w; create the location again, or set the annotation %s=\"true\" to delete only the Backup object", err, cairnv1.KeepDataAnnotation)
	}
	if bsl.Spec.AccessMode == cairnv1.AccessModeReadOnly {
		return fmt.Errorf("storage location %s is ReadOnly, so the backup's data cannot be deleted: make it ReadWrite, or set the annotation %s=\"true\" to delete only the Backup object",
			bsl.Name, cairnv1.KeepDataAnnotation)
	}
	store, err := r.Stores.Open(ctx, bsl)
	if err != nil {
		return fmt.Errorf("opening storage location %s: %w", bsl.Name, err)
	}
	keys := store.Layout.Backup(b.Namespace, b.Name)
	if err := r.ownsData(ctx, store, keys, b); err != nil {
		return err
	}
	if store.Lock != nil {
		// Nothing is removed (snapshots included) while Object Lock keeps any of the objects:
		// the backup stays whole and restorable until it can go as a whole.
		if err := r.Stores.Call(ctx, func(ctx context.Context) error {
			objects, err := store.List(ctx, keys.Dir)
			if err != nil {
				return fmt.Errorf("listing the backup's objects in storage location %s: %w", bsl.Name, err)
			}
			return store.Lock.Retained(ctx, objects, r.Clock.Now())
		}); err != nil {
			if _, retained := storage.RetainedUntil(err); retained {
				return fmt.Errorf("storage location %s: %w; the deletion is retried then", bsl.Name, err)
			}
			return err
		}
	}
	// The operations file records the volume snapshots: they go before it does.
	if err := r.Stores.Call(ctx, func(ctx context.Context) error {
		_, err := r.Leftovers.Remove(ctx, b.UID, store.ObjectStore, keys.ItemOperations)
		return err
	}); err != nil {
		return fmt.Errorf("removing the backup's snapshots: %w", err)
	}
	var objects []string
	if err := r.Stores.Call(ctx, func(ctx context.Context) (err error) {
		objects, err = store.List(ctx, keys.Dir)
		return err
	}); err != nil {
		return fmt.Errorf("listing the backup's objects in storage location %s: %w", bsl.Name, err)
	}
	if _, err := r.Stores.DeleteObjects(ctx, store, keys, objects, nil); err != nil {
		return fmt.Errorf("storage location %s: %w", bsl.Name, err)
	}
	return nil
}

// ownsData refuses to delete a committed backup made by another Backup object of the same
// namespace and name (one deleted with keep-data, or another cluster's).
func (r *Reconciler) ownsData(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys, b *cairnv1.Backup) error {
	ctx, cancel := r.Stores.Bounded(ctx)
	defer cancel()
	meta, err := storage.ReadMetadata(ctx, store, keys)
	switch {
	case errors.Is(err, storage.ErrNotCommitted):
		return nil
	case err != nil:
		return fmt.Errorf("reading the backup's metadata: %w", err)
	case meta.UID != backupsync.DataUID(b): // a synced backup's data is its origin's
		return fmt.Errorf("the data under %s belongs to another Backup object (UID %s), so it was not deleted; set the annotation %s=\"true\" to delete only this Backup object",
			keys.Dir, meta.UID, cairnv1.KeepDataAnnotation)
	}
	return nil
}

// verify checks that the store holds nothing of the backup any more, then lets the object go.
func (r *Reconciler) verify(ctx context.Context, b *cairnv1.Backup) (ctrl.Result, error) {
	left, err := r.remaining(ctx, b)
	switch {
	case err != nil:
		return r.fail(ctx, b, fmt.Sprintf("checking that the data is gone: %v", err))
	case len(left) > 0:
		return r.fail(ctx, b, fmt.Sprintf("objects are left after the deletion: %s", strings.Join(left, ", ")))
	}
	if err := r.release(ctx, b, false); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// remaining lists what the store still holds under the backup's directory.
func (r *Reconciler) remaining(ctx context.Context, b *cairnv1.Backup) ([]string, error) {
	ctx, cancel := r.Stores.Bounded(ctx)
	defer cancel()
	store, err := r.Stores.ForBackup(ctx, b)
	if err != nil {
		return nil, err
	}
	return store.List(ctx, store.Layout.Backup(b.Namespace, b.Name).Dir)
}

// fail moves the backup to DeletionFailed with the message; the next attempt comes after the
// backoff, which grows with every failed attempt.
func (r *Reconciler) fail(ctx context.Context, b *cairnv1.Backup, message string) (ctrl.Result, error) {
	now := r.Clock.Now()
	attempts := b.Status.DeletionAttempts + 1
	_, backoffAttempt := r.backoff().Failed(b.UID)
	var retainedUntil time.Time
	if rec, ok := r.deletions.Get(b.UID); ok {
		retainedUntil = rec.RetainedUntil
	}
	nextAttempt := nextDeletionAttempt(backoffAttempt, retainedUntil)
	delay := nextAttempt.Sub(now)
	next := metav1.NewTime(nextAttempt)
	if err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerDeletion, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseDeletionFailed
		s.LastDeletionError = message
		s.DeletionAttempts = attempts
		s.NextDeletionAttempt = &next
		meta.RemoveStatusCondition(&s.Conditions, cairnv1.BackupConditionDeletionBlocked)
	}); err != nil {
		return ctrl.Result{}, err
	}
	r.deletions.Forget(b.UID)
	return ctrl.Result{RequeueAfter: delay}, nil
}

// release removes the data finalizer, which lets the API server delete the object.
func (r *Reconciler) release(ctx context.Context, b *cairnv1.Backup, keptData bool) error {
	if err := lifecycle.DeletePodVolumeBackups(ctx, r.Client, r.Stores.Namespace, b.UID); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(b, cairnv1.BackupDataFinalizer)
	if err := r.Patch(ctx, b, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.deletions.Forget(b.UID)
	r.backoff().Forget(b.UID)
	if keptData {
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "DataKept", "Delete",
			"Backup deleted without touching storage (annotation %s)", cairnv1.KeepDataAnnotation)
		return nil
	}
	// No event: the object going is the sign that its data went (a failure is DeletionFailed,
	// with an event), and an event per backup here would be one more write for each of a
	// schedule's backups expiring together.
	ctrl.LoggerFrom(ctx).Info("Deleted a backup's data", "backup", lifecycle.ObjectName(b))
	return nil
}

// SetupWithManager registers the reconciler for deleted backups and for the ends of its own
// deletion goroutines.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.BackoffMin <= 0 {
		r.BackoffMin = lifecycle.DefaultRetryBackoffMin
	}
	if r.BackoffMax < r.BackoffMin {
		r.BackoffMax = max(lifecycle.DefaultRetryBackoffMax, r.BackoffMin)
	}
	r.deletions = newDeletions()
	r.retries = lifecycle.NewRetryBackoff(r.Clock, r.BackoffMin, r.BackoffMax)
	r.deletionSlots() // made before the reconciles, which run side by side
	r.ended = make(chan event.GenericEvent, 64)
	r.life = &lifetime{ready: make(chan struct{})}
	if err := mgr.Add(r.life); err != nil {
		return err
	}
	deleted := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		b, ok := obj.(*cairnv1.Backup)
		return ok && b.DeletionTimestamp != nil
	})
	// What this process remembers of a backup is dropped when its object is gone, however it
	// went.
	forget := handler.Funcs{DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		r.forget(e.Object.GetUID())
	}}
	return lifecycle.Register("deletion", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Backup{}, builder.WithPredicates(deleted)).
		Watches(&cairnv1.Backup{}, forget).
		Watches(&cairnv1.Restore{}, handler.EnqueueRequestsFromMapFunc(r.backupsReadBy), builder.WithPredicates(restoreEnded())).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: deletionReconcilers, RateLimiter: lifecycle.StorageRateLimiter()}).
		WatchesRawSource(source.Channel(r.ended, &handler.EnqueueRequestForObject{})),
		r)
}

// backupsReadBy maps a restore that ended (or went) to the backups it read, so that a deleted
// backup waiting for it moves on: the one named, or, for a restore of a schedule that never
// resolved to a backup, the deleted backups of that schedule.
func (r *Reconciler) backupsReadBy(ctx context.Context, obj client.Object) []reconcile.Request {
	rs, ok := obj.(*cairnv1.Restore)
	if !ok {
		return nil
	}
	name := rs.Status.BackupName
	if name == "" {
		name = rs.Spec.BackupName
	}
	if name != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: rs.Namespace, Name: name}}}
	}
	if rs.Spec.ScheduleName == "" {
		return nil
	}
	var backups cairnv1.BackupList
	if err := r.List(ctx, &backups, client.InNamespace(rs.Namespace), client.MatchingLabels{cairnv1.ScheduleNameLabel: rs.Spec.ScheduleName}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Could not list the backups of a schedule whose restore ended", "restore", lifecycle.ObjectName(rs))
		return nil
	}
	var requests []reconcile.Request
	for i := range backups.Items {
		if b := &backups.Items[i]; b.DeletionTimestamp != nil {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
		}
	}
	return requests
}

// restoreEnded passes the restore events after which a deleted backup may no longer be read:
// a restore reaching a terminal phase, or its object gone.
func restoreEnded() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*cairnv1.Restore)
			cur, ok2 := e.ObjectNew.(*cairnv1.Restore)
			return ok1 && ok2 && !old.EffectivePhase().IsTerminal() && cur.EffectivePhase().IsTerminal()
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// forget drops what this process remembers of a backup whose object is gone. A deletion of it
// already handed to the slots still runs to its end (its data was asked to go), and leaves no
// entry behind.
func (r *Reconciler) forget(uid types.UID) {
	r.deletions.Forget(uid)
	r.backoff().Forget(uid)
}

// backoff is the reconciler's retry backoff, made on first use for a reconciler built without
// SetupWithManager (the deletion reconciler runs one reconcile at a time).
func (r *Reconciler) backoff() *lifecycle.RetryBackoff {
	if r.retries == nil {
		r.retries = lifecycle.NewRetryBackoff(r.Clock, max(r.BackoffMin, time.Millisecond), max(r.BackoffMax, r.BackoffMin, time.Millisecond))
	}
	return r.retries
}

// deletionReconcilers is how many backups the deletion reconciler handles at once: its state
// (the deletions, their retries and slots) is safe for concurrent use, and the status writes
// and checks of many backups expiring at once go out side by side.
const deletionReconcilers = 8

// deletionSlots is the reconciler's line of deletions, made on first use.
func (r *Reconciler) deletionSlots() *deletionSlots {
	if r.slots == nil {
		r.slots = &deletionSlots{limit: DefaultConcurrentDeletions, run: r.runDeletion}
	}
	return r.slots
}

// lifetime captures the manager's context for work that outlives a reconcile. It implements
// manager.Runnable.
type lifetime struct {
	once  sync.Once
	ctx   context.Context
	ready chan struct{}
}

var _ manager.Runnable = &lifetime{}

func (l *lifetime) Start(ctx context.Context) error {
	l.once.Do(func() {
		l.ctx = ctx
		close(l.ready)
	})
	<-ctx.Done()
	return nil
}

// context is the manager's context, once it runs.
func (l *lifetime) context() (context.Context, bool) {
	select {
	case <-l.ready:
		return l.ctx, true
	default:
		return nil, false
	}
}
