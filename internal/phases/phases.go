// Package phases holds the phase-owner tables of DESIGN.md (section 1 for backups, 9 for
// restores, 16 for pod volume backups and restores) as data: for each kind, its phases, the
// reconciler that owns each one, and the arrows (phase changes) that owner may write.
//
// The status writers check every phase change against these tables (Table.Check) and refuse
// one that is not an arrow, or that is written by a reconciler that does not own the phase it
// leaves; docs/architecture.md's owner tables are generated from them (Markdown, run by
// hack/phasetables through 'make docs'), so the prose cannot drift from the code.
package phases

import (
	"fmt"
	"slices"
)

// Kind names the kind of object a table is for, as in its apiVersion/kind.
type Kind string

// The kinds with an owner table.
const (
	KindBackup           Kind = "Backup"
	KindRestore          Kind = "Restore"
	KindPodVolumeBackup  Kind = "PodVolumeBackup"
	KindPodVolumeRestore Kind = "PodVolumeRestore"
)

// Owner names a reconciler that writes status: its name in the manager's Controllers
// (internal/controller, Config.Controllers), or the node agent. Every status write says which
// one writes it; a phase change is accepted only from the owner of the phase left.
type Owner string

// The owners of phases.
const (
	OwnerQueue             Owner = "queue"
	OwnerBackup            Owner = "backup"
	OwnerOperations        Owner = "operations"
	OwnerFinalizer         Owner = "finalizer"
	OwnerDeletion          Owner = "deletion"
	OwnerSync              Owner = "sync"
	OwnerRestore           Owner = "restore"
	OwnerRestoreOperations Owner = "restoreoperations"
	OwnerRestoreFinalizer  Owner = "restorefinalizer"
	// OwnerNodeAgent is the node agent of the object's spec.node (DESIGN.md section 16).
	OwnerNodeAgent Owner = "nodeagent"
	// OwnerGC owns no phase: it writes a backup's Expired condition, never its phase.
	OwnerGC Owner = "gc"
)

// Owners lists every owner, for tests and checks that walk them.
var Owners = []Owner{
	OwnerQueue, OwnerBackup, OwnerOperations, OwnerFinalizer, OwnerDeletion, OwnerSync,
	OwnerRestore, OwnerRestoreOperations, OwnerRestoreFinalizer, OwnerNodeAgent, OwnerGC,
}

// Phase is a value of an object's status.phase. The empty phase of a just-created object is
// its table's Initial phase.
type Phase string

// Variant tells apart objects in the same phase that different reconcilers own; "" is the
// ordinary case.
type Variant string

// VariantSyncPending is a Backup in phase "" with the annotation cairn.dev/synced-from: made by
// the sync from storage, which writes its status (DESIGN.md section 11); the queue never takes
// it.
const VariantSyncPending Variant = "sync-pending"

// An Arrow is a phase change its state's owner may write.
type Arrow struct {
	// To is the phase it goes to.
	To Phase
	// When says when it is taken, for the docs ("" when the phase says it).
	When string
}

// A State is one row of an owner table: phases (usually one) that share a meaning, an owner
// and arrows.
type State struct {
	Phases []Phase
	// Variant is "" but for objects that a condition beyond their phase gives another owner.
	Variant Variant
	// Shown replaces the phase column in the docs when set (a variant says what it is).
	Shown string
	// Meaning says what an object in these phases is, for the docs.
	Meaning string
	// Owner moves objects out of these phases; "" when no one does (terminal).
	Owner Owner
	// Arrows are the phase changes Owner may write.
	Arrows []Arrow
	// Ends is an end that is no phase write (the object goes), for the docs; "" for none.
	Ends string
}

// A Table is the owner table of one kind.
type Table struct {
	Kind Kind
	// Initial is the phase that an empty status.phase stands for.
	Initial Phase
	States  []State
}

