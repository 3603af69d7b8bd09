package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
)

// What other owners act on of the sync's findings: the queue refuses a new backup's name that
// a location's catalog holds, and the deletion lets a backup whose data is gone go without a
// storage call.

// syncNameConflict is the validation error of a new backup, bound for location name, when
// that location holds a committed backup of the same name that another Backup object made
// (backupsync.NameConflict, from the sync's catalog); nil when there is none.
func syncNameConflict(catalog *backupsync.Catalog, b *cairnv1.Backup, name string, locations []cairnv1.BackupStorageLocation) []string {
	if name == "" {
		return nil
	}
	for i := range locations {
		if l := &locations[i]; l.Name == name {
			held := catalog.Holds(name, client.ObjectKeyFromObject(b))
			if msg := backupsync.NameConflict(b, name, l.Spec.AccessMode, held); msg != "" {
				return []string{"metadata.name: " + msg}
			}
		}
	}
	return nil
}

// dataMissing reports whether sync from storage found the backup's data gone from its
// location (DataAvailable=False): the deletion reconciler then lets it go without a storage call.
func dataMissing(b *cairnv1.Backup) bool {
	_, missing := backupsync.DataMissing(b)
	return missing
}
