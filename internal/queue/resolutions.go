package queue

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/selection"
)

// Resolutions remembers, between passes of the queue, the namespaces each backup selects, so
// that a pass does not match every backup's patterns against every namespace of the cluster
// again. An entry is keyed by the backup's UID and generation and holds for one list of cluster
// namespaces: a new generation resolves the backup again, and a change of the namespace list
// forgets every entry. Entries of backups a pass did not ask about (deleted, or no longer
// waiting or running) are forgotten at the end of that pass, so memory follows the queue.
//
// Resolving still goes through scope (ForBackup, then Resolve): this only keeps the answers.
// The queue runs on one thread; Resolutions is not safe for concurrent use.
type Resolutions struct {
	operatorNamespace string
	namespaces        []string
	entries           map[types.UID]resolution
	pass              uint64
}

type resolution struct {
	generation int64
	set        selection.NamespaceSet
	// pass is the last pass that asked for it.
	pass uint64
}

// NewResolutions returns an empty cache for the queue of the operator in operatorNamespace.
func NewResolutions(operatorNamespace string) *Resolutions {
	return &Resolutions{operatorNamespace: operatorNamespace, entries: map[types.UID]resolution{}}
}

// Begin starts a pass over the cluster's namespaces; it keeps the slice, and sorts it. When
// they are not those of the previous pass, every entry is forgotten.
func (r *Resolutions) Begin(clusterNamespaces []string) {
	r.pass++
	slices.Sort(clusterNamespaces)
	if !slices.Equal(clusterNamespaces, r.namespaces) {
		clear(r.entries)
	}
	r.namespaces = clusterNamespaces
}

// Resolve returns the namespaces b selects among the cluster's namespaces given to Begin. The
// set is shared with later passes: callers must not change it.
func (r *Resolutions) Resolve(b *cairnv1.Backup) selection.NamespaceSet {
	if b.UID == "" { // not from the API server: nothing to key it by
		return selection.ForBackup(b, r.operatorNamespace).Resolve(r.namespaces)
	}
	e, ok := r.entries[b.UID]
	if !ok || e.generation != b.Generation {
		e = resolution{generation: b.Generation, set: selection.ForBackup(b, r.operatorNamespace).Resolve(r.namespaces)}
	}
	e.pass = r.pass
	r.entries[b.UID] = e
	return e.set
}

// End ends the pass: it forgets the backups that the pass did not resolve.
func (r *Resolutions) End() {
	for uid, e := range r.entries {
		if e.pass != r.pass {
			delete(r.entries, uid)
		}
	}
}

// Len is the number of backups remembered.
func (r *Resolutions) Len() int { return len(r.entries) }
