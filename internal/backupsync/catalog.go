package backupsync

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// Catalog holds, per storage location, the committed backups that no backup of the cluster
// stands for, as the last sync pass of that location found them (Plan.Unclaimed): the names
// a new backup must not take there, since writing it would overwrite another Backup object's
// data (another cluster's, or one deleted with cairn.dev/keep-data). The sync reconciler
// writes it; the queue reads it to fail such a backup's validation before it runs. It only
// ever holds what a pass saw; the backup reconciler still checks the store itself before it
// writes. Safe for concurrent use.
type Catalog struct {
	mu     sync.RWMutex
	claims map[string]map[types.NamespacedName]bool
}

// Set replaces what the catalog holds of location.
func (c *Catalog) Set(location string, unclaimed []types.NamespacedName) {
	names := make(map[types.NamespacedName]bool, len(unclaimed))
	for _, n := range unclaimed {
		names[n] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claims == nil {
		c.claims = map[string]map[types.NamespacedName]bool{}
	}
	c.claims[location] = names
}

// Forget drops what the catalog holds of location (gone, or its sync turned off).
func (c *Catalog) Forget(location string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.claims, location)
}

// Holds reports whether location holds a committed backup of that name that no backup of the
// cluster stands for.
func (c *Catalog) Holds(location string, name types.NamespacedName) bool {
	if c == nil {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.claims[location][name]
}

// NameConflict is the validation error of new backup b, bound for location (its access mode
// accessMode), when that location holds a committed backup of the same namespace and name that
// is another Backup object's (held: Catalog.Holds); "" when there is none. A backup that has
// not run has committed nothing, so whatever is committed under its name has another origin
// UID. A ReadOnly location is refused on its own when the backup starts.
func NameConflict(b *cairnv1.Backup, location string, accessMode cairnv1.AccessMode, held bool) string {
	if !held || accessMode == cairnv1.AccessModeReadOnly {
		return ""
	}
	return fmt.Sprintf("storage location %s already holds a committed backup named %s/%s, made by another Backup object (another cluster's, or one deleted with %s); this backup would overwrite it: choose another name, or delete that data first",
		location, b.Namespace, b.Name, cairnv1.KeepDataAnnotation)
}
