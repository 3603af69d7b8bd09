// Package expiry deletes expired backups: the "gc" reconciler (DESIGN.md section 10,
// docs/expiry.md). It owns no phase; the deletion reconciler takes a deleted backup from there.
// It reads status.expiration, which the backup reconciler writes when a backup starts.
package expiry

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/phases"
)

// gcWorkers is how many backups the expiry reconciler handles at once: backups of one schedule and
// ttl expire together, and each Delete is a round trip to the API server, mostly waiting (200
// expiring at once are all deleted within about 0.7 s, against 1.5–1.7 s with 8: see
// docs/benchmarks.md, "Expiry").
const gcWorkers = 32

// Reconciler deletes expired backups (DESIGN.md section 10, docs/expiry.md). It owns no
// phase: it calls the ordinary Delete on a terminal backup whose status.expiration has passed,
// and the deletion reconciler removes the data and then the object. It wakes exactly at a
// backup's expiration (RequeueAfter), never by polling. A backup whose data cannot be deleted —
// its storage location is ReadOnly or missing — is not deleted (a ReadOnly location's data is
// never deleted through it); it gets the condition Expired=True saying why, and a change of
// that location brings it back here.
type Reconciler struct {
	client.Client
	// Namespace is the operator's namespace, which holds the storage locations.
	Namespace string
	Clock     clock.Clock
	Recorder  events.EventRecorder
	Gate      interface {
		Wait(ctx context.Context) error
	}
}

// expiryAction is what the GC reconciler does with a backup.
type expiryAction string

const (
	// expiryNone: nothing, now or later (not terminal, no expiration, or being deleted).
	expiryNone expiryAction = "None"
	// expiryWait: not expired yet; look again at the expiration.
	expiryWait expiryAction = "Wait"
	// expiryDelete: expired, and its data can be deleted: Delete it.
	expiryDelete expiryAction = "Delete"
	// expiryBlocked: expired, but its data cannot be deleted: condition Expired=True.
	expiryBlocked expiryAction = "Blocked"
)

// expiryInput is what decideExpiry decides on.
type expiryInput struct {
	Phase cairnv1.BackupPhase
	// Deleted: the backup has a deletion timestamp already.
	Deleted bool
	// Expiration is status.expiration; nil never expires.
	Expiration *metav1.Time
	// TouchesStorage: deleting the backup removes data from its location (it started, and the
	// user did not set cairn.dev/keep-data).
	TouchesStorage bool
	// Location is the backup's storage location; nil when it does not exist, and then
	// LocationError says why.
	Location      *cairnv1.BackupStorageLocation
	LocationError string
	Now           time.Time
}

// expiryDecision is decideExpiry's answer: the action, how long to wait for expiryWait, and
// the condition's reason and message for expiryBlocked.
type expiryDecision struct {
	Action  expiryAction
	After   time.Duration
	Reason  string
	Message string
}

// decideExpiry is the GC reconciler's decision. Only a terminal backup expires: one still
// running is finished first by its phase's owner, and one being deleted is the deletion
// reconciler's. Deleting a backup whose data lives in a ReadOnly or missing location would
// only leave it in DeletionFailed, retried forever, so it is reported instead; a backup whose
// deletion does not touch storage (it never started, or keep-data) goes whatever its location.
func decideExpiry(in expiryInput) expiryDecision {
	switch {
	case in.Deleted || !in.Phase.IsTerminal() || in.Expiration == nil:
		return expiryDecision{Action: expiryNone}
	case in.Now.Before(in.Expiration.Time):
		return expiryDecision{Action: expiryWait, After: in.Expiration.Sub(in.Now)}
	case !in.TouchesStorage:
		return expiryDecision{Action: expiryDelete}
	case in.Location == nil:
		return expiryDecision{Action: expiryBlocked, Reason: cairnv1.ReasonLocationNotFound,
			Message: fmt.Sprintf("the backup expired at %s but cannot be deleted: %s", in.Expiration.UTC().Format(time.RFC3339), in.LocationError)}
	case in.Location.Spec.Format == cairnv1.LocationFormatVelero:
		// Deleting the object would only have the sync make it again: Velero owns the data.
		return expiryDecision{Action: expiryBlocked, Reason: cairnv1.ReasonLocationReadOnly,
			Message: fmt.Sprintf("the backup expired at %s (Velero's expiration) but is not deleted: its data is Velero's, in storage location %s, which Cairn never changes; Velero's own garbage collection deletes it, and the backup then shows DataAvailable=False",
				in.Expiration.UTC().Format(time.RFC3339), in.Location.Name)}
	case in.Location.Spec.AccessMode == cairnv1.AccessModeReadOnly:
		return expiryDecision{Action: expiryBlocked, Reason: cairnv1.ReasonLocationReadOnly,
			Message: fmt.Sprintf("the backup expired at %s but cannot be deleted: storage location %s is ReadOnly; make it ReadWrite, or set the annotation %s=\"true\" and delete the backup to keep its data",
				in.Expiration.UTC().Format(time.RFC3339), in.Location.Name, cairnv1.KeepDataAnnotation)}
	}
	return expiryDecision{Action: expiryDelete}
}

