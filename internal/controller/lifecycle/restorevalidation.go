package lifecycle

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/restore"
)

// RestoreValidationFacts fetches what restore.Validate needs: the restore's backup (by name,
// or the newest Completed one of its schedule) and the storage locations. backupName is the
// backup the restore reads ("" when a schedule has none). The queue validates a new restore
// with it, and the restore reconciler validates it again when it starts: both on the same facts.
func RestoreValidationFacts(ctx context.Context, c client.Reader, operatorNamespace string, rs *cairnv1.Restore) (facts restore.ValidationFacts, backupName string, err error) {
	if rs.Spec.ScheduleName != "" {
		var backups cairnv1.BackupList
		if err := c.List(ctx, &backups, client.InNamespace(rs.Namespace), client.MatchingLabels{cairnv1.ScheduleNameLabel: rs.Spec.ScheduleName}); err != nil {
			return facts, "", err
		}
		facts.Backup = restore.NewestScheduleBackup(backups.Items)
	} else {
		var b cairnv1.Backup
		err := c.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: rs.Spec.BackupName}, &b)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return facts, "", err
		default:
			facts.Backup = &b
		}
	}
	if facts.Backup != nil {
		backupName = facts.Backup.Name
	} else {
		backupName = rs.Spec.BackupName
	}
	var locations cairnv1.BackupStorageLocationList
	if err := c.List(ctx, &locations, client.InNamespace(operatorNamespace)); err != nil {
		return facts, "", err
	}
	facts.Locations = locations.Items
	return facts, backupName, nil
}
