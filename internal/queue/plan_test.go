package queue

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/selection"
)

func entry(name string, namespaces ...string) Entry {
	return Entry{Namespace: "cairn-system", Name: name, Namespaces: selection.NamespaceSet{Names: namespaces}, Location: "default"}
}

func everything(name string) Entry {
	return Entry{Namespace: "cairn-system", Name: name, Namespaces: selection.NamespaceSet{All: true}, Location: "default"}
}

// restoreEntry is an admin restore into namespaces.
func restoreEntry(name string, namespaces ...string) Entry {
	e := entry(name, namespaces...)
	e.Kind = KindRestore
	return e
}

func at(e Entry, location string) Entry {
	e.Location = location
	return e
}

// started lists the names of the queued entries that Decide starts.
func started(queued []Entry, ds []Decision) []string {
	var out []string
	for i, d := range ds {
		if d.Start {
			out = append(out, queued[i].Name)
		}
	}
	return out
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		// limit is the backups' limit; restoreLimit the restores' (1 when unset).
		limit, restoreLimit int
		running             []Entry
		queued              []Entry
		deleting            map[string]string
		want                []string
		// wantWhy maps a waiting backup to its expected message.
		wantWhy map[string]string
	}{
		{
			name:    "the seed's five backups: only backup5 starts",
			limit:   2,
			running: []Entry{entry("backup1", "ns1", "ns2")},
			queued: []Entry{
				entry("backup2", "ns2", "ns3", "ns5"),
				entry("backup3", "ns3", "ns4"),
				entry("backup4", "ns5", "ns6"),
				entry("backup5", "ns8", "ns9"),
			},
			want: []string{"backup5"},
			wantWhy: map[string]string{
				"backup2": "namespace ns2 overlaps running backup backup1",
				"backup3": "namespace ns3 overlaps backup backup2 queued ahead",
				"backup4": "namespace ns5 overlaps backup backup2 queued ahead",
			},
		},
		{
			name:    "concurrency limit counts running and just-started backups",
			limit:   2,
			running: []Entry{entry("r", "a")},
			queued:  []Entry{entry("q1", "b"), entry("q2", "c")},
			want:    []string{"q1"},
			wantWhy: map[string]string{"q2": "concurrency limit 2 reached"},
		},
		{
			name:   "several start in one pass when slots allow",
			limit:  3,
			queued: []Entry{entry("q1", "a"), entry("q2", "b"), entry("q3", "c"), entry("q4", "d")},
			want:   []string{"q1", "q2", "q3"},
		},
		{
			name:    "the earlier runnable backup goes first",
			limit:   1,
			queued:  []Entry{entry("early", "a"), entry("late", "b")},
			want:    []string{"early"},
			wantWhy: map[string]string{"late": "concurrency limit 1 reached"},
		},
		{
			name:    "a cluster-wide running backup blocks everything",
			limit:   4,
			running: []Entry{everything("full")},
			queued:  []Entry{entry("q1", "a")},
			wantWhy: map[string]string{"q1": "namespaces overlap running backup full (one of them selects every namespace)"},
		},
		{
			name:    "a queued cluster-wide backup waits for every running one and blocks those behind it",
			limit:   4,
			running: []Entry{entry("r", "a")},
			queued:  []Entry{everything("full"), entry("q2", "z")},
			wantWhy: map[string]string{
				"full": "namespaces overlap running backup r (one of them selects every namespace)",
				"q2":   "namespaces overlap backup full queued ahead (one of them selects every namespace)",
			},
		},
		{
			name:    "a cluster-wide backup starts when nothing runs, then blocks the rest",
			limit:   4,
			queued:  []Entry{everything("full"), entry("q2", "z")},
			want:    []string{"full"},
			wantWhy: map[string]string{"q2": "namespaces overlap running backup full (one of them selects every namespace)"},
		},
		{
			name:     "deletion lock: a backup in a location being deleted from waits, others go",
			limit:    4,
			queued:   []Entry{at(entry("q1", "a"), "s3"), at(entry("q2", "b"), "default")},
			deleting: map[string]string{"s3": "old-backup"},
			want:     []string{"q2"},
			wantWhy:  map[string]string{"q1": "waiting for backup old-backup to be deleted from storage location s3"},
		},
		{
			name:     "a backup waiting for a deletion still blocks overlapping ones behind it",
			limit:    4,
			queued:   []Entry{at(entry("q1", "a"), "s3"), entry("q2", "a")},
			deleting: map[string]string{"s3": "old"},
			wantWhy:  map[string]string{"q2": "namespace a overlaps backup q1 queued ahead"},
		},
		{
			name:    "backups in other namespaces are named with their namespace",
			limit:   4,
			running: []Entry{{Namespace: "team-a", Name: "mine", Namespaces: selection.NamespaceSet{Names: []string{"team-a"}}}},
			queued:  []Entry{entry("admin", "team-a", "team-b")},
			wantWhy: map[string]string{"admin": "namespace team-a overlaps running backup team-a/mine"},
		},
		{
			name:   "empty queue",
			limit:  1,
			queued: nil,
		},

		// Backups and restores in one line.
		{
			name:    "a restore waits for a running backup of a namespace it restores into",
			limit:   4,
			running: []Entry{entry("b1", "shop")},
			queued:  []Entry{restoreEntry("r1", "db", "shop")},
			wantWhy: map[string]string{"r1": "namespace shop overlaps running backup b1"},
		},
		{
			name:    "a backup waits for a running restore into its namespaces",
			limit:   4,
			running: []Entry{restoreEntry("r1", "shop")},
			queued:  []Entry{entry("b1", "db", "shop"), entry("b2", "db2")},
			want:    []string{"b2"},
			wantWhy: map[string]string{"b1": "namespace shop overlaps running restore r1"},
		},
		{
			name:         "a restore waits for a running restore into an overlapping namespace, with slots free",
			limit:        4,
			restoreLimit: 4,
			running:      []Entry{restoreEntry("r1", "shop")},
			queued:       []Entry{restoreEntry("r2", "shop"), restoreEntry("r3", "web")},
			want:         []string{"r3"},
			wantWhy:      map[string]string{"r2": "namespace shop overlaps running restore r1"},
		},
		{
			name:    "a restore waits for an overlapping backup queued ahead",
			limit:   4,
			running: []Entry{entry("b0", "a")},
			queued:  []Entry{entry("b1", "a", "b"), restoreEntry("r1", "b")},
			wantWhy: map[string]string{
				"b1": "namespace a overlaps running backup b0",
				"r1": "namespace b overlaps backup b1 queued ahead",
			},
		},
		{
			name:    "a backup waits for an overlapping restore queued ahead (one line)",
			limit:   4,
			running: []Entry{restoreEntry("r0", "x")},
			queued:  []Entry{restoreEntry("r1", "y"), entry("b1", "y"), entry("b2", "z")},
			want:    []string{"b2"},
			wantWhy: map[string]string{
				"r1": "restore concurrency limit 1 reached",
				"b1": "namespace y overlaps restore r1 queued ahead",
			},
		},
		{
			name:    "the kinds have their own slots",
			limit:   1,
			running: []Entry{entry("b0", "a")},
			queued:  []Entry{entry("b1", "b"), restoreEntry("r1", "c"), restoreEntry("r2", "d")},
			want:    []string{"r1"},
			wantWhy: map[string]string{
				"b1": "concurrency limit 1 reached",
				"r2": "restore concurrency limit 1 reached",
			},
		},
		{
			name:         "restore slots count running and just-started restores, not backups",
			limit:        1,
			restoreLimit: 2,
			running:      []Entry{restoreEntry("r0", "a")},
			queued:       []Entry{restoreEntry("r1", "b"), restoreEntry("r2", "c"), entry("b1", "d")},
			want:         []string{"r1", "b1"},
			wantWhy:      map[string]string{"r2": "restore concurrency limit 2 reached"},
		},
		{
			name:     "the deletion lock holds backups only",
			limit:    4,
			queued:   []Entry{restoreEntry("r1", "a"), entry("b1", "b")},
			deleting: map[string]string{"default": "old"},
			want:     []string{"r1"},
			wantWhy:  map[string]string{"b1": "waiting for backup old to be deleted from storage location default"},
		},
		{
			name:    "a restore into every namespace waits for any running backup and blocks everything behind it",
			limit:   4,
			running: []Entry{entry("b0", "a")},
			queued:  []Entry{{Kind: KindRestore, Namespace: "cairn-system", Name: "full", Namespaces: selection.NamespaceSet{All: true}}, entry("b1", "z")},
			wantWhy: map[string]string{
				"full": "namespaces overlap running backup b0 (one of them selects every namespace)",
				"b1":   "namespaces overlap restore full queued ahead (one of them selects every namespace)",
			},
		},
		{
			name:    "a started restore holds its namespaces for the rest of the pass",
			limit:   4,
			queued:  []Entry{restoreEntry("r1", "shop"), entry("b1", "shop"), entry("b2", "web")},
			want:    []string{"r1", "b2"},
			wantWhy: map[string]string{"b1": "namespace shop overlaps running restore r1"},
		},
		{
			name:    "restores in other namespaces are named with their namespace",
			limit:   4,
			running: []Entry{{Kind: KindRestore, Namespace: "team-a", Name: "back", Namespaces: selection.NamespaceSet{Names: []string{"team-a"}}}},
			queued:  []Entry{entry("admin", "team-a")},
			wantWhy: map[string]string{"admin": "namespace team-a overlaps running restore team-a/back"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := Decide(Limits{Backups: tt.limit, Restores: max(tt.restoreLimit, 1)}, tt.running, tt.queued, tt.deleting)
			if got := started(tt.queued, ds); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("started %v, want %v", got, tt.want)
			}
			for i, q := range tt.queued {
				if want, ok := tt.wantWhy[q.Name]; ok && ds[i].Message != want {
					t.Errorf("%s waits because %q, want %q", q.Name, ds[i].Message, want)
				}
				if !ds[i].Start && ds[i].Reason == "" {
					t.Errorf("%s waits with no reason", q.Name)
				}
			}
		})
	}
}

func TestOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := func(name string, phase cairnv1.BackupPhase, pos int32, age time.Duration) *cairnv1.Backup {
		return &cairnv1.Backup{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(t0.Add(-age))},
			Status:     cairnv1.BackupStatus{Phase: phase, QueuePosition: pos},
		}
	}
	list := []*cairnv1.Backup{
		b("new-young", "", 0, time.Second),
		b("q-pos7", cairnv1.BackupPhaseQueued, 7, time.Minute),
		b("new-old", cairnv1.BackupPhaseNew, 0, time.Hour),
		b("q-pos2", cairnv1.BackupPhaseQueued, 2, time.Second),
		b("q-pos2-older", cairnv1.BackupPhaseQueued, 2, time.Hour),
		withRV(b("same-second-created-first-z", "", 0, time.Minute), "100"),
		withRV(b("same-second-created-second-a", "", 0, time.Minute), "200"),
	}
	Order(list)
	var got []string
	for _, x := range list {
		got = append(got, x.Name)
	}
	want := []string{"q-pos2-older", "q-pos2", "q-pos7", "new-old", "same-second-created-first-z", "same-second-created-second-a", "new-young"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Order = %v, want %v", got, want)
	}
}

// TestOrderAcrossKinds: backups and restores share one line: positions first, whatever the
// kind, then new ones of both kinds by creation time and resourceVersion.
func TestOrderAcrossKinds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	meta := func(name string, age time.Duration, rv string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(t0.Add(-age)), ResourceVersion: rv}
	}
	b := func(name string, phase cairnv1.BackupPhase, pos int32, age time.Duration, rv string) *cairnv1.Backup {
		return &cairnv1.Backup{ObjectMeta: meta(name, age, rv), Status: cairnv1.BackupStatus{Phase: phase, QueuePosition: pos}}
	}
	r := func(name string, phase cairnv1.RestorePhase, pos int32, age time.Duration, rv string) *cairnv1.Restore {
		return &cairnv1.Restore{ObjectMeta: meta(name, age, rv), Status: cairnv1.RestoreStatus{Phase: phase, QueuePosition: pos}}
	}
	list := []metav1.Object{
		r("restore-new-young", "", 0, time.Second, "900"),
		b("backup-pos3", cairnv1.BackupPhaseQueued, 3, time.Second, "10"),
		r("restore-pos1", cairnv1.RestorePhaseQueued, 1, time.Minute, "20"),
		b("backup-new-old", cairnv1.BackupPhaseNew, 0, time.Hour, "30"),
		r("restore-pos2", cairnv1.RestorePhaseQueued, 2, time.Hour, "40"),
		// A position on a restore that is no longer queued is no place in the line.
		r("restore-new-stale-position", cairnv1.RestorePhaseNew, 1, time.Hour+time.Minute, "5"),
		b("backup-same-second-second", "", 0, time.Minute, "200"),
		r("restore-same-second-first", "", 0, time.Minute, "100"),
	}
	Order(list)
	var got []string
	for _, x := range list {
		got = append(got, x.GetName())
	}
	want := []string{"restore-pos1", "restore-pos2", "backup-pos3", "restore-new-stale-position", "backup-new-old",
		"restore-same-second-first", "backup-same-second-second", "restore-new-young"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Order = %v, want %v", got, want)
	}
}

