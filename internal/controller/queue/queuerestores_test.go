package queue_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/selection"
	"github.com/cairn-backup/cairn/internal/storage"
)

// everyReconcilerButRestore runs the real reconcilers except the restore runner: the test
// plays it, so that restores run exactly as long as it needs.
var everyReconcilerButRestore = []string{"queue", "backup", "operations", "finalizer", "deletion", "restorefinalizer", "storagelocation"}

var _ = Describe("Deletion of a backup that restores read", Ordered, func() {
	var store *storage.Filesystem

	BeforeAll(func() {
		var loc *cairnv1.BackupStorageLocation
		store, loc = CreateDefaultLocation("del-read")
		EnsureNamespace("dr-1")
		CreateObject(ConfigMap("dr-1", "settings", nil))
		stop := StartManager(controller.Config{Controllers: everyReconcilerButRestore})
		DeferCleanup(DeleteAllBackups)
		DeferCleanup(DeleteAllRestores)
		DeferCleanup(func() { stop() })
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
	})

	It("keeps the backup out of Deleting until every restore reading it has ended, saying which one it waits for", func() {
		recorder := RecordPhases()
		CreateBackup(OperatorNamespace, "read-me", cairnv1.BackupSpec{IncludedNamespaces: []string{"dr-1"}})
		WaitPhase("read-me", cairnv1.BackupPhaseCompleted)
		keys := storage.Layout{}.Backup(OperatorNamespace, "read-me")
		intoCopy := map[string]cairnv1.NamespaceName{"dr-1": "dr-copy"}
		CreateRestore(OperatorNamespace, "reader-1", cairnv1.RestoreSpec{BackupName: "read-me", NamespaceMapping: intoCopy})
		expectLine(map[string]string{"restore/reader-1": "ReadyToStart"})
		CreateRestore(OperatorNamespace, "reader-2", cairnv1.RestoreSpec{BackupName: "read-me", NamespaceMapping: intoCopy})
		expectLine(map[string]string{"restore/reader-2": "Queued:1"})

		DeleteBackup("read-me")
		blocked := func(g Gomega) string {
			c := meta.FindStatusCondition(GetBackup(OperatorNamespace, "read-me").Status.Conditions, cairnv1.BackupConditionDeletionBlocked)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(cairnv1.ReasonReadByRestore))
			return c.Message
		}
		Eventually(blocked).Should(Equal("waiting for restore reader-1 to end before deleting"))
		Eventually(func() []string { return EventReasons("read-me") }).Should(ContainElement("DeletionBlocked"))
		Consistently(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "read-me").Status.Phase }).
			WithTimeout(time.Second).Should(Equal(cairnv1.BackupPhaseCompleted))
		Expect(store.Exists(SuiteCtx, keys.Metadata)).To(BeTrue())

		// The first restore ends; the queue starts the second, which still reads the backup.
		restoreSetPhase("reader-1", cairnv1.RestorePhaseInProgress)
		restoreSetPhase("reader-1", cairnv1.RestorePhaseCompleted)
		expectLine(map[string]string{"restore/reader-2": "ReadyToStart"})
		Eventually(blocked).Should(Equal("waiting for restore reader-2 to end before deleting"))
		Expect(GetBackup(OperatorNamespace, "read-me").Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))

		// The second ends too: now the backup is deleted, and only after that restore's end.
		restoreSetPhase("reader-2", cairnv1.RestorePhaseInProgress)
		restoreSetPhase("reader-2", cairnv1.RestorePhaseFailed)
		ended := GetRestore(OperatorNamespace, "reader-2")
		ExpectGone("read-me")
		Expect(store.List(SuiteCtx, keys.Dir)).To(BeEmpty())
		deleting := recorder.First("read-me", cairnv1.BackupPhaseDeleting)
		Expect(deleting).NotTo(BeNil())
		Expect(resourceVersion(deleting)).To(BeNumerically(">", resourceVersion(ended)), "Deleting was written before the last reader ended")
		Expect(meta.FindStatusCondition(deleting.Status.Conditions, cairnv1.BackupConditionDeletionBlocked)).To(BeNil())
	})
})

