// Package readiness holds the reconcilers that report on Cairn's objects and own no phase:
// the kstatus conditions of every kind (Reconciler), an Event and the metrics counters on every
// phase change (PhaseWatcher), and the Warning event on a cancel that changes nothing
// (CancelWarningReconciler). They read the phases their owners wrote (DESIGN.md section 1) and
// never move one.
package readiness

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/readiness"
)

// Reconciler owns the kstatus conditions of one kind — Ready, Reconciling and Stalled
// (cairnv1.ConditionReady...) — and nothing else, as cert-manager's readiness controller does
// for Certificates. It never moves a phase: it reads the phase its owners wrote, derives the
// conditions from it (internal/readiness) and writes them when they differ. Backups and
// restores get them in their owners' own status writes (lifecycle.PatchBackupStatus and
// lifecycle.PatchRestoreStatus apply the same decision), and one no owner has written yet (phase "",
// a backup the sync is making) or being deleted is left to the owner's next write; so for
// them this reconciler writes only what an owner's write left behind (none, in practice). Schedules and locations,
// whose status changes rarely, get their conditions from here.
type Reconciler[T client.Object] struct {
	Client client.Client
	Clock  clock.PassiveClock
	// Kind names the reconciler ("readiness-backup").
	Kind string
	// New returns an empty object of the kind.
	New func() T
	// Conditions returns the object's status.conditions, to be changed in place.
	Conditions func(T) *[]metav1.Condition
	// Decide is internal/readiness's decision for the kind.
	Decide func(T) readiness.Conditions
	// LeftToOwners, when set, says that the object's conditions are its owners' next write's
	// to bring (lifecycle.PatchBackupStatus, lifecycle.PatchRestoreStatus): one no owner has written yet, or one
	// being deleted (its deletion timestamp raised its generation, and the owner moving it on
	// writes the conditions with the new one; kstatus reads a deleted object as Terminating
	// anyway). A write from here would only be one more write, racing the owner's.
	LeftToOwners func(T) bool
}

// Reconcilers are the readiness reconcilers of Backup, Restore, Schedule and
// BackupStorageLocation, set up together.
type Reconcilers []interface{ SetupWithManager(ctrl.Manager) error }

// SetupWithManager registers each of them.
func (rs Reconcilers) SetupWithManager(mgr ctrl.Manager) error {
	for _, r := range rs {
		if err := r.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	return nil
}

// NewReconcilers makes the readiness reconcilers of every kind.
func NewReconcilers(c client.Client, clk clock.PassiveClock) Reconcilers {
	return Reconcilers{
		&Reconciler[*cairnv1.Backup]{Client: c, Clock: clk, Kind: "backup",
			New:          func() *cairnv1.Backup { return &cairnv1.Backup{} },
			Conditions:   func(b *cairnv1.Backup) *[]metav1.Condition { return &b.Status.Conditions },
			Decide:       readiness.Backup,
			LeftToOwners: func(b *cairnv1.Backup) bool { return b.Status.Phase == "" || b.DeletionTimestamp != nil }},
		&Reconciler[*cairnv1.Restore]{Client: c, Clock: clk, Kind: "restore",
			New:          func() *cairnv1.Restore { return &cairnv1.Restore{} },
			Conditions:   func(rs *cairnv1.Restore) *[]metav1.Condition { return &rs.Status.Conditions },
			Decide:       readiness.Restore,
			LeftToOwners: func(rs *cairnv1.Restore) bool { return rs.Status.Phase == "" || rs.DeletionTimestamp != nil }},
		&Reconciler[*cairnv1.Schedule]{Client: c, Clock: clk, Kind: "schedule",
			New:        func() *cairnv1.Schedule { return &cairnv1.Schedule{} },
			Conditions: func(s *cairnv1.Schedule) *[]metav1.Condition { return &s.Status.Conditions },
			Decide:     readiness.Schedule},
		&Reconciler[*cairnv1.BackupStorageLocation]{Client: c, Clock: clk, Kind: "storagelocation",
			New:        func() *cairnv1.BackupStorageLocation { return &cairnv1.BackupStorageLocation{} },
			Conditions: func(l *cairnv1.BackupStorageLocation) *[]metav1.Condition { return &l.Status.Conditions },
			Decide:     readiness.StorageLocation},
	}
}

// Reconcile writes the object's kstatus conditions when its phase says other than they do.
func (r *Reconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.New()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.LeftToOwners != nil && r.LeftToOwners(obj) {
		return ctrl.Result{}, nil
	}
	old := obj.DeepCopyObject().(T)
	if !readiness.Apply(r.Conditions(obj), r.Decide(obj), r.Clock.Now()) {
		return ctrl.Result{}, nil
	}
	err := r.Client.Status().Patch(ctx, obj, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) {
		// Someone wrote first: that write is an update event, which reconciles again on it.
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

// SetupWithManager registers the reconciler for its kind.
func (r *Reconciler[T]) SetupWithManager(mgr ctrl.Manager) error {
	return lifecycle.Register("readiness-"+r.Kind, ctrl.NewControllerManagedBy(mgr).For(r.New()), r)
}
