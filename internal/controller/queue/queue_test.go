package queue_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/selection"
)

// The specs play the backup runner (line_test.go): they move ReadyToStart backups on by
// patching their status.

var _ = Describe("Backup queue", Ordered, func() {
	var stopManager func()

	BeforeAll(func() {
		spec := FilesystemSpec(GinkgoT().TempDir())
		spec.Default = true
		def := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "queue-default", Namespace: OperatorNamespace}, Spec: spec}
		Expect(K8sClient.Create(SuiteCtx, def)).To(Succeed())
		DeferCleanup(func() { Expect(K8sClient.Delete(SuiteCtx, def)).To(Succeed()) })
		second := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "queue-other", Namespace: OperatorNamespace}, Spec: FilesystemSpec(GinkgoT().TempDir())}
		Expect(K8sClient.Create(SuiteCtx, second)).To(Succeed())
		DeferCleanup(func() { Expect(K8sClient.Delete(SuiteCtx, second)).To(Succeed()) })
		EnsureNamespace("team-a")
	})

	AfterEach(func() {
		if stopManager != nil {
			stopManager()
			stopManager = nil
		}
		DeleteAllRestores()
		DeleteAllBackups()
	})

	It("queues restores in the same line as backups: overlaps across kinds, a slot per kind, one numbering", func() {
		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 2, ConcurrentRestores: 1})
		// The backup the restores read.
		adminBackup("src", "shop", "db", "extra")
		expectQueue(map[string]string{"src": "ReadyToStart"})
		runnerSetPhase("src", cairnv1.BackupPhaseInProgress)
		runnerSetPhase("src", cairnv1.BackupPhaseCompleted)

		adminBackup("b-shop", "shop")
		expectQueue(map[string]string{"b-shop": "ReadyToStart"})
		CreateRestore(OperatorNamespace, "r-shop", cairnv1.RestoreSpec{BackupName: "src", IncludedNamespaces: []string{"shop", "extra"}})
		expectLine(map[string]string{"restore/r-shop": "Queued:1"})
		CreateRestore(OperatorNamespace, "r-db", cairnv1.RestoreSpec{BackupName: "src", IncludedNamespaces: []string{"db"}})
		expectLine(map[string]string{"restore/r-db": "ReadyToStart"})
		adminBackup("b-db", "db")
		// Mapped away from db: free of r-db's namespaces, but the one restore slot is taken.
		CreateRestore(OperatorNamespace, "r-web", cairnv1.RestoreSpec{BackupName: "src", IncludedNamespaces: []string{"db"},
			NamespaceMapping: map[string]cairnv1.NamespaceName{"db": "web"}})
		adminBackup("b-extra", "extra")
		expectLine(map[string]string{"backup/b-shop": "ReadyToStart", "restore/r-shop": "Queued:1", "restore/r-db": "ReadyToStart",
			"backup/b-db": "Queued:2", "restore/r-web": "Queued:3", "backup/b-extra": "Queued:4"})
		Eventually(func() string { return restoreQueuedMessage("r-shop") }).Should(Equal("namespace shop overlaps running backup b-shop"))
		Eventually(func() string { return QueuedCondition("b-db").Message }).Should(Equal("namespace db overlaps running restore r-db"))
		Eventually(func() string { return restoreQueuedMessage("r-web") }).Should(Equal("restore concurrency limit 1 reached"))
		Eventually(func() string { return QueuedCondition("b-extra").Message }).Should(Equal("namespace extra overlaps restore r-shop queued ahead"))
		Expect(GetRestore(OperatorNamespace, "r-shop").Status.BackupName).To(Equal("src"))

		// The backup of shop ends: r-shop now waits only for the restore slot.
		runnerSetPhase("b-shop", cairnv1.BackupPhaseInProgress)
		runnerSetPhase("b-shop", cairnv1.BackupPhaseCompleted)
		Eventually(func() string { return restoreQueuedMessage("r-shop") }).Should(Equal("restore concurrency limit 1 reached"))
		expectLine(map[string]string{"restore/r-shop": "Queued:1", "backup/b-db": "Queued:2"})

		// The restore into db ends: r-shop takes the restore slot, b-db a backup slot, and
		// b-extra waits for the restore running into extra.
		restoreSetPhase("r-db", cairnv1.RestorePhaseInProgress)
		restoreSetPhase("r-db", cairnv1.RestorePhaseCompleted)
		expectLine(map[string]string{"restore/r-shop": "ReadyToStart", "backup/b-db": "ReadyToStart", "restore/r-web": "Queued:1", "backup/b-extra": "Queued:2"})
		Eventually(func() string { return QueuedCondition("b-extra").Message }).Should(Equal("namespace extra overlaps running restore r-shop"))
		c := meta.FindStatusCondition(GetRestore(OperatorNamespace, "r-shop").Status.Conditions, cairnv1.RestoreConditionQueued)
		Expect(c.Status).To(Equal(metav1.ConditionFalse))
		Expect(c.Reason).To(Equal(cairnv1.ReasonDequeued))

		// A restore in WaitingForPluginOperations no longer holds its slot nor its namespaces.
		restoreSetPhase("r-shop", cairnv1.RestorePhaseInProgress)
		restoreSetPhase("r-shop", cairnv1.RestorePhaseWaitingForPluginOperations)
		expectLine(map[string]string{"restore/r-web": "ReadyToStart", "backup/b-extra": "ReadyToStart"})
	})

	It("moves backups through the queue by concurrency and namespace overlap, in order", func() {
		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 2})
		adminBackup("q1", "ns1")
		adminBackup("q2", "ns1", "ns2")
		adminBackup("q3", "ns3")
		adminBackup("q4", "ns2")
		expectQueue(map[string]string{"q1": "ReadyToStart", "q2": "Queued:1", "q3": "ReadyToStart", "q4": "Queued:2"})
		Eventually(func() string { return QueuedCondition("q2").Message }).Should(Equal("namespace ns1 overlaps running backup q1"))
		Eventually(func() string { return QueuedCondition("q4").Message }).Should(Equal("namespace ns2 overlaps backup q2 queued ahead"))
		Expect(GetBackup(OperatorNamespace, "q1").Status.StorageLocation).To(Equal("queue-default"))

		runnerSetPhase("q1", cairnv1.BackupPhaseInProgress)
		runnerSetPhase("q1", cairnv1.BackupPhaseCompleted)
		expectQueue(map[string]string{"q1": "Completed", "q2": "ReadyToStart", "q3": "ReadyToStart", "q4": "Queued:1"})
		Eventually(func() string { return QueuedCondition("q4").Message }).Should(Equal("namespace ns2 overlaps running backup q2"))

		// A slot frees, but q4 still overlaps the running q2.
		runnerSetPhase("q3", cairnv1.BackupPhaseInProgress)
		runnerSetPhase("q3", cairnv1.BackupPhaseCompleted)
		Consistently(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "q4").Status.Phase }).
			WithTimeout(500 * time.Millisecond).Should(Equal(cairnv1.BackupPhaseQueued))
		Expect(QueuedCondition("q4").Message).To(Equal("namespace ns2 overlaps running backup q2"))

		// Leaving WaitingForPluginOperations frees the slot and the namespaces (DESIGN.md section 1).
		runnerSetPhase("q2", cairnv1.BackupPhaseInProgress)
		runnerSetPhase("q2", cairnv1.BackupPhaseWaitingForPluginOperations)
		expectQueue(map[string]string{"q4": "ReadyToStart"})

		c := QueuedCondition("q4")
		Expect(c.Status).To(Equal(metav1.ConditionFalse))
		Expect(c.Reason).To(Equal(cairnv1.ReasonDequeued))
		Expect(c.Message).To(MatchRegexp(`^Dequeued after waiting [0-9hms]+$`))
		Eventually(func() []eventsv1.Event { return BackupEvents(OperatorNamespace, "q4") }).Should(And(
			ContainElement(HaveField("Reason", "Queued")), ContainElement(HaveField("Reason", "Dequeued"))))
	})

	It("fails a cancelled or deleted queued backup at once and renumbers the rest", func() {
		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 1})
		adminBackup("run", "a")
		adminBackup("w1", "a")
		adminBackup("w2", "a")
		adminBackup("w3", "a")
		adminBackup("w4", "a")
		expectQueue(map[string]string{"run": "ReadyToStart", "w1": "Queued:1", "w2": "Queued:2", "w3": "Queued:3", "w4": "Queued:4"})

		Expect(K8sClient.Patch(SuiteCtx, GetBackup(OperatorNamespace, "w2"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`)))).To(Succeed())
		expectQueue(map[string]string{"run": "ReadyToStart", "w1": "Queued:1", "w2": "Failed", "w3": "Queued:2", "w4": "Queued:3"})
		w2 := GetBackup(OperatorNamespace, "w2")
		Expect(w2.Status.FailureReason).To(Equal(cairnv1.FailureReasonCancelled))
		Expect(w2.Status.QueuePosition).To(BeZero())
		Expect(meta.IsStatusConditionTrue(w2.Status.Conditions, cairnv1.BackupConditionCancelled)).To(BeTrue())
		Expect(w2.Status.CompletionTimestamp).NotTo(BeNil())

		Expect(K8sClient.Delete(SuiteCtx, GetBackup(OperatorNamespace, "w1"))).To(Succeed())
		expectQueue(map[string]string{"run": "ReadyToStart", "w3": "Queued:1", "w4": "Queued:2"})

		// Cancelling a ReadyToStart backup is the backup reconciler's job, not the queue's.
		Expect(K8sClient.Patch(SuiteCtx, GetBackup(OperatorNamespace, "run"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`)))).To(Succeed())
		Consistently(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "run").Status.Phase }).
			WithTimeout(500 * time.Millisecond).Should(Equal(cairnv1.BackupPhaseReadyToStart))
	})

	It("fails a queued backup that is being deleted (held by a finalizer) and renumbers the rest", func() {
		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 1})
		adminBackup("d-run", "d")
		held := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "d-held", Namespace: OperatorNamespace, Finalizers: []string{"test.cairn.dev/hold"}},
			Spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"d"}}}
		Expect(K8sClient.Create(SuiteCtx, held)).To(Succeed())
		adminBackup("d-last", "d")
		expectQueue(map[string]string{"d-run": "ReadyToStart", "d-held": "Queued:1", "d-last": "Queued:2"})

		Expect(K8sClient.Delete(SuiteCtx, GetBackup(OperatorNamespace, "d-held"))).To(Succeed())
		expectQueue(map[string]string{"d-held": "Failed", "d-last": "Queued:1"})
		got := GetBackup(OperatorNamespace, "d-held")
		Expect(got.Status.FailureReason).To(Equal("Backup deleted by user"))
		Expect(meta.FindStatusCondition(got.Status.Conditions, cairnv1.BackupConditionCancelled).Reason).To(Equal(cairnv1.ReasonBackupDeleted))

		got.Finalizers = nil
		Expect(K8sClient.Update(SuiteCtx, got)).To(Succeed())
	})

	It("cancels a New backup before it is queued", func() {
		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 1})
		b := CreateBackup(OperatorNamespace, "born-cancelled", cairnv1.BackupSpec{Cancel: true})
		Eventually(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, b.Name).Status.Phase }).Should(Equal(cairnv1.BackupPhaseFailed))
		Expect(GetBackup(OperatorNamespace, b.Name).Status.FailureReason).To(Equal(cairnv1.FailureReasonCancelled))
	})

	It("keeps positions across a manager restart, and counts ReadyToStart backups as running", func() {
		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 2})
		adminBackup("r1", "x")
		adminBackup("r2", "y")
		adminBackup("p1", "x")
		adminBackup("p2", "y")
		adminBackup("p3", "z")
		expectQueue(map[string]string{"r1": "ReadyToStart", "r2": "ReadyToStart", "p1": "Queued:1", "p2": "Queued:2", "p3": "Queued:3"})
		stopManager()
		stopManager = nil

		// While no manager runs: r1 finishes, and a new backup arrives.
		runnerSetPhase("r1", cairnv1.BackupPhaseInProgress)
		runnerSetPhase("r1", cairnv1.BackupPhaseCompleted)
		adminBackup("p4", "w")

		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 2})
		// p1 takes the free slot; r2 (ReadyToStart) still counts, so nothing else starts.
		expectQueue(map[string]string{"r2": "ReadyToStart", "p1": "ReadyToStart", "p2": "Queued:1", "p3": "Queued:2", "p4": "Queued:3"})
		Eventually(func() string { return QueuedCondition("p3").Message }).Should(Equal("concurrency limit 2 reached"))
		Consistently(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "p3").Status.Phase }).
			WithTimeout(time.Second).Should(Equal(cairnv1.BackupPhaseQueued))
	})

	It("holds a backup while another backup in its location is being deleted", func() {
		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 4})
		adminBackup("old", "del")
		expectQueue(map[string]string{"old": "ReadyToStart"})
		runnerSetPhase("old", cairnv1.BackupPhaseDeleting) // as the deletion reconciler will
		CreateBackup(OperatorNamespace, "same-location", cairnv1.BackupSpec{IncludedNamespaces: []string{"s1"}})
		CreateBackup(OperatorNamespace, "other-location", cairnv1.BackupSpec{IncludedNamespaces: []string{"s2"}, StorageLocation: "queue-other"})
		expectQueue(map[string]string{"same-location": "Queued:1", "other-location": "ReadyToStart"})
		Eventually(func() string { return QueuedCondition("same-location").Message }).
			Should(Equal("waiting for backup cairn-system/old to be deleted from storage location queue-default"))

		runnerSetPhase("old", cairnv1.BackupPhaseDeletionFailed)
		expectQueue(map[string]string{"same-location": "ReadyToStart"})
	})

	It("holds a backup while a deleted backup's data is removed before its phase says Deleting", func() {
		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 4})
		adminBackup("quiet", "del")
		expectQueue(map[string]string{"quiet": "ReadyToStart"})
		// As the backup reconcilers would: it ran and completed.
		Eventually(func() error {
			b := GetBackup(OperatorNamespace, "quiet")
			patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
			b.Status.Phase = cairnv1.BackupPhaseCompleted
			b.Status.StartTimestamp = &metav1.Time{Time: time.Now()}
			return K8sClient.Status().Patch(SuiteCtx, b, patch)
		}).WithTimeout(5 * time.Second).Should(Succeed())
		// Deleted: the finalizer keeps it while its data goes, still Completed (a first deletion
		// shows Deleting only after a second).
		quiet := GetBackup(OperatorNamespace, "quiet")
		Expect(quiet.Finalizers).To(ContainElement(cairnv1.BackupDataFinalizer))
		Expect(K8sClient.Delete(SuiteCtx, quiet)).To(Succeed())
		CreateBackup(OperatorNamespace, "after-quiet", cairnv1.BackupSpec{IncludedNamespaces: []string{"s1"}})
		expectQueue(map[string]string{"after-quiet": "Queued:1"})
		Eventually(func() string { return QueuedCondition("after-quiet").Message }).
			Should(Equal("waiting for backup cairn-system/quiet to be deleted from storage location queue-default"))

		// Its data gone, the finalizer goes with the object; the queued backup starts.
		Eventually(func() error {
			b := GetBackup(OperatorNamespace, "quiet")
			patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
			b.Finalizers = nil
			return K8sClient.Patch(SuiteCtx, b, patch)
		}).WithTimeout(5 * time.Second).Should(Succeed())
		expectQueue(map[string]string{"after-quiet": "ReadyToStart"})
	})

	It("fails validation with a message for each problem", func() {
		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 1})
		bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Maybe"}}}
		cases := []struct {
			namespace, name string
			spec            cairnv1.BackupSpec
			want            string
		}{
			{"team-a", "reach", cairnv1.BackupSpec{IncludedNamespaces: []string{"team-b"}}, `spec.includedNamespaces: a backup in namespace team-a may only back up its own namespace, not "team-b"`},
			{"team-a", "cluster", cairnv1.BackupSpec{IncludeClusterResources: ptr.To(true)}, "spec.includeClusterResources: a backup in namespace team-a cannot include cluster-scoped resources"},
			{OperatorNamespace, "nolocation", cairnv1.BackupSpec{StorageLocation: "nowhere"}, `spec.storageLocation: storage location "nowhere" does not exist in namespace cairn-system`},
			{OperatorNamespace, "selector", cairnv1.BackupSpec{LabelSelector: bad}, `spec.labelSelector: "Maybe" is not a valid label selector operator`},
			{OperatorNamespace, "orselector", cairnv1.BackupSpec{OrLabelSelectors: []*metav1.LabelSelector{bad}}, "spec.orLabelSelectors[0]"},
			{OperatorNamespace, "both", cairnv1.BackupSpec{LabelSelector: &metav1.LabelSelector{}, OrLabelSelectors: []*metav1.LabelSelector{{}}}, "spec.labelSelector and spec.orLabelSelectors cannot be used together"},
			{OperatorNamespace, "pattern", cairnv1.BackupSpec{IncludedNamespaces: []string{"[x"}}, `spec.includedNamespaces: "[x" is not a valid wildcard pattern`},
			{OperatorNamespace, "resource", cairnv1.BackupSpec{IncludedResources: []string{"apps/Deployments"}}, `spec.includedResources: "apps/Deployments" is not a resource name`},
		}
		for _, c := range cases {
			CreateBackup(c.namespace, c.name, c.spec)
		}
		for _, c := range cases {
			Eventually(func(g Gomega) {
				b := GetBackup(c.namespace, c.name)
				g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseFailedValidation))
				g.Expect(strings.Join(b.Status.ValidationErrors, "\n")).To(ContainSubstring(c.want))
			}).WithTimeout(10*time.Second).Should(Succeed(), c.name)
		}
		Eventually(func() []eventsv1.Event { return BackupEvents("team-a", "reach") }).Should(
			ContainElement(And(HaveField("Reason", "FailedValidation"), HaveField("Type", corev1.EventTypeWarning))))
		// A valid team backup of its own namespace is queued and runs.
		CreateBackup("team-a", "fine", cairnv1.BackupSpec{})
		Eventually(func() cairnv1.BackupPhase { return GetBackup("team-a", "fine").Status.Phase }).Should(Equal(cairnv1.BackupPhaseReadyToStart))
	})

	It("fails a spec with more problems than status.validationErrors holds, and serves the others", func() {
		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 1})
		spec := cairnv1.BackupSpec{}
		for i := range 60 {
			// Within the CRD's limits (63 characters each), but not namespace names.
			spec.IncludedNamespaces = append(spec.IncludedNamespaces, fmt.Sprintf("Bad_%d_%s", i, strings.Repeat("x", 50)))
		}
		CreateBackup(OperatorNamespace, "many-problems", spec)
		CreateBackup(OperatorNamespace, "after-many-problems", cairnv1.BackupSpec{IncludedNamespaces: []string{"fine"}})
		Eventually(func(g Gomega) {
			b := GetBackup(OperatorNamespace, "many-problems")
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseFailedValidation))
			g.Expect(b.Status.ValidationErrors).To(HaveLen(cairnv1.MaxValidationErrors))
			g.Expect(b.Status.ValidationErrors[0]).To(HavePrefix(`spec.includedNamespaces: "Bad_0_xxx`))
			g.Expect(b.Status.ValidationErrors[cairnv1.MaxValidationErrors-1]).To(Equal("and 41 more problems"))
			for _, m := range b.Status.ValidationErrors {
				g.Expect(len(m)).To(BeNumerically("<=", cairnv1.MaxValidationErrorLength))
			}
		}).Should(Succeed())
		Eventually(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "after-many-problems").Status.Phase }).
			Should(Equal(cairnv1.BackupPhaseReadyToStart))
	})

	It("never runs two overlapping backups and keeps positions ordered, under random load", func() {
		const n, concurrency = 100, 3
		rng := rand.New(rand.NewPCG(7, 11))
		sets := map[string]selection.NamespaceSet{}
		for i := range n {
			name := fmt.Sprintf("load-%03d", i)
			var included []string
			if rng.IntN(50) == 0 {
				sets[name] = selection.NamespaceSet{All: true}
			} else {
				picked := map[string]bool{}
				for range 1 + rng.IntN(3) {
					picked[fmt.Sprintf("lns%d", rng.IntN(12))] = true
				}
				for ns := range picked {
					included = append(included, ns)
				}
				sort.Strings(included)
				sets[name] = selection.NamespaceSet{Names: included}
			}
		}

		// The watcher sees every state change, in order.
		w, err := WatchClient().Watch(SuiteCtx, &cairnv1.BackupList{}, client.InNamespace(OperatorNamespace))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		var violations []string
		var mu sync.Mutex
		states := map[string]*cairnv1.Backup{}
		watcherDone := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(watcherDone)
			for ev := range w.ResultChan() {
				b, ok := ev.Object.(*cairnv1.Backup)
				if !ok || !strings.HasPrefix(b.Name, "load-") {
					continue
				}
				mu.Lock()
				if ev.Type == watch.Deleted {
					delete(states, b.Name)
				} else {
					states[b.Name] = b
				}
				violations = append(violations, checkQueueInvariants(states, sets, concurrency)...)
				mu.Unlock()
			}
		}()

		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: concurrency})
		for i := range n {
			name := fmt.Sprintf("load-%03d", i)
			var spec cairnv1.BackupSpec
			if !sets[name].All {
				spec.IncludedNamespaces = sets[name].Names
			}
			CreateBackup(OperatorNamespace, name, spec)
		}

		// The runner: finish a random running backup now and then, until all are done.
		Eventually(func(g Gomega) {
			var list cairnv1.BackupList
			g.Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(OperatorNamespace))).To(Succeed())
			var running []string
			done := 0
			for _, b := range list.Items {
				switch b.Status.Phase {
				case cairnv1.BackupPhaseReadyToStart, cairnv1.BackupPhaseInProgress:
					running = append(running, b.Name)
				case cairnv1.BackupPhaseCompleted:
					done++
				}
			}
			if len(running) > 0 {
				pick := running[rng.IntN(len(running))]
				runnerSetPhase(pick, cairnv1.BackupPhaseInProgress)
				runnerSetPhase(pick, cairnv1.BackupPhaseCompleted)
			}
			g.Expect(done).To(Equal(n))
		}).WithTimeout(3 * time.Minute).WithPolling(5 * time.Millisecond).Should(Succeed())

		w.Stop()
		<-watcherDone
		mu.Lock()
		defer mu.Unlock()
		Expect(violations).To(BeEmpty())
	})

	It("writes exact positions 1..n once the queue is at rest", func() {
		stopManager = StartManager(controller.Config{Controllers: queueOnly, ConcurrentBackups: 1})
		adminBackup("rest-run", "r")
		for i := range 20 {
			adminBackup(fmt.Sprintf("rest-%02d", i), "r")
		}
		want := map[string]string{"rest-run": "ReadyToStart"}
		for i := range 20 {
			want[fmt.Sprintf("rest-%02d", i)] = fmt.Sprintf("Queued:%d", i+1)
		}
		expectQueue(want)
		// Dequeue five in a burst; the rest renumber to 1..15.
		for i := range 5 {
			running := "rest-run"
			if i > 0 {
				running = fmt.Sprintf("rest-%02d", i-1)
			}
			runnerSetPhase(running, cairnv1.BackupPhaseInProgress)
			runnerSetPhase(running, cairnv1.BackupPhaseCompleted)
			expectQueue(map[string]string{fmt.Sprintf("rest-%02d", i): "ReadyToStart"})
		}
		want = map[string]string{}
		for i := 5; i < 20; i++ {
			want[fmt.Sprintf("rest-%02d", i)] = fmt.Sprintf("Queued:%d", i-4)
		}
		expectQueue(want)
	})
})

