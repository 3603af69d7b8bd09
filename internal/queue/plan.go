// Package queue holds the decisions of the backup queue (DESIGN.md section 3): the order of
// the queue, which queued backups may start now, why the others wait, and the early validation
// of new backups. The decisions are pure functions; the queue reconciler fetches, calls them
// and writes. Resolutions is the one piece of state: the queue's cache of resolved namespace
// sets, kept between passes.
package queue

import (
	"fmt"
	"sort"
	"strconv"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/scope"
)

// Entry is a backup as the queue sees it.
type Entry struct {
	// Namespace and Name identify the backup.
	Namespace, Name string
	// Namespaces are the namespaces it selects, resolved against the cluster's.
	Namespaces scope.NamespaceSet
	// Location is the name of its storage location.
	Location string
}

// Decision says what to do with one queued backup.
type Decision struct {
	// Start: move it to ReadyToStart now.
	Start bool
	// Reason and Message say why it waits (for the Queued condition); empty when it starts.
	Reason, Message string
}

// Decide walks the queue in order and decides, for each queued backup, whether it starts now.
// A backup starts only if all hold (DESIGN.md section 3):
//   - fewer than limit backups are running (ReadyToStart or InProgress, counting those this
//     call starts);
//   - its namespaces overlap no running backup and no queued backup ahead of it;
//   - no backup in its storage location is being deleted (deleting maps a location to the
//     name of a backup being deleted there).
//
// Walking in order means that an earlier runnable backup always goes first.
func Decide(limit int, running, queued []Entry, deleting map[string]string) []Decision {
	decisions := make([]Decision, len(queued))
	run, ahead := newClaimed(running), newClaimed(nil)
	for i, q := range queued {
		d := decide(limit, run, ahead, deleting, q)
		decisions[i] = d
		if d.Start {
			run.add(q)
		} else {
			ahead.add(q)
		}
	}
	return decisions
}

// claimed are entries in order, with their namespaces indexed, so that finding the first one
// a backup overlaps costs a lookup per namespace of that backup, not a walk over them all.
type claimed struct {
	entries []Entry
	claims  scope.Claims
}

func newClaimed(entries []Entry) *claimed {
	c := &claimed{}
	for _, e := range entries {
		c.add(e)
	}
	return c
}

func (c *claimed) add(e Entry) {
	c.entries = append(c.entries, e)
	c.claims.Add(e.Namespaces)
}

// firstOverlap is the first entry whose namespaces overlap q's, and what they share.
func (c *claimed) firstOverlap(q Entry) (Entry, string, bool) {
	i, shared, ok := c.claims.FirstOverlap(q.Namespaces)
	if !ok {
		return Entry{}, "", false
	}
	return c.entries[i], shared, true
}

// decide gives the most specific reason first: an overlap or a deletion still holds a backup
// back when a concurrency slot frees.
func decide(limit int, running, ahead *claimed, deleting map[string]string, q Entry) Decision {
	if r, ns, ok := running.firstOverlap(q); ok {
		return Decision{Reason: cairnv1.ReasonNamespaceOverlap,
			Message: overlapMessage(ns, "running backup "+displayName(q, r))}
	}
	if a, ns, ok := ahead.firstOverlap(q); ok {
		return Decision{Reason: cairnv1.ReasonNamespaceOverlap,
			Message: overlapMessage(ns, "backup "+displayName(q, a)+" queued ahead")}
	}
	if name, ok := deleting[q.Location]; ok {
		return Decision{Reason: cairnv1.ReasonWaitingForDeletion,
			Message: fmt.Sprintf("waiting for backup %s to be deleted from storage location %s", name, q.Location)}
	}
	if len(running.entries) >= limit {
		return Decision{Reason: cairnv1.ReasonWaitingForConcurrencySlot,
			Message: fmt.Sprintf("concurrency limit %d reached", limit)}
	}
	return Decision{Start: true}
}

func overlapMessage(ns, other string) string {
	if ns == "" {
		return "namespaces overlap " + other + " (one of them selects every namespace)"
	}
	return fmt.Sprintf("namespace %s overlaps %s", ns, other)
}

// displayName names other as seen from q: its bare name in q's namespace, else namespace/name.
func displayName(q, other Entry) string {
	if q.Namespace == other.Namespace {
		return other.Name
	}
	return other.Namespace + "/" + other.Name
}

// Order sorts backups into queue order: queued ones by their position, then new ones by
// creation time; ties by creation time, then by resourceVersion (creation timestamps have
// one-second resolution, and etcd's revisions order the creations within a second), then
// namespace and name. Positions may be stale
// between renumberings; their relative order is always right, because renumbering only closes
// gaps and a new backup always goes after the last position.
func Order(backups []*cairnv1.Backup) {
	sort.SliceStable(backups, func(i, j int) bool {
		a, b := backups[i], backups[j]
		pa, pb := queueRank(a), queueRank(b)
		if pa != pb {
			return pa < pb
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
		rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
		if errA == nil && errB == nil && ra != rb {
			return ra < rb
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}

// queueRank is a backup's place: its position when queued, after every position when new.
func queueRank(b *cairnv1.Backup) int64 {
	if b.EffectivePhase() == cairnv1.BackupPhaseQueued && b.Status.QueuePosition > 0 {
		return int64(b.Status.QueuePosition)
	}
	return 1 << 40
}
