package controller

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
)

// CancelWarningReconciler owns no phase: it tells a user who cancels a backup that has already
// ended (Completed, PartiallyFailed, Failed, FailedValidation, or one being deleted) that the
// cancel changes nothing, with a Warning event. It sees only the update that set spec.cancel,
// so each cancel is answered once, and never again after a restart.
type CancelWarningReconciler struct {
	client.Client
	Recorder events.EventRecorder
}

// Reconcile warns about a cancel of a finished backup.
func (r *CancelWarningReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b cairnv1.Backup
	if err := r.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if why, ok := cancelIgnored(&b); ok {
		r.Recorder.Eventf(&b, nil, corev1.EventTypeWarning, "CancelIgnored", "Cancel", why)
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

// SetupWithManager registers the reconciler for updates that set spec.cancel.
func (r *CancelWarningReconciler) SetupWithManager(mgr ctrl.Manager) error {
	cancelSet := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*cairnv1.Backup)
			cur, okNew := e.ObjectNew.(*cairnv1.Backup)
			if !okOld || !okNew || old.Spec.Cancel {
				return false
			}
			_, ignored := cancelIgnored(cur)
			return ignored
		},
	}
	return register("cancelwarning", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Backup{}, builder.WithPredicates(cancelSet)),
		r)
}

// RestoreCancelWarningReconciler is CancelWarningReconciler for restores: a Warning event
// tells a user who cancels a restore that has already ended that the cancel changes nothing.
type RestoreCancelWarningReconciler struct {
	client.Client
	Recorder events.EventRecorder
}

// Reconcile warns about a cancel of a finished restore.
func (r *RestoreCancelWarningReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rs cairnv1.Restore
	if err := r.Get(ctx, req.NamespacedName, &rs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if why, ok := restoreCancelIgnored(&rs); ok {
		r.Recorder.Eventf(&rs, nil, corev1.EventTypeWarning, "CancelIgnored", "Cancel", why)
	}
	return ctrl.Result{}, nil
}

// restoreCancelIgnored says why a cancel of this restore changes nothing, when it does not.
func restoreCancelIgnored(rs *cairnv1.Restore) (string, bool) {
	if !rs.Spec.Cancel || !rs.EffectivePhase().IsTerminal() {
		return "", false
	}
	return "The restore had already ended in phase " + string(rs.EffectivePhase()) + "; the cancel changes nothing. The objects it restored stay; delete them yourself if they must go.", true
}

// SetupWithManager registers the reconciler for updates that set spec.cancel.
func (r *RestoreCancelWarningReconciler) SetupWithManager(mgr ctrl.Manager) error {
	cancelSet := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*cairnv1.Restore)
			cur, okNew := e.ObjectNew.(*cairnv1.Restore)
			if !okOld || !okNew || old.Spec.Cancel {
				return false
			}
			_, ignored := restoreCancelIgnored(cur)
			return ignored
		},
	}
	return register("restorecancelwarning", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Restore{}, builder.WithPredicates(cancelSet)),
		r)
}