// checkQueueInvariants returns what is wrong with one observed state: overlapping running
// backups, too many running, or queued positions that repeat or contradict the queue order.
func checkQueueInvariants(states map[string]*cairnv1.Backup, sets map[string]selection.NamespaceSet, limit int) []string {
	var problems []string
	var running []string
	positions := map[int32]string{}
	var queued []*cairnv1.Backup
	for name, b := range states {
		switch b.Status.Phase {
		case cairnv1.BackupPhaseReadyToStart, cairnv1.BackupPhaseInProgress:
			running = append(running, name)
		case cairnv1.BackupPhaseQueued:
			if b.Status.QueuePosition < 1 {
				problems = append(problems, fmt.Sprintf("%s is queued at position %d", name, b.Status.QueuePosition))
			}
			if other, dup := positions[b.Status.QueuePosition]; dup {
				problems = append(problems, fmt.Sprintf("%s and %s share position %d", name, other, b.Status.QueuePosition))
			}
			positions[b.Status.QueuePosition] = name
			queued = append(queued, b)
		}
	}
	if len(running) > limit {
		problems = append(problems, fmt.Sprintf("%d running backups: %v", len(running), running))
	}
	for i := range running {
		for j := i + 1; j < len(running); j++ {
			var c selection.Claims
			c.Add(sets[running[i]])
			if _, _, ok := c.FirstOverlap(sets[running[j]]); ok {
				problems = append(problems, fmt.Sprintf("overlapping backups run together: %s and %s", running[i], running[j]))
			}
		}
	}
	// Names were created in order, so the queue order is the name order.
	sort.Slice(queued, func(i, j int) bool { return queued[i].Name < queued[j].Name })
	for i := 1; i < len(queued); i++ {
		if queued[i].Status.QueuePosition <= queued[i-1].Status.QueuePosition {
			problems = append(problems, fmt.Sprintf("%s is at %d, behind %s at %d", queued[i].Name, queued[i].Status.QueuePosition, queued[i-1].Name, queued[i-1].Status.QueuePosition))
		}
	}
	return problems
}