func resourceVersion(obj client.Object) uint64 {
	GinkgoHelper()
	rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	Expect(err).NotTo(HaveOccurred())
	return rv
}

var _ = Describe("Queue workload of backups and restores", Ordered, func() {
	It("never runs two overlapping ones at once, nor more than the slots of a kind, and finishes all of them", func() {
		const (
			backupSlots, restoreSlots = 3, 2
			backups, restores         = 60, 50
		)
		seed := uint64(GinkgoRandomSeed())
		AddReportEntry("workload seed", seed)
		GinkgoWriter.Printf("workload seed %d (ginkgo --seed)\n", seed)
		rng := rand.New(rand.NewPCG(seed, 14))

		_, loc := CreateDefaultLocation("workload")
		sourceNamespaces := []string{"wl-0", "wl-1", "wl-2", "wl-3", "wl-4", "wl-5"}
		copies := []string{"wl-copy-0", "wl-copy-1", "wl-copy-2"}
		for _, ns := range sourceNamespaces {
			EnsureNamespace(ns)
			CreateObject(ConfigMap(ns, "settings", nil))
		}
		for _, ns := range copies {
			EnsureNamespace(ns)
		}
		every := append(slices.Clone(sourceNamespaces), copies...)

		// What each one may touch, by the rules of DESIGN.md section 9 worked out here
		// independently: a backup its namespaces; a restore its sources after mapping, or every
		// namespace when its sources are not names.
		tracker := newRunTracker(map[string]int{"backup": backupSlots, "restore": restoreSlots})
		tracker.watch(&cairnv1.BackupList{}, "backup")
		tracker.watch(&cairnv1.RestoreList{}, "restore")

		stop := StartManager(controller.Config{ConcurrentBackups: backupSlots, ConcurrentRestores: restoreSlots,
			RestoreWorkerCount: 2, ProgressInterval: time.Second})
		DeferCleanup(DeleteAllBackups)
		DeferCleanup(DeleteAllRestores)
		DeferCleanup(func() { stop() })
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")

		// The backups the restores read. wl-src-2 names a pattern, so what it holds is known
		// only from its archive: a restore of all of it may touch any namespace.
		sources := []struct {
			name     string
			included []string
			names    []string // the names it holds, when they are all literal
			selects  []string // the namespaces it selects in this cluster
		}{
			{"wl-src-0", []string{"wl-0", "wl-1"}, []string{"wl-0", "wl-1"}, []string{"wl-0", "wl-1"}},
			{"wl-src-1", []string{"wl-2", "wl-3"}, []string{"wl-2", "wl-3"}, []string{"wl-2", "wl-3"}},
			{"wl-src-2", []string{"wl-4", "wl-5*"}, nil, []string{"wl-4", "wl-5"}},
		}
		for _, s := range sources {
			tracker.expect("backup", s.name, selection.NamespaceSet{Names: s.selects})
			CreateBackup(OperatorNamespace, s.name, cairnv1.BackupSpec{IncludedNamespaces: s.included})
		}
		for _, s := range sources {
			WaitPhase(s.name, cairnv1.BackupPhaseCompleted)
		}

		kinds := make([]string, 0, backups+restores)
		for range backups {
			kinds = append(kinds, "backup")
		}
		for range restores {
			kinds = append(kinds, "restore")
		}
		rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		var names []string
		for i, kind := range kinds {
			name := fmt.Sprintf("wl-%03d", i)
			names = append(names, kind+"/"+name)
			if kind == "backup" {
				picked := map[string]bool{}
				for range 1 + rng.IntN(2) {
					picked[every[rng.IntN(len(every))]] = true
				}
				included := sortedKeys(picked)
				tracker.expect("backup", name, selection.NamespaceSet{Names: included})
				CreateBackup(OperatorNamespace, name, cairnv1.BackupSpec{IncludedNamespaces: included})
				continue
			}
			src := sources[rng.IntN(len(sources))]
			spec := cairnv1.RestoreSpec{BackupName: src.name, NamespaceMapping: map[string]cairnv1.NamespaceName{}}
			var restored []string // the source namespaces it restores, when known from names
			switch rng.IntN(3) {
			case 0: // one namespace, by name
				ns := []string{"wl-4", "wl-5"}[rng.IntN(2)]
				if src.names != nil {
					ns = src.names[rng.IntN(len(src.names))]
				}
				spec.IncludedNamespaces, restored = []string{ns}, []string{ns}
			case 1: // everything the backup holds
				restored = src.names
			case 2: // a pattern
				spec.IncludedNamespaces, restored = []string{"wl-*"}, src.names
			}
			for _, ns := range append(slices.Clone(src.names), "wl-4", "wl-5") {
				if rng.IntN(2) == 0 {
					spec.NamespaceMapping[ns] = cairnv1.NamespaceName(copies[rng.IntN(len(copies))])
				}
			}
			targets := selection.NamespaceSet{All: true}
			if restored != nil {
				mapped := map[string]bool{}
				for _, ns := range restored {
					mapped[spec.MapNamespace(ns)] = true
				}
				targets = selection.NamespaceSet{Names: sortedKeys(mapped)}
			}
			tracker.expect("restore", name, targets)
			CreateRestore(OperatorNamespace, name, spec)
		}

		Eventually(func(g Gomega) {
			var bl cairnv1.BackupList
			var rl cairnv1.RestoreList
			g.Expect(K8sClient.List(SuiteCtx, &bl, client.InNamespace(OperatorNamespace))).To(Succeed())
			g.Expect(K8sClient.List(SuiteCtx, &rl, client.InNamespace(OperatorNamespace))).To(Succeed())
			phases := map[string]string{}
			for _, b := range bl.Items {
				phases["backup/"+b.Name] = string(b.Status.Phase) + " " + b.Status.FailureReason
			}
			for _, rs := range rl.Items {
				phases["restore/"+rs.Name] = string(rs.Status.Phase) + " " + rs.Status.FailureReason
			}
			for _, n := range names {
				g.Expect(phases).To(HaveKeyWithValue(n, "Completed "), "%s has not finished", n)
			}
		}).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())

		violations, most, ran := tracker.result()
		Expect(violations).To(BeEmpty())
		Expect(ran).To(HaveLen(len(names) + len(sources)))
		AddReportEntry("most running at once", most)
	})
})

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// runTracker watches backups and restores from outside and checks, at every event, that no two
// whose namespaces overlap have run at the same time, and that no kind ever ran more than its
// slots. Each one's run is the span of etcd revisions from the write that made it ReadyToStart
// or InProgress to the write that moved it on. Backups and restores come on two watches, each in
// revision order but not in step with each other, so a run the other watch has not yet seen end
// is known only to last past the last revision that watch delivered: a reported overlap is
// always a real one, and once every run has ended every overlap is reported.
type runTracker struct {
	limits map[string]int

	mu         sync.Mutex
	sets       map[string]selection.NamespaceSet // by "kind/name"
	runs       map[string]*run
	lastRV     map[string]uint64 // the last revision each watch delivered
	most       map[string]int    // the most runs of each kind seen at once
	reported   map[string]bool
	violations []string
}

