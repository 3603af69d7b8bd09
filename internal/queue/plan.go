// Package queue holds the decisions of the queue of backups and restores (DESIGN.md sections
// 3 and 9): the order of the one line both kinds wait in, which queued ones may start now, why
// the others wait, the namespaces a restore may write into, and the early validation of new
// backups. The decisions are pure functions; the queue reconciler fetches, calls them and
// writes. Resolutions is the one piece of state: the queue's cache of resolved namespace sets,
// kept between passes.
package queue

import (
	"fmt"
	"sort"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/selection"
)

// Kind is what waits in the queue: a backup or a restore. The zero value is a backup.
type Kind int

const (
	KindBackup Kind = iota
	KindRestore
)

// String is the kind as messages name it: "backup" or "restore".
func (k Kind) String() string {
	if k == KindRestore {
		return "restore"
	}
	return "backup"
}

// Entry is a backup or a restore as the queue sees it.
type Entry struct {
	// Kind says whether it is a backup or a restore.
	Kind Kind
	// Namespace and Name identify the object.
	Namespace, Name string
	// Namespaces are, for a backup, the namespaces it selects, resolved against the cluster's;
	// for a restore, the namespaces it may write into (RestoreTargets).
	Namespaces selection.NamespaceSet
	// Location is the name of a backup's storage location (the deletion lock); a restore's is
	// not used.
	Location string
}

// Limits are the concurrency slots of each kind: how many backups (--concurrent-backups) and
// how many restores (--concurrent-restores) may run at once. The kinds do not share slots.
type Limits struct {
	Backups, Restores int
}

func (l Limits) of(k Kind) int {
	if k == KindRestore {
		return l.Restores
	}
	return l.Backups
}

// Decision says what to do with one queued backup.
type Decision struct {
	// Start: move it to ReadyToStart now.
	Start bool
	// Reason and Message say why it waits (for the Queued condition); empty when it starts.
	Reason, Message string
}

// Decide walks the queue (backups and restores in one line) in order and decides, for each
// queued entry, whether it starts now. An entry starts only if all hold (DESIGN.md sections 3
// and 9):
//   - its namespaces overlap no running backup or restore (ReadyToStart or InProgress,
//     counting those this call starts) and no backup or restore queued ahead of it: nothing
//     that touches the same namespace runs at once, whatever the kinds, and the line keeps
//     its order across kinds;
//   - for a backup: no backup in its storage location is being deleted (deleting maps a
//     location to the name of a backup being deleted there);
//   - fewer running entries of its kind than its kind's limit.
//
// Walking in order means that an earlier runnable entry always goes first.
func Decide(limits Limits, running, queued []Entry, deleting map[string]string) []Decision {
	decisions := make([]Decision, len(queued))
	run, ahead := newClaimed(running), newClaimed(nil)
	for i, q := range queued {
		d := decide(limits, run, ahead, deleting, q)
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
	claims  selection.Claims
	// count is the number of entries of each kind.
	count [2]int
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
	c.count[e.Kind]++
}

// firstOverlap is the first entry whose namespaces overlap q's, and what they share.
func (c *claimed) firstOverlap(q Entry) (Entry, string, bool) {
	i, shared, ok := c.claims.FirstOverlap(q.Namespaces)
	if !ok {
		return Entry{}, "", false
	}
	return c.entries[i], shared, true
}

// decide gives the most specific reason first: an overlap or a deletion still holds an entry
// back when a concurrency slot frees.
func decide(limits Limits, running, ahead *claimed, deleting map[string]string, q Entry) Decision {
	if r, ns, ok := running.firstOverlap(q); ok {
		return Decision{Reason: cairnv1.ReasonNamespaceOverlap,
			Message: overlapMessage(ns, "running "+r.Kind.String()+" "+displayName(q, r))}
	}
	if a, ns, ok := ahead.firstOverlap(q); ok {
		return Decision{Reason: cairnv1.ReasonNamespaceOverlap,
			Message: overlapMessage(ns, a.Kind.String()+" "+displayName(q, a)+" queued ahead")}
	}
	if name, ok := deleting[q.Location]; ok && q.Kind == KindBackup {
		return Decision{Reason: cairnv1.ReasonWaitingForDeletion,
			Message: fmt.Sprintf("waiting for backup %s to be deleted from storage location %s", name, q.Location)}
	}
	if limit := limits.of(q.Kind); running.count[q.Kind] >= limit {
		return Decision{Reason: cairnv1.ReasonWaitingForConcurrencySlot, Message: slotMessage(q.Kind, limit)}
	}
	return Decision{Start: true}
}

// slotMessage says that every slot of kind k is taken. A backup's keeps the words it had
// before restores joined the queue.
func slotMessage(k Kind, limit int) string {
	if k == KindRestore {
		return fmt.Sprintf("restore concurrency limit %d reached", limit)
	}
	return fmt.Sprintf("concurrency limit %d reached", limit)
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

// Order sorts the waiting backups and restores into one queue order: queued ones by their
// position (both kinds share the positions 1..n), then new ones by creation time; ties by
// creation time, then by resourceVersion (creation timestamps have one-second resolution,
// and etcd's revisions, shared by every kind, order the creations within a second), then
// namespace and name. Positions may be stale between renumberings; their relative order is
// always right, because renumbering only closes gaps and a new entry always goes after the
// last position. Items other than *Backup and *Restore count as new.
func Order[T metav1.Object](waiting []T) {
	sort.SliceStable(waiting, func(i, j int) bool {
		a, b := waiting[i], waiting[j]
		pa, pb := queueRank(a), queueRank(b)
		if pa != pb {
			return pa < pb
		}
		ca, cb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
		if !ca.Equal(&cb) {
			return ca.Before(&cb)
		}
		ra, errA := strconv.ParseUint(a.GetResourceVersion(), 10, 64)
		rb, errB := strconv.ParseUint(b.GetResourceVersion(), 10, 64)
		if errA == nil && errB == nil && ra != rb {
			return ra < rb
		}
		if a.GetNamespace() != b.GetNamespace() {
			return a.GetNamespace() < b.GetNamespace()
		}
		return a.GetName() < b.GetName()
	})
}

// queueRank is a waiting object's place: its position when queued, after every position when new.
func queueRank(o metav1.Object) int64 {
	const unplaced = 1 << 40
	switch x := o.(type) {
	case *cairnv1.Backup:
		if x.EffectivePhase() == cairnv1.BackupPhaseQueued && x.Status.QueuePosition > 0 {
			return int64(x.Status.QueuePosition)
		}
	case *cairnv1.Restore:
		if x.EffectivePhase() == cairnv1.RestorePhaseQueued && x.Status.QueuePosition > 0 {
			return int64(x.Status.QueuePosition)
		}
	}
	return unplaced
}
