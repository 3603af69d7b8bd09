package controller

import (
	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
)

// dataMissing reports whether sync from storage found the backup's data gone from its
// location (DataAvailable=False): the deletion reconciler then lets it go without a storage call.
func dataMissing(b *cairnv1.Backup) bool {
	_, missing := backupsync.DataMissing(b)
	return missing
}
