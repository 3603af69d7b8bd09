package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/readiness"
)

// patchBackupStatus is the one way a reconciler writes a backup's status: mutate applies the
// change to b, which is patched with an optimistic lock and updated in place. A conflict
// (someone wrote first) comes back as an error, and the reconcile is retried on fresh data.
//
// A write that changes the phase also sets status.phaseTransitionTime (from clk), which the
// phase timeout is measured from, and the kstatus conditions (Ready, Reconciling, Stalled)
// that internal/readiness derives from the new status: no caller has to remember them, and a
// phase change costs one write, not a second one by the readiness reconciler (which then finds
// nothing to change).
func patchBackupStatus(ctx context.Context, c client.Client, clk clock.PassiveClock, b *cairnv1.Backup, mutate func(*cairnv1.BackupStatus)) error {
	old := b.DeepCopy()
	mutate(&b.Status)
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
// patchBackupStatus is for backups: an optimistic-lock patch, and phaseTransitionTime set on
// every phase change, and the kstatus conditions in the same write. When the write fails, rs keeps the status it had, so that the rest of a
// pass sees the restore as the API server does.
func patchRestoreStatus(ctx context.Context, c client.Client, clk clock.PassiveClock, rs *cairnv1.Restore, mutate func(*cairnv1.RestoreStatus)) error {
	old := rs.DeepCopy()
	mutate(&rs.Status)
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

// objectName is namespace/name, for messages.
func objectName(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }
