// Package backupsync holds the decisions of sync from storage (DESIGN.md section 11): which
// committed backups of a location the cluster lacks and gets a Backup object for, which of its
// backups lost their data, which stored names another backup holds, and what a synced Backup
// object and its status are, made from a commit marker. The decisions are pure functions; the
// sync reconciler lists, calls them and writes. Catalog is the one piece of state: the names
// each location holds that no backup of the cluster stands for, which the queue checks new
// backups against.
package backupsync

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

// Input is what one sync pass of a location decides on.
type Input struct {
	// Location is the storage location's name.
	Location string
	// Backups are the cluster's Backup objects, of every namespace, read before Committed:
	// a backup this cluster commits is Completed only after its marker is written, so a
	// listing made after it never misses the marker of a backup the cluster shows Completed.
	Backups []cairnv1.Backup
	// Committed are the backups whose commit marker is in the location.
	Committed []storage.CommittedBackup
	// Namespaces are the cluster's namespaces.
	Namespaces []string
	// Rename, when set, is the other name a committed backup is synced under when a Backup of
	// the cluster that is not the location's holds its own (a Velero location's backups:
	// velerofmt.Rename); nil leaves such a backup out, as a Conflict.
	Rename func(name string) string
}

// Plan is what one sync pass does.
type Plan struct {
	// Create are the committed backups the cluster has no object for: each gets a Backup
	// object in its namespace, made from its commit marker.
	Create []storage.CommittedBackup
	// Complete are this location's synced backups still in phase "": their status is written
	// from their commit marker.
	Complete []types.NamespacedName
	// MarkMissing are this location's Completed or PartiallyFailed backups whose commit marker
	// is gone: DataAvailable=False.
	MarkMissing []types.NamespacedName
	// MarkFound are this location's backups marked DataAvailable=False whose commit marker is
	// back: DataAvailable=True.
	MarkFound []types.NamespacedName
	// MissingNamespaces are the namespaces, sorted, of committed backups that were not synced
	// because the namespace does not exist.
	MissingNamespaces []string
	// Conflicts are the committed backups whose name a Backup object of another location, or a
	// new backup that has not run, holds: they are not synced.
	Conflicts []Conflict
	// Invalid are the committed backups whose namespace or name cannot be a Backup's.
	Invalid []storage.CommittedBackup
	// Unclaimed are the committed backups no backup of the cluster stands for, once the pass
	// has made what it can (missing namespaces, conflicts): the Catalog's entries.
	Unclaimed []types.NamespacedName
	// Renamed are the committed backups synced, or to be made, under Input.Rename's name: the
	// name in the cluster, and the name in storage.
	Renamed map[types.NamespacedName]string
}

// Conflict is a committed backup not synced because a Backup object of the cluster holds its name.
type Conflict struct {
	Stored storage.CommittedBackup
	// Message says which object holds the name.
	Message string
}