type run struct {
	kind       string
	start, end uint64 // end 0: not seen to end yet
}

func (r *run) String() string {
	if r.end == 0 {
		return fmt.Sprintf("%d-", r.start)
	}
	return fmt.Sprintf("%d-%d", r.start, r.end)
}

func newRunTracker(limits map[string]int) *runTracker {
	return &runTracker{limits: limits, sets: map[string]selection.NamespaceSet{}, runs: map[string]*run{},
		lastRV: map[string]uint64{}, most: map[string]int{}, reported: map[string]bool{}}
}

// expect says what namespaces one may touch.
func (t *runTracker) expect(kind, name string, set selection.NamespaceSet) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sets[kind+"/"+name] = set
}

// watch follows the objects of list's kind in the operator's namespace until the test ends.
func (t *runTracker) watch(list client.ObjectList, kind string) {
	GinkgoHelper()
	w, err := WatchClient().Watch(SuiteCtx, list, client.InNamespace(OperatorNamespace))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	go func() {
		defer GinkgoRecover()
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			obj, ok := ev.Object.(client.Object)
			if !ok {
				continue
			}
			var running bool
			switch o := obj.(type) {
			case *cairnv1.Backup:
				running = o.Status.Phase == cairnv1.BackupPhaseReadyToStart || o.Status.Phase == cairnv1.BackupPhaseInProgress
			case *cairnv1.Restore:
				running = o.Status.Phase == cairnv1.RestorePhaseReadyToStart || o.Status.Phase == cairnv1.RestorePhaseInProgress
			}
			rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
			if err != nil {
				continue
			}
			t.observe(kind, obj.GetName(), running, rv)
		}
	}()
}

