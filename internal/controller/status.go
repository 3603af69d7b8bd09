package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// patchBackupStatus is the one way a reconciler writes a backup's status: mutate applies the
// change to b, which is patched with an optimistic lock and updated in place. A conflict
// (someone wrote first) comes back as an error, and the reconcile is retried on fresh data.
func patchBackupStatus(ctx context.Context, c client.Client, b *cairnv1.Backup, mutate func(*cairnv1.BackupStatus)) error {
	old := b.DeepCopy()
	mutate(&b.Status)
	if err := c.Status().Patch(ctx, b, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("updating the status of backup %s: %w", qualifiedName(b), err)
	}
	return nil
}
