// Package storagelocation holds the reconciler that validates BackupStorageLocations and owns
// their status (all of it but status.lastSyncedTime, which is the sync's).
package storagelocation

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/location"
)

// storageValidationTimeout bounds one validation, so an endpoint that never answers cannot
// hold a reconcile worker.
const storageValidationTimeout = 30 * time.Second

// Reconciler validates storage locations: on create and update, when
// their credential or encryption key Secret changes, and every spec.validationFrequency. It owns the status of
// BackupStorageLocations (phase, message, lastValidationTime, the DefaultConflict condition)
// and no Backup phase.
type Reconciler struct {
	client.Client
	// Namespace is the operator's namespace; locations elsewhere are not watched.
	Namespace string
	Clock     clock.PassiveClock
	Recorder  events.EventRecorder
	Stores    stores.Stores
}

// +kubebuilder:rbac:groups=cairn.dev,resources=backupstoragelocations,verbs=get;list;watch,namespace=cairn-system
// +kubebuilder:rbac:groups=cairn.dev,resources=backupstoragelocations/status,verbs=get;update;patch,namespace=cairn-system
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch,namespace=cairn-system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile validates one location and records the result.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var bsl cairnv1.BackupStorageLocation
	if err := r.Get(ctx, req.NamespacedName, &bsl); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if bsl.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	var all cairnv1.BackupStorageLocationList
	if err := r.List(ctx, &all, client.InNamespace(bsl.Namespace)); err != nil {
		return ctrl.Result{}, err
	}

	// A location whose objects would nest with an older one's is refused before any storage
	// call: deleting a backup of one could remove the other's objects.
	validationErr := error(nil)
	if others := location.Nested(all.Items, &bsl); len(others) > 0 {
		validationErr = location.NestedError(others)
	} else {
		validationErr = r.validate(ctx, &bsl)
	}
	_, conflicting := location.Defaults(all.Items)
	next := locationStatus(bsl.Status, bsl.Generation, validationErr, conflicting, bsl.Spec.Default, metav1.NewTime(r.Clock.Now()))

	if err := r.patchStatus(ctx, &bsl, next); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: validationPeriod(&bsl)}, nil
}

// validate opens the location's store and checks it, within storageValidationTimeout.
func (r *Reconciler) validate(ctx context.Context, bsl *cairnv1.BackupStorageLocation) error {
	ctx, cancel := context.WithTimeout(ctx, storageValidationTimeout)
	defer cancel()
	store, err := r.Stores.Open(ctx, bsl)
	if err != nil {
		return err
	}
	return store.Validate(ctx)
}

func (r *Reconciler) patchStatus(ctx context.Context, bsl *cairnv1.BackupStorageLocation, next cairnv1.BackupStorageLocationStatus) error {
	old := bsl.DeepCopy()
	bsl.Status = next
	if err := r.Status().Patch(ctx, bsl, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			// Someone else wrote first: reconcile again on the fresh object.
			return fmt.Errorf("status of location %s changed meanwhile: %w", bsl.Name, err)
		}
		return err
	}
	// The phase change's event is PhaseWatcher's, as for every kind.
	return nil
}

// locationStatus is the status a location gets from one validation: Available, or Unavailable
// with the error's message; and the DefaultConflict condition when several locations claim to
// be the default.
func locationStatus(prev cairnv1.BackupStorageLocationStatus, generation int64, validationErr error, conflicting []string, isDefault bool, now metav1.Time) cairnv1.BackupStorageLocationStatus {
	next := *prev.DeepCopy()
	next.LastValidationTime = &now
	if validationErr == nil {
		next.Phase, next.Message = cairnv1.StorageLocationPhaseAvailable, ""
	} else {
		next.Phase, next.Message = cairnv1.StorageLocationPhaseUnavailable, validationErr.Error()
	}
	cond := metav1.Condition{
		Type:               cairnv1.StorageLocationConditionDefaultConflict,
		Status:             metav1.ConditionFalse,
		Reason:             cairnv1.ReasonSingleDefault,
		Message:            "At most one location is marked default",
		ObservedGeneration: generation,
	}
	if isDefault && len(conflicting) > 1 {
		cond.Status = metav1.ConditionTrue
		cond.Reason = cairnv1.ReasonMultipleDefaults
		cond.Message = fmt.Sprintf("Several locations are marked default (%s); the oldest, %s, is the default",
			strings.Join(conflicting, ", "), conflicting[0])
	}
	meta.SetStatusCondition(&next.Conditions, cond)
	return next
}

// validationPeriod is when to validate again: spec.validationFrequency, 0 meaning never.
func validationPeriod(bsl *cairnv1.BackupStorageLocation) time.Duration {
	if bsl.Spec.ValidationFrequency == nil {
		return time.Minute
	}
	return bsl.Spec.ValidationFrequency.Duration
}

// SetupWithManager registers the reconciler: its own locations (spec changes only, not its
// own status writes), every location when one that claims the default changes, and the
// locations whose credential Secret or encryption key Secret changed.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return lifecycle.Register("backupstoragelocation", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.BackupStorageLocation{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&cairnv1.BackupStorageLocation{},
			handler.EnqueueRequestsFromMapFunc(r.allLocations),
			builder.WithPredicates(defaultClaimChanged())).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.locationsUsingSecret)),
		r)
}

func (r *Reconciler) allLocations(ctx context.Context, obj client.Object) []reconcile.Request {
	var list cairnv1.BackupStorageLocationList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Could not list storage locations")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, l := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&l)})
	}
	return reqs
}

func (r *Reconciler) locationsUsingSecret(ctx context.Context, obj client.Object) []reconcile.Request {
	var list cairnv1.BackupStorageLocationList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Could not list storage locations")
		return nil
	}
	var reqs []reconcile.Request
	for _, l := range list.Items {
		if l.Spec.Credential != nil && l.Spec.Credential.Name == obj.GetName() ||
			l.Spec.Encryption != nil && l.Spec.Encryption.KeySecretRef.Name == obj.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&l)})
		}
	}
	return reqs
}

// defaultClaimChanged passes events of locations that claim, or stopped claiming, the default.
func defaultClaimChanged() predicate.Predicate {
	claims := func(obj client.Object) bool {
		l, ok := obj.(*cairnv1.BackupStorageLocation)
		return ok && l.Spec.Default
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return claims(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return claims(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return claims(e.ObjectOld) != claims(e.ObjectNew) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
