package controller

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

// patchBackupStatus is the one way a reconciler writes a backup's status: mutate applies the
// change to b, which is patched with an optimistic lock and updated in place. A conflict
// (someone wrote first) comes back as an error, and the reconcile is retried on fresh data.
//
// owner is the reconciler that writes (its name in Config.Controllers). A write that changes
// the phase is checked against the owner table (phases.Backup): one the table lacks, or one by
// a reconciler that does not own the phase the backup leaves, is refused (checkPhaseChange)
// and b keeps the status it had.
//
// A write that changes the phase also sets status.phaseTransitionTime (from clk), which the
// phase timeout is measured from, and the kstatus conditions (Ready, Reconciling, Stalled)
// that internal/readiness derives from the new status: no caller has to remember them, and a
// phase change costs one write, not a second one by the readiness reconciler (which then finds
// nothing to change).
func patchBackupStatus(ctx context.Context, c client.Client, clk clock.PassiveClock, owner phases.Owner, b *cairnv1.Backup, mutate func(*cairnv1.BackupStatus)) error {
	old := b.DeepCopy()
	mutate(&b.Status)
	variant := phases.Variant("")
	if old.IsSyncPending() {
		variant = phases.VariantSyncPending
	}
	if err := checkPhaseChange(ctx, phases.Backup, owner, variant, b, phases.Phase(old.Status.Phase), phases.Phase(b.Status.Phase)); err != nil {
		b.Status = old.Status
		return err
	}
	if b.Status.Phase != old.Status.Phase {
		now := metav1.NewTime(clk.Now())
		b.Status.PhaseTransitionTime = &now
	}
	readiness.Apply(&b.Status.Conditions, readiness.Backup(b), clk.Now())
	if err := c.Status().Patch(ctx, b, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("updating the status of backup %s: %w", qualifiedName(b), err)
	}
	return nil
}

// patchRestoreStatus is the one way a reconciler writes a restore's status, as
// patchBackupStatus is for backups: an optimistic-lock patch, a phase change checked against
// the owner table (phases.Restore) for owner, and phaseTransitionTime set on every phase
// change, and the kstatus conditions in the same write. When the write fails (or is refused),
// rs keeps the status it had, so that the rest of a pass sees the restore as the API server
// does.
func patchRestoreStatus(ctx context.Context, c client.Client, clk clock.PassiveClock, owner phases.Owner, rs *cairnv1.Restore, mutate func(*cairnv1.RestoreStatus)) error {
	old := rs.DeepCopy()
	mutate(&rs.Status)
	if err := checkPhaseChange(ctx, phases.Restore, owner, "", rs, phases.Phase(old.Status.Phase), phases.Phase(rs.Status.Phase)); err != nil {
		rs.Status = old.Status
		return err
	}
	if rs.Status.Phase != old.Status.Phase {
		now := metav1.NewTime(clk.Now())
		rs.Status.PhaseTransitionTime = &now
	}
	readiness.Apply(&rs.Status.Conditions, readiness.Restore(rs), clk.Now())
	if err := c.Status().Patch(ctx, rs, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		rs.Status = old.Status
		return fmt.Errorf("updating the status of restore %s: %w", objectName(rs), err)
	}
	return nil
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
		"kind", refused.Kind, "object", objectName(obj), "owner", owner, "from", refused.From, "to", refused.To)
	return fmt.Errorf("updating the status of %s %s: %w", table.Kind, objectName(obj), err)
}

// objectName is namespace/name, for messages.
func objectName(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }
