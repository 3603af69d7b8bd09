package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
)

// What the queue acts on of the sync's findings: it refuses a new backup's name that a
// location's catalog holds. (The deletion reads the other, a backup's data found gone, from the
// backup itself: deletion.deletionInputOf.)

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