// +kubebuilder:rbac:groups=cairn.dev,resources=backups,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=cairn.dev,resources=backups/status,verbs=get;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=backupstoragelocations,verbs=get;list;watch

// Reconcile deletes one backup if it expired, or waits for its expiration.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b cairnv1.Backup
	if found, err := lifecycle.Fetch(ctx, r.Gate, r.Client, req, &b); !found {
		return ctrl.Result{}, err
	}
	in := expiryInput{
		Phase:          b.Status.Phase,
		Deleted:        b.DeletionTimestamp != nil,
		Expiration:     b.Status.Expiration,
		TouchesStorage: b.Status.StartTimestamp != nil && b.Annotations[cairnv1.KeepDataAnnotation] != "true",
		Now:            r.Clock.Now(),
	}
	if in.TouchesStorage && !in.Deleted && in.Expiration != nil && !in.Now.Before(in.Expiration.Time) {
		var locations cairnv1.BackupStorageLocationList
		if err := r.List(ctx, &locations, client.InNamespace(r.Namespace)); err != nil {
			return ctrl.Result{}, err
		}
		bsl, err := location.Resolve(locations.Items, r.Namespace, b.Status.StorageLocation)
		switch {
		case errors.Is(err, location.ErrMissing):
			in.LocationError = err.Error()
		case err != nil:
			return ctrl.Result{}, err
		default:
			in.Location = bsl
		}
	}
	d := decideExpiry(in)
	switch d.Action {
	case expiryWait:
		return ctrl.Result{RequeueAfter: d.After}, nil
	case expiryBlocked:
		return ctrl.Result{}, r.block(ctx, &b, d)
	case expiryDelete:
		return ctrl.Result{}, r.expire(ctx, &b)
	}
	return ctrl.Result{}, nil
}

// expire deletes the backup, as `kubectl delete` would; the deletion reconciler takes it from
// there. The precondition on the UID keeps a backup created since under the same name.
func (r *Reconciler) expire(ctx context.Context, b *cairnv1.Backup) error {
	if err := r.Delete(ctx, b, client.Preconditions{UID: &b.UID}); err != nil {
		return client.IgnoreNotFound(err)
	}
	// No event: most deletions end within a second and the object goes with no other write; a
	// slower one shows Deleting, whose event says when the backup expired (docs/expiry.md).
	ctrl.LoggerFrom(ctx).Info("Deleted an expired backup", "backup", lifecycle.ObjectName(b), "expiration", b.Status.Expiration)
	return nil
}

// block sets the condition Expired=True with the decision's reason, and says so in a Warning
// event when the reason or message changes.
func (r *Reconciler) block(ctx context.Context, b *cairnv1.Backup, d expiryDecision) error {
	if c := meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionExpired); c != nil &&
		c.Status == metav1.ConditionTrue && c.Reason == d.Reason && c.Message == d.Message {
		return nil
	}
	now := metav1.NewTime(r.Clock.Now())
	if err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerGC, b, func(s *cairnv1.BackupStatus) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: cairnv1.BackupConditionExpired, Status: metav1.ConditionTrue, Reason: d.Reason,
			Message: d.Message, ObservedGeneration: b.Generation, LastTransitionTime: now,
		})
	}); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "ExpiryBlocked", "Delete", "%s", d.Message)
	return nil
}

// SetupWithManager registers the reconciler for the backups whose expiry may have changed and
// for the storage locations they are blocked on.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return lifecycle.Register("gc", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Backup{}, builder.WithPredicates(expiryChanged())).
		Watches(&cairnv1.BackupStorageLocation{}, handler.EnqueueRequestsFromMapFunc(r.expiredBackupsOf)).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: gcWorkers}),
		r)
}

// expiryChanged passes the backup events that may change decideExpiry's answer, not the
// progress and condition writes of running backups.
func expiryChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*cairnv1.Backup)
			cur, ok2 := e.ObjectNew.(*cairnv1.Backup)
			if !ok1 || !ok2 {
				return false
			}
			return old.Status.Phase != cur.Status.Phase ||
				!old.Status.Expiration.Equal(cur.Status.Expiration) ||
				(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) ||
				old.Annotations[cairnv1.KeepDataAnnotation] != cur.Annotations[cairnv1.KeepDataAnnotation]
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// expiredBackupsOf maps a storage location that changed (or went) to the expired backups
// stored in it (status.storageLocation; empty for a default location), so that one made
// ReadWrite, or created again, lets them go.
func (r *Reconciler) expiredBackupsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	bsl, ok := obj.(*cairnv1.BackupStorageLocation)
	if !ok || bsl.Namespace != r.Namespace {
		return nil
	}
	var backups cairnv1.BackupList
	if err := r.List(ctx, &backups); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Could not list the backups of a storage location that changed", "location", bsl.Name)
		return nil
	}
	now := r.Clock.Now()
	var requests []reconcile.Request
	for i := range backups.Items {
		b := &backups.Items[i]
		stored := b.Status.StorageLocation == bsl.Name || (b.Status.StorageLocation == "" && bsl.Spec.Default)
		if stored && b.DeletionTimestamp == nil && b.Status.Expiration != nil && !now.Before(b.Status.Expiration.Time) {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
		}
	}
	return requests
}