func (t *runTracker) observe(kind, name string, running bool, rv uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastRV[kind] = max(t.lastRV[kind], rv)
	key := kind + "/" + name
	if _, tracked := t.sets[key]; !tracked {
		return
	}
	r := t.runs[key]
	switch {
	case running && r == nil:
		t.runs[key] = &run{kind: kind, start: rv}
	case running && r.end != 0:
		t.violate(key, fmt.Sprintf("%s ran again after it ended", key))
	case !running && r != nil && r.end == 0:
		r.end = rv
	}
	t.check()
}

// endBound is a revision the run is known to last until (exclusive): its end, or past the
// last revision its watch delivered.
func (t *runTracker) endBound(r *run) uint64 {
	if r.end != 0 {
		return r.end
	}
	return t.lastRV[r.kind] + 1
}

func (t *runTracker) check() {
	keys := make([]string, 0, len(t.runs))
	for k := range t.runs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, a := range keys {
		ra := t.runs[a]
		for _, b := range keys[i+1:] {
			rb := t.runs[b]
			if ra.start < t.endBound(rb) && rb.start < t.endBound(ra) {
				var c selection.Claims
				c.Add(t.sets[a])
				if _, ns, overlaps := c.FirstOverlap(t.sets[b]); overlaps {
					t.violate(a+" "+b, fmt.Sprintf("%s and %s ran at once (revisions %s and %s), both touching %q",
						a, b, ra, rb, ns))
				}
			}
		}
	}
	// Within one watch the runs of its kind are exact at its last revision.
	for kind, limit := range t.limits {
		n := 0
		for _, r := range t.runs {
			if r.kind == kind && r.start <= t.lastRV[kind] && (r.end == 0 || r.end > t.lastRV[kind]) {
				n++
			}
		}
		t.most[kind] = max(t.most[kind], n)
		if n > limit {
			t.violate(fmt.Sprintf("%s-%d", kind, t.lastRV[kind]), fmt.Sprintf("%d %ss running at revision %d, more than %d", n, kind, t.lastRV[kind], limit))
		}
	}
}

func (t *runTracker) violate(key, message string) {
	if !t.reported[key] {
		t.reported[key] = true
		t.violations = append(t.violations, message)
	}
}

// result is what was found wrong, the most runs of each kind seen at once, and every one that
// ran.
func (t *runTracker) result() (violations []string, most map[string]int, ran []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, r := range t.runs {
		if r.end != 0 {
			ran = append(ran, k)
		}
	}
	return slices.Clone(t.violations), maps.Clone(t.most), ran
}