// Normal is p, with the empty phase read as the table's Initial phase.
func (t *Table) Normal(p Phase) Phase {
	if p == "" {
		return t.Initial
	}
	return p
}

// State is the row of phase p (normalised) in variant v.
func (t *Table) State(v Variant, p Phase) (State, bool) {
	p = t.Normal(p)
	for _, s := range t.States {
		if s.Variant == v && slices.Contains(s.Phases, p) {
			return s, true
		}
	}
	return State{}, false
}

// Phases lists every phase of the table once, in the table's order.
func (t *Table) Phases() []Phase {
	var out []Phase
	for _, s := range t.States {
		for _, p := range s.Phases {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// Allows reports whether the state has an arrow to p.
func (s State) Allows(p Phase) bool {
	return slices.ContainsFunc(s.Arrows, func(a Arrow) bool { return a.To == p })
}

// RefusedError is a phase change the owner table lacks: a programming error in the reconciler
// that tried to write it.
type RefusedError struct {
	Kind    Kind
	Owner   Owner
	Variant Variant
	// From and To are the phases, normalised (Table.Normal).
	From, To Phase
	// Reason says which rule the change breaks.
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("reconciler %q may not move a %s from %s to %s: %s", e.Owner, e.Kind, e.From, e.To, e.Reason)
}

// Check says whether owner may write the phase change from → to on an object of the table's
// kind in variant v: nil when from and to are the same phase (no change) or when owner owns
// from and the table has the arrow, else a *RefusedError saying why not.
func (t *Table) Check(owner Owner, v Variant, from, to Phase) error {
	from, to = t.Normal(from), t.Normal(to)
	if from == to {
		return nil
	}
	refuse := func(format string, args ...any) error {
		return &RefusedError{Kind: t.Kind, Owner: owner, Variant: v, From: from, To: to, Reason: fmt.Sprintf(format, args...)}
	}
	s, ok := t.State(v, from)
	switch {
	case !ok && v != "":
		return refuse("the %s table has no phase %s for %s objects", t.Kind, from, v)
	case !ok:
		return refuse("the %s table has no phase %s", t.Kind, from)
	case s.Owner == "":
		return refuse("no reconciler moves a %s out of %s", t.Kind, from)
	case s.Owner != owner:
		return refuse("%s is owned by %q", from, s.Owner)
	case !s.Allows(to):
		return refuse("the %s table has no arrow %s → %s", t.Kind, from, to)
	}
	return nil
}

// Validate checks the table itself: every phase is in one state per variant, every arrow goes
// to a phase of the table and not back to its own, and a state without an owner has no arrows.
func (t *Table) Validate() error {
	seen := map[Variant]map[Phase]bool{}
	all := t.Phases()
	for _, s := range t.States {
		if seen[s.Variant] == nil {
			seen[s.Variant] = map[Phase]bool{}
		}
		for _, p := range s.Phases {
			if seen[s.Variant][p] {
				return fmt.Errorf("%s: phase %s is in two states", t.Kind, p)
			}
			seen[s.Variant][p] = true
		}
		if s.Owner == "" && len(s.Arrows) > 0 {
			return fmt.Errorf("%s: phases %v have arrows but no owner", t.Kind, s.Phases)
		}
		for _, a := range s.Arrows {
			if !slices.Contains(all, a.To) {
				return fmt.Errorf("%s: an arrow from %v goes to %s, which is no phase of the table", t.Kind, s.Phases, a.To)
			}
			if slices.Contains(s.Phases, a.To) {
				return fmt.Errorf("%s: an arrow from %v goes back to %s, which is no phase change", t.Kind, s.Phases, a.To)
			}
		}
	}
	if !seen[""][t.Initial] {
		return fmt.Errorf("%s: the initial phase %s is in no state", t.Kind, t.Initial)
	}
	return nil
}

// Tables lists every kind's table, in the order of the docs.
func Tables() []*Table { return []*Table{Backup, Restore, PodVolumeBackup, PodVolumeRestore} }