func withRV(b *cairnv1.Backup, rv string) *cairnv1.Backup {
	b.ResourceVersion = rv
	return b
}

// TestDecideWithWildcards resolves the namespace filters against a cluster first, as the queue
// reconciler does, so wildcards take part in the overlap decision.
func TestDecideWithWildcards(t *testing.T) {
	cluster := []string{"team-a", "team-b", "tools", "prod-db"}
	resolve := func(name string, included ...string) Entry {
		return Entry{Namespace: "cairn-system", Name: name, Location: "default",
			Namespaces: selection.NamespaceFilter{Included: included}.Resolve(cluster)}
	}
	running := []Entry{resolve("teams", "team-*")}
	queued := []Entry{resolve("a-only", "team-a"), resolve("prod", "prod-*"), resolve("tools", "t?ols"), resolve("later-team", "team-c")}
	ds := Decide(Limits{Backups: 4, Restores: 1}, running, queued, nil)
	if got := started(queued, ds); fmt.Sprint(got) != "[prod tools later-team]" {
		t.Errorf("started %v", got)
	}
	if ds[0].Message != "namespace team-a overlaps running backup teams" {
		t.Errorf("a-only waits because %q", ds[0].Message)
	}
}

// decideByPairs is Decide as DESIGN.md states it, comparing each queued entry with every
// running one and every one queued ahead in turn, and counting the running ones of its kind.
func decideByPairs(limits Limits, running, queued []Entry, deleting map[string]string) []Decision {
	decisions := make([]Decision, len(queued))
	run := append([]Entry(nil), running...)
	var ahead []Entry
	for i, q := range queued {
		limit := limits.Backups
		if q.Kind == KindRestore {
			limit = limits.Restores
		}
		runningOfKind := 0
		for _, r := range run {
			if r.Kind == q.Kind {
				runningOfKind++
			}
		}
		d := Decision{Start: true}
		if r, ns, ok := firstOverlapByPairs(run, q); ok {
			d = Decision{Reason: cairnv1.ReasonNamespaceOverlap, Message: overlapMessage(ns, "running "+r.Kind.String()+" "+displayName(q, r))}
		} else if a, ns, ok := firstOverlapByPairs(ahead, q); ok {
			d = Decision{Reason: cairnv1.ReasonNamespaceOverlap, Message: overlapMessage(ns, a.Kind.String()+" "+displayName(q, a)+" queued ahead")}
		} else if name, ok := deleting[q.Location]; ok && q.Kind == KindBackup {
			d = Decision{Reason: cairnv1.ReasonWaitingForDeletion,
				Message: fmt.Sprintf("waiting for backup %s to be deleted from storage location %s", name, q.Location)}
		} else if runningOfKind >= limit && q.Kind == KindRestore {
			d = Decision{Reason: cairnv1.ReasonWaitingForConcurrencySlot, Message: fmt.Sprintf("restore concurrency limit %d reached", limit)}
		} else if runningOfKind >= limit {
			d = Decision{Reason: cairnv1.ReasonWaitingForConcurrencySlot, Message: fmt.Sprintf("concurrency limit %d reached", limit)}
		}
		decisions[i] = d
		if d.Start {
			run = append(run, q)
		} else {
			ahead = append(ahead, q)
		}
	}
	return decisions
}

