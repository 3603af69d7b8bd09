package readiness

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
)

// CancelWarningReconciler owns no phase and no status: it tells a user who cancels an object
// of its kind (a backup or a restore) that has already ended that the cancel changes nothing,
// with a Warning event. It sees only the update that set spec.cancel, so each cancel is
// answered once, and never again after a restart. It is written once for both kinds; what
// differs per kind is in its fields (NewCancelWarningReconcilers).
type CancelWarningReconciler[T client.Object] struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Name names the reconciler in Config.Controllers ("cancelwarning", "restorecancelwarning").
	Name string
	// New returns an empty object of the kind.
	New func() T
	// CancelRequested tells whether the object's spec.cancel is set.
	CancelRequested func(T) bool
	// Ignored says why a cancel of the object changes nothing, when it does not (cancelIgnored,
	// restoreCancelIgnored).
	Ignored func(T) (why string, ok bool)
}

// NewCancelWarningReconcilers makes the cancel-warning reconcilers of Backup and Restore: one
// reconciler, with each kind's adapter, set up under each kind's name.
func NewCancelWarningReconcilers(c client.Client, recorder events.EventRecorder) (backups *CancelWarningReconciler[*cairnv1.Backup], restores *CancelWarningReconciler[*cairnv1.Restore]) {
	backups = &CancelWarningReconciler[*cairnv1.Backup]{Client: c, Recorder: recorder, Name: "cancelwarning",
		New:             func() *cairnv1.Backup { return &cairnv1.Backup{} },
		CancelRequested: func(b *cairnv1.Backup) bool { return b.Spec.Cancel },
		Ignored:         cancelIgnored}
	restores = &CancelWarningReconciler[*cairnv1.Restore]{Client: c, Recorder: recorder, Name: "restorecancelwarning",
		New:             func() *cairnv1.Restore { return &cairnv1.Restore{} },
		CancelRequested: func(rs *cairnv1.Restore) bool { return rs.Spec.Cancel },
		Ignored:         restoreCancelIgnored}
	return backups, restores
}

// Reconcile warns about a cancel of a finished object.
func (r *CancelWarningReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.New()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if why, ok := r.Ignored(obj); ok {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "CancelIgnored", "Cancel", why)
	}
	return ctrl.Result{}, nil
}

// cancelIgnored says why a cancel of this backup changes nothing, when it does not.
func cancelIgnored(b *cairnv1.Backup) (string, bool) {
	if !b.Spec.Cancel {
		return "", false
	}
	switch p := b.EffectivePhase(); {
	case p.IsTerminal():
		return "The backup had already ended in phase " + string(p) + "; the cancel changes nothing. Delete the backup to remove its data.", true
	case p == cairnv1.BackupPhaseDeleting || p == cairnv1.BackupPhaseDeletionFailed:
		return "The backup is being deleted; the cancel changes nothing.", true
	}
	return "", false
}

// restoreCancelIgnored says why a cancel of this restore changes nothing, when it does not.
func restoreCancelIgnored(rs *cairnv1.Restore) (string, bool) {
	if !rs.Spec.Cancel || !rs.EffectivePhase().IsTerminal() {
		return "", false
	}
	return "The restore had already ended in phase " + string(rs.EffectivePhase()) + "; the cancel changes nothing. The objects it restored stay; delete them yourself if they must go.", true
}

// SetupWithManager registers the reconciler for the updates of its kind that set spec.cancel
// on an object whose cancel changes nothing.
func (r *CancelWarningReconciler[T]) SetupWithManager(mgr ctrl.Manager) error {
	cancelSet := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(T)
			cur, okNew := e.ObjectNew.(T)
			if !okOld || !okNew || r.CancelRequested(old) {
				return false
			}
			_, ignored := r.Ignored(cur)
			return ignored
		},
	}
	return lifecycle.Register(r.Name, ctrl.NewControllerManagedBy(mgr).
		For(r.New(), builder.WithPredicates(cancelSet)),
		r)
}