// Decide is a sync pass's decision (DESIGN.md section 11). A committed backup is synced when
// the cluster has no Backup object of that namespace and name and the namespace exists; a
// backup being deleted still has its object, so it is never made again (its deletion removes
// the commit marker first). A backup belongs to the location when its status.storageLocation
// names it, or, for one still waiting for the sync to write its status, its annotation
// cairn.dev/synced-from does.
func Decide(in Input) Plan {
	var p Plan
	byName := make(map[types.NamespacedName]*cairnv1.Backup, len(in.Backups))
	for i := range in.Backups {
		b := &in.Backups[i]
		byName[types.NamespacedName{Namespace: b.Namespace, Name: b.Name}] = b
	}
	namespaces := make(map[string]bool, len(in.Namespaces))
	for _, ns := range in.Namespaces {
		namespaces[ns] = true
	}
	committed := make(map[types.NamespacedName]bool, len(in.Committed))
	for _, c := range in.Committed {
		committed[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = true
	}
	missing := map[string]bool{}
	for _, c := range in.Committed {
		key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
		if problem := CheckName(c); problem != "" {
			p.Invalid = append(p.Invalid, c)
			continue
		}
		b, exists := byName[key]
		if in.Rename != nil && (!exists || hasNotRun(b) || !belongsTo(b, in.Location)) {
			if renamed, ok := p.rename(in, c, b, byName, committed); ok {
				committed[renamed] = true
				continue
			}
		}
		switch {
		case !exists && !namespaces[c.Namespace]:
			missing[c.Namespace] = true
			p.Unclaimed = append(p.Unclaimed, key)
		case !exists:
			p.Create = append(p.Create, c)
		case hasNotRun(b):
			// A backup that has not run cannot have committed anything: the marker is another's.
			p.Conflicts = append(p.Conflicts, Conflict{Stored: c, Message: fmt.Sprintf(
				"backup %s/%s of the cluster, which has not run yet, holds the name", b.Namespace, b.Name)})
			p.Unclaimed = append(p.Unclaimed, key)
		case !belongsTo(b, in.Location):
			where := "in no storage location"
			if l := locationOf(b); l != "" {
				where = "in storage location " + l
			}
			p.Conflicts = append(p.Conflicts, Conflict{Stored: c, Message: fmt.Sprintf(
				"backup %s/%s of the cluster, %s, holds the name", b.Namespace, b.Name, where)})
			p.Unclaimed = append(p.Unclaimed, key)
		}
	}
	for i := range in.Backups {
		b := &in.Backups[i]
		key := types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
		if !belongsTo(b, in.Location) {
			continue
		}
		if b.IsSyncPending() {
			p.Complete = append(p.Complete, key)
			continue
		}
		if b.DeletionTimestamp != nil || (b.Status.Phase != cairnv1.BackupPhaseCompleted && b.Status.Phase != cairnv1.BackupPhasePartiallyFailed) {
			continue
		}
		dataMissing := meta.IsStatusConditionFalse(b.Status.Conditions, cairnv1.BackupConditionDataAvailable)
		switch {
		case !committed[key] && !dataMissing:
			p.MarkMissing = append(p.MarkMissing, key)
		case committed[key] && dataMissing:
			p.MarkFound = append(p.MarkFound, key)
		}
	}
	for ns := range missing {
		p.MissingNamespaces = append(p.MissingNamespaces, ns)
	}
	slices.Sort(p.MissingNamespaces)
	return p
}

// rename decides for committed backup c, whose own name is free (b nil) or held by Backup b of
// another origin, under Input.Rename's name: it is synced there already (a Backup of the
// location holds it: kept there, even once the own name is free again, so that a backup is
// never shown twice), or it is made there (b holds the own name and nothing the new one). ok
// is false when the new name does not apply: c keeps its own name (free), or is a Conflict
// (both names are held, or the new one is another committed backup's).
func (p *Plan) rename(in Input, c storage.CommittedBackup, b *cairnv1.Backup, byName map[types.NamespacedName]*cairnv1.Backup, committed map[types.NamespacedName]bool) (types.NamespacedName, bool) {
	renamed := storage.CommittedBackup{Namespace: c.Namespace, Name: in.Rename(c.Name)}
	key := types.NamespacedName{Namespace: renamed.Namespace, Name: renamed.Name}
	if committed[key] || CheckName(renamed) != "" {
		return key, false
	}
	other, taken := byName[key]
	switch {
	case taken && belongsTo(other, in.Location):
	case taken, b == nil:
		return key, false
	case !namespaceExists(in, c.Namespace):
		return key, false
	default:
		p.Create = append(p.Create, renamed)
	}
	if p.Renamed == nil {
		p.Renamed = map[types.NamespacedName]string{}
	}
	p.Renamed[key] = c.Name
	return key, true
}

func namespaceExists(in Input, namespace string) bool {
	return slices.Contains(in.Namespaces, namespace)
}

// Changed reports whether the pass has anything to write.
func (p Plan) Changed() bool {
	return len(p.Create)+len(p.Complete)+len(p.MarkMissing)+len(p.MarkFound) > 0
}

// hasNotRun reports whether a backup is new or queued: not one the sync made, and not started.
func hasNotRun(b *cairnv1.Backup) bool {
	p := b.EffectivePhase()
	return !b.IsSyncPending() && (p == cairnv1.BackupPhaseNew || p == cairnv1.BackupPhaseQueued)
}

// belongsTo reports whether backup b is one of location's: its status names it, or it waits
// for the sync of that location.
func belongsTo(b *cairnv1.Backup, location string) bool {
	return locationOf(b) == location
}

// locationOf is the location a backup is in, as far as the cluster knows: status.storageLocation,
// the location a synced backup came from, or else the one its spec names (a new backup's).
func locationOf(b *cairnv1.Backup) string {
	switch {
	case b.Status.StorageLocation != "":
		return b.Status.StorageLocation
	case b.IsSyncPending():
		return b.Annotations[cairnv1.SyncedFromAnnotation]
	}
	return b.Spec.StorageLocation
}

// MaxBackupNameLength is the longest name a Backup may have (the CRD's rule).
const MaxBackupNameLength = 200

// CheckName says why a stored backup's namespace or name cannot be a Backup's (a marker
// written by hand, or by something else than Cairn); "" when they can.
func CheckName(c storage.CommittedBackup) string {
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return fmt.Sprintf("namespace %q: %s", c.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(c.Name); len(errs) > 0 {
		return fmt.Sprintf("name %q: %s", c.Name, strings.Join(errs, "; "))
	}
	if len(c.Name) > MaxBackupNameLength {
		return fmt.Sprintf("name %q: longer than %d characters", c.Name, MaxBackupNameLength)
	}
	return ""
}

// DataMissing reports whether a backup's data was found gone from its storage location
// (DataAvailable=False), and the condition's message.
func DataMissing(b *cairnv1.Backup) (string, bool) {
	c := meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionDataAvailable)
	if c == nil || c.Status != metav1.ConditionFalse {
		return "", false
	}
	return c.Message, true
}

// DataUID is the UID a backup's data is committed under in storage: the origin's, for a
// backup synced from storage, else the backup's own.
func DataUID(b *cairnv1.Backup) string {
	if b.Status.OriginUID != "" {
		return b.Status.OriginUID
	}
	return string(b.UID)
}
