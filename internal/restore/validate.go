package restore

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/validation"
)

// ValidationFacts are what validating a restore needs to know about the cluster, fetched by the caller.
type ValidationFacts struct {
	// Backup is the backup the restore names (spec.backupName, or what spec.scheduleName
	// resolved to), from the restore's namespace; nil when there is none.
	Backup *cairnv1.Backup
	// Locations are the storage locations in the operator's namespace.
	Locations []cairnv1.BackupStorageLocation
}

// Validate checks what can be checked of a restore before it runs, and returns every problem
// as messages for status.validationErrors (bound them with validation.Cap): its
// filters and the tenancy rule (the backup's own checks, validation.Filters), its
// namespace mapping (a team maps nothing to another namespace), its backup (exists in the
// restore's namespace, Completed or PartiallyFailed, not being deleted, its data not found gone
// from storage by the sync, DataAvailable=False) and the backup's
// storage location (exists, not Unavailable). It is a pure function: the queue calls it on new
// restores, and the restore reconciler again when a restore starts.
func Validate(rs *cairnv1.Restore, operatorNamespace string, facts ValidationFacts) []string {
	errs := validation.Filters("restore", rs.Namespace, rs.Spec.Filters(), operatorNamespace)
	if rs.Namespace != operatorNamespace {
		keys := make([]string, 0, len(rs.Spec.NamespaceMapping))
		for k := range rs.Spec.NamespaceMapping {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, from := range keys {
			if to := rs.Spec.NamespaceMapping[from]; from != rs.Namespace || string(to) != rs.Namespace {
				errs = append(errs, fmt.Sprintf("spec.namespaceMapping: a restore in namespace %s may only restore its own namespace into itself, not %s into %s (only restores in %s may map namespaces)",
					rs.Namespace, from, to, operatorNamespace))
				break
			}
		}
	}
	errs = append(errs, validateBackup(rs, operatorNamespace, facts)...)
	return errs
}

func validateBackup(rs *cairnv1.Restore, operatorNamespace string, facts ValidationFacts) []string {
	b := facts.Backup
	switch {
	case b == nil && rs.Spec.ScheduleName != "":
		return []string{fmt.Sprintf("spec.scheduleName: schedule %s has no Completed backup in namespace %s", rs.Spec.ScheduleName, rs.Namespace)}
	case b == nil:
		return []string{fmt.Sprintf("spec.backupName: backup %s not found in namespace %s (a restore restores only backups of its own namespace)", rs.Spec.BackupName, rs.Namespace)}
	case b.DeletionTimestamp != nil:
		return []string{fmt.Sprintf("backup %s is being deleted", b.Name)}
	case b.Status.Phase != cairnv1.BackupPhaseCompleted && b.Status.Phase != cairnv1.BackupPhasePartiallyFailed:
		phase := b.EffectivePhase()
		return []string{fmt.Sprintf("backup %s is %s: only Completed or PartiallyFailed backups can be restored", b.Name, phase)}
	}
	if message, missing := backupsync.DataMissing(b); missing {
		return []string{fmt.Sprintf("backup %s cannot be restored: %s", b.Name, message)}
	}
	bsl := findLocation(facts.Locations, b.Status.StorageLocation)
	switch {
	case b.Status.StorageLocation == "":
		return []string{fmt.Sprintf("backup %s has no storage location in its status", b.Name)}
	case bsl == nil:
		return []string{fmt.Sprintf("storage location %s of backup %s does not exist", b.Status.StorageLocation, b.Name)}
	case bsl.Status.Phase == cairnv1.StorageLocationPhaseUnavailable && rs.Namespace != operatorNamespace:
		// A team sees nothing of the location's configuration (its status message may name
		// endpoints, buckets, Secrets).
		return []string{fmt.Sprintf("backup %s: %s", b.Name, location.TenantMessage(bsl.Name))}
	case bsl.Status.Phase == cairnv1.StorageLocationPhaseUnavailable:
		return []string{fmt.Sprintf("storage location %s of backup %s is Unavailable: %s", bsl.Name, b.Name, bsl.Status.Message)}
	}
	return nil
}

func findLocation(locations []cairnv1.BackupStorageLocation, name string) *cairnv1.BackupStorageLocation {
	for i := range locations {
		if locations[i].Name == name {
			return &locations[i]
		}
	}
	return nil
}

// NewestScheduleBackup is the newest Completed backup among backups (those of one schedule),
// by the time it started (its creation time when it has none), then name; nil when there is
// none. Not by creation time alone: a backup made by sync from storage (disaster recovery) was
// created when it was synced, not when it was taken.
func NewestScheduleBackup(backups []cairnv1.Backup) *cairnv1.Backup {
	taken := func(b *cairnv1.Backup) metav1.Time {
		if b.Status.StartTimestamp != nil {
			return *b.Status.StartTimestamp
		}
		return b.CreationTimestamp
	}
	var newest *cairnv1.Backup
	for i := range backups {
		b := &backups[i]
		if b.Status.Phase != cairnv1.BackupPhaseCompleted || b.DeletionTimestamp != nil {
			continue
		}
		if newest == nil {
			newest = b
			continue
		}
		nt, bt := taken(newest), taken(b)
		if nt.Before(&bt) || (nt.Equal(&bt) && newest.Name < b.Name) {
			newest = b
		}
	}
	return newest
}
