package lifecycle

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/metrics"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/readiness"
)

// PatchStatus is the one way a reconciler writes the status of a backup or a restore (k says
// which kind): mutate applies the change to obj, which is patched with an optimistic lock and
// updated in place. A conflict (someone wrote first) comes back as an error, and the reconcile
// is retried on fresh data.
//
// owner is the reconciler that writes (its name in Config.Controllers). A write that changes
// the phase is checked against the kind's owner table (phases.Backup, phases.Restore): one the
// table lacks, or one by a reconciler that does not own the phase the object leaves, is refused
// (checkPhaseChange).
//
// A write that changes the phase also sets status.phaseTransitionTime (from clk), which the
// phase timeout is measured from, and the kstatus conditions (Ready, Reconciling, Stalled)
// that internal/readiness derives from the new status: no caller has to remember them, and a
// phase change costs one write, not a second one by the readiness reconciler (which then finds
// nothing to change).
//
// One rule for a write that fails or is refused: obj gets back the status it had, so that the
// rest of a pass sees the object as the API server does, and a later write's patch is made
// against what the server holds.
func PatchStatus[O client.Object, S any, P phase](ctx context.Context, c client.Client, clk clock.PassiveClock, k *RunKind[O, S, P], owner phases.Owner, obj O, mutate func(*S)) error {
	old := obj.DeepCopyObject().(O)
	mutate(k.status(obj))
	from, to := k.phaseOf(old), k.phaseOf(obj)
	if err := checkPhaseChange(ctx, k.table, owner, k.variant(old), obj, phases.Phase(from), phases.Phase(to)); err != nil {
		*k.status(obj) = *k.status(old)
		return err
	}
	f := k.fields(k.status(obj))
	if to != from {
		now := metav1.NewTime(clk.Now())
		*f.phaseTransitionTime = &now
	}
	readiness.Apply(f.conditions, k.readiness(obj), clk.Now())
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		*k.status(obj) = *k.status(old)
		return fmt.Errorf("updating the status of %s %s: %w", k.name, ObjectName(obj), err)
	}
	return nil
}

// PatchBackupStatus is PatchStatus for a backup.
func PatchBackupStatus(ctx context.Context, c client.Client, clk clock.PassiveClock, owner phases.Owner, b *cairnv1.Backup, mutate func(*cairnv1.BackupStatus)) error {
	return PatchStatus(ctx, c, clk, Backups, owner, b, mutate)
}

// PatchRestoreStatus is PatchStatus for a restore.
func PatchRestoreStatus(ctx context.Context, c client.Client, clk clock.PassiveClock, owner phases.Owner, rs *cairnv1.Restore, mutate func(*cairnv1.RestoreStatus)) error {
	return PatchStatus(ctx, c, clk, Restores, owner, rs, mutate)
}

// checkPhaseChange checks a status write of obj that moves it from → to against its kind's
// owner table (no change is not checked). A write the table refuses is a programming error in
// its reconciler: it is logged, counted (cairn_refused_phase_transitions_total) and returned,
// never written; the reconcile is retried with backoff, and each retry is refused again.
func checkPhaseChange(ctx context.Context, table *phases.Table, owner phases.Owner, variant phases.Variant, obj client.Object, from, to phases.Phase) error {
	err := table.Check(owner, variant, from, to)
	var refused *phases.RefusedError
	if !errors.As(err, &refused) {
		return err
	}
	metrics.PhaseTransitionRefused(string(refused.Kind), string(refused.From), string(refused.To))
	ctrl.LoggerFrom(ctx).Error(err, "Refused a status write that the phase-owner table does not allow",
		"kind", refused.Kind, "object", ObjectName(obj), "owner", owner, "from", refused.From, "to", refused.To)
	return fmt.Errorf("updating the status of %s %s: %w", table.Kind, ObjectName(obj), err)
}

// ObjectName is namespace/name, for messages.
func ObjectName(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }

// PodVolumeObject is a PodVolumeBackup or a PodVolumeRestore.
type PodVolumeObject interface {
	client.Object
	cairnv1.PodVolumeObject
}

// PatchPodVolumeStatus is the one way the node agent writes the status of a PodVolumeBackup
// or PodVolumeRestore (table is its kind's: phases.PodVolumeBackup, phases.PodVolumeRestore):
// mutate applies the change, a phase change is checked against the table (a refused one is
// never written), and the patch is optimistically locked. On failure obj gets back the status
// it had.
func PatchPodVolumeStatus[T PodVolumeObject](ctx context.Context, c client.Client, table *phases.Table, owner phases.Owner, obj T, mutate func(*cairnv1.PodVolumeStatus)) error {
	old := obj.DeepCopyObject().(T)
	mutate(obj.PodVolumeStatus())
	from, to := old.PodVolumeStatus().Phase, obj.PodVolumeStatus().Phase
	if err := checkPhaseChange(ctx, table, owner, "", obj, phases.Phase(from), phases.Phase(to)); err != nil {
		*obj.PodVolumeStatus() = *old.PodVolumeStatus()
		return err
	}
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		*obj.PodVolumeStatus() = *old.PodVolumeStatus()
		return fmt.Errorf("updating the status of %s %s: %w", table.Kind, obj.GetName(), err)
	}
	return nil
}