func firstOverlapByPairs(entries []Entry, q Entry) (Entry, string, bool) {
	for _, e := range entries {
		var c selection.Claims
		c.Add(e.Namespaces)
		if _, ns, ok := c.FirstOverlap(q.Namespaces); ok {
			return e, ns, true
		}
	}
	return Entry{}, "", false
}

// TestDecideAgreesWithPairwiseComparison checks Decide against decideByPairs on random queues
// of backups and restores: the same entries start, and the others wait for the same reason,
// naming the same backup or restore and namespace.
func TestDecideAgreesWithPairwiseComparison(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	randomEntry := func(i int) Entry {
		e := Entry{Namespace: "cairn-system", Name: fmt.Sprintf("b%d", i), Location: []string{"default", "s3"}[rng.IntN(2)]}
		if rng.IntN(3) == 0 {
			e.Kind, e.Name = KindRestore, fmt.Sprintf("r%d", i)
		}
		if rng.IntN(20) == 0 {
			e.Namespaces = selection.NamespaceSet{All: true}
			return e
		}
		var included []string
		for range rng.IntN(4) {
			included = append(included, fmt.Sprintf("ns%02d", rng.IntN(30)))
		}
		// Its own namespace too, so that no filter is empty (which would select everything).
		e.Namespaces = selection.NamespaceFilter{Included: append(included, fmt.Sprintf("own-%d", i))}.Resolve(nil)
		return e
	}
	for range 300 {
		var running, queued []Entry
		for i := range rng.IntN(4) {
			running = append(running, randomEntry(i))
		}
		for i := range rng.IntN(40) {
			queued = append(queued, randomEntry(100+i))
		}
		var deleting map[string]string
		if rng.IntN(3) == 0 {
			deleting = map[string]string{"s3": "old"}
		}
		limits := Limits{Backups: 1 + rng.IntN(5), Restores: 1 + rng.IntN(3)}
		got, want := Decide(limits, running, queued, deleting), decideByPairs(limits, running, queued, deleting)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("limits %+v, running %+v, queued %+v, deleting %v:\nDecide  %+v\nby pairs %+v", limits, running, queued, deleting, got, want)
		}
	}
}
