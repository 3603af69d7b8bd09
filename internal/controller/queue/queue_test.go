package queue_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	"github.com/go-logr/logr/funcr"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/controller/queue"
	"github.com/cairn-backup/cairn/internal/scope"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// The test plays the backup runner: it moves ReadyToStart backups on by patching their status.

func adminBackup(name string, namespaces ...string) {
	GinkgoHelper()
	CreateBackup(OperatorNamespace, name, cairnv1.BackupSpec{IncludedNamespaces: namespaces})
}

// expectQueue waits until the named admin backups have these phases and positions
// ("Queued:2", "ReadyToStart").
func expectQueue(want map[string]string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		got := map[string]string{}
		for name := range want {
			b := GetBackup(OperatorNamespace, name)
			s := string(b.Status.Phase)
			if b.Status.Phase == cairnv1.BackupPhaseQueued {
				s = fmt.Sprintf("Queued:%d", b.Status.QueuePosition)
			}
			got[name] = s
		}
		g.Expect(got).To(Equal(want))
	}).WithTimeout(15 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
}

// expectLine waits until the named admin backups and restores ("backup/b1", "restore/r1") have
// these phases and positions ("Queued:2", "ReadyToStart").
func expectLine(want map[string]string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		got := map[string]string{}
		for key := range want {
			kind, name, _ := strings.Cut(key, "/")
			var phase string
			var position int32
			if kind == "restore" {
				rs := GetRestore(OperatorNamespace, name)
				phase, position = string(rs.Status.Phase), rs.Status.QueuePosition
			} else {
				b := GetBackup(OperatorNamespace, name)
				phase, position = string(b.Status.Phase), b.Status.QueuePosition
			}
			if phase == "Queued" {
				phase = fmt.Sprintf("Queued:%d", position)
			}
			got[key] = phase
		}
		g.Expect(got).To(Equal(want))
	}).WithTimeout(15 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
}

// restoreSetPhase moves a restore on, as the restore reconciler would.
func restoreSetPhase(name string, phase cairnv1.RestorePhase) {
	GinkgoHelper()
	Eventually(func() error {
		rs := GetRestore(OperatorNamespace, name)
		patch := client.MergeFromWithOptions(rs.DeepCopy(), client.MergeFromWithOptimisticLock{})
		rs.Status.Phase = phase
		return K8sClient.Status().Patch(SuiteCtx, rs, patch)
	}).WithTimeout(5 * time.Second).Should(Succeed())
}

func restoreQueuedMessage(name string) string {
	GinkgoHelper()
	c := meta.FindStatusCondition(GetRestore(OperatorNamespace, name).Status.Conditions, cairnv1.RestoreConditionQueued)
	if c == nil {
		return ""
	}
	return c.Message
}

// runnerSetPhase moves a backup on, as the backup runner would.
func runnerSetPhase(name string, phase cairnv1.BackupPhase) {
	GinkgoHelper()
	Eventually(func() error {
		b := GetBackup(OperatorNamespace, name)
		patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
		b.Status.Phase = phase
		return K8sClient.Status().Patch(SuiteCtx, b, patch)
	}).WithTimeout(5 * time.Second).Should(Succeed())
}

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
		sets := map[string]scope.NamespaceSet{}
		for i := range n {
			name := fmt.Sprintf("load-%03d", i)
			var included []string
			if rng.IntN(50) == 0 {
				sets[name] = scope.NamespaceSet{All: true}
			} else {
				picked := map[string]bool{}
				for range 1 + rng.IntN(3) {
					picked[fmt.Sprintf("lns%d", rng.IntN(12))] = true
				}
				for ns := range picked {
					included = append(included, ns)
				}
				sort.Strings(included)
				sets[name] = scope.NamespaceSet{Names: included}
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
func checkQueueInvariants(states map[string]*cairnv1.Backup, sets map[string]scope.NamespaceSet, limit int) []string {
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
			var c scope.Claims
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

// queueOnly runs the queue alone (and the phase events): the test plays the backup runner.
var queueOnly = []string{"queue", "phaseevents"}

// openGate lets a queue made by a test run at once.
type openGate struct{}

func (openGate) Wait(context.Context) error { return nil }

// queueBackup is a backup as a fake-client test starts it: created at t0+age seconds, with a
// UID, in the operator's namespace.
func queueBackup(name string, age int, phase cairnv1.BackupPhase, position int32, spec cairnv1.BackupSpec) *cairnv1.Backup {
	return &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: OperatorNamespace, UID: types.UID("uid-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, age, 0, time.UTC)),
			Finalizers:        []string{cairnv1.BackupDataFinalizer}},
		Spec:   spec,
		Status: cairnv1.BackupStatus{Phase: phase, QueuePosition: position, StorageLocation: "default"},
	}
}

// TestQueuePassGoesOnAfterAFailedWrite: the API server rejects the status writes of the backup
// "bad" at one step of a pass; the other backups still move in that same pass, the failure is
// logged, the pass ends with an error (so it is retried), and the retry moves "bad" too.
func TestQueuePassGoesOnAfterAFailedWrite(t *testing.T) {
	selecting := func(namespaces ...string) cairnv1.BackupSpec {
		return cairnv1.BackupSpec{IncludedNamespaces: namespaces}
	}
	tooBig := apierrors.NewRequestEntityTooLargeError("limit is 3145728")
	conflict := apierrors.NewConflict(cairnv1.GroupVersion.WithResource("backups").GroupResource(), "bad", fmt.Errorf("the object has been modified"))
	tests := []struct {
		name        string
		concurrency int
		backups     []*cairnv1.Backup
		fault       error
		// want are phases and positions ("Queued:2") after the failing pass; wantRetried after
		// the next, fault-free pass.
		want, wantRetried map[string]string
	}{
		{
			name:        "New → Queued of one new backup fails",
			concurrency: 2,
			backups: []*cairnv1.Backup{
				queueBackup("bad", 1, "", 0, selecting("a")),
				queueBackup("good", 2, "", 0, selecting("b")),
			},
			fault:       conflict,
			want:        map[string]string{"bad": "", "good": "ReadyToStart"},
			wantRetried: map[string]string{"bad": "ReadyToStart", "good": "ReadyToStart"},
		},
		{
			// The slot the failed one would have taken goes to the next in line at once.
			name:        "New → Queued of the first new backup fails, with one slot",
			concurrency: 1,
			backups: []*cairnv1.Backup{
				queueBackup("bad", 1, "", 0, selecting("a")),
				queueBackup("good", 2, "", 0, selecting("b")),
			},
			fault:       tooBig,
			want:        map[string]string{"bad": "", "good": "ReadyToStart"},
			wantRetried: map[string]string{"bad": "Queued:1", "good": "ReadyToStart"},
		},
		{
			name:        "the dequeue of the first queued backup fails",
			concurrency: 2,
			backups: []*cairnv1.Backup{
				queueBackup("bad", 1, cairnv1.BackupPhaseQueued, 1, selecting("a")),
				queueBackup("good", 2, cairnv1.BackupPhaseQueued, 2, selecting("b")),
			},
			fault:       tooBig,
			want:        map[string]string{"bad": "Queued:1", "good": "ReadyToStart"},
			wantRetried: map[string]string{"bad": "ReadyToStart", "good": "ReadyToStart"},
		},
		{
			name:        "failing a cancelled backup fails",
			concurrency: 1,
			backups: []*cairnv1.Backup{
				queueBackup("bad", 1, cairnv1.BackupPhaseQueued, 1, cairnv1.BackupSpec{IncludedNamespaces: []string{"a"}, Cancel: true}),
				queueBackup("good", 2, "", 0, selecting("a")),
			},
			fault:       conflict,
			want:        map[string]string{"bad": "Queued:1", "good": "ReadyToStart"},
			wantRetried: map[string]string{"bad": "Failed", "good": "ReadyToStart"},
		},
		{
			name:        "the FailedValidation write of an invalid backup fails",
			concurrency: 1,
			backups: []*cairnv1.Backup{
				queueBackup("bad", 1, "", 0, cairnv1.BackupSpec{StorageLocation: "nowhere"}),
				queueBackup("good", 2, "", 0, selecting("a")),
			},
			fault:       tooBig,
			want:        map[string]string{"bad": "", "good": "ReadyToStart"},
			wantRetried: map[string]string{"bad": "FailedValidation", "good": "ReadyToStart"},
		},
		{
			// The backup behind the failed one keeps its place rather than jump over it.
			name:        "renumbering one backup fails",
			concurrency: 1,
			backups: []*cairnv1.Backup{
				queueBackup("running", 0, cairnv1.BackupPhaseReadyToStart, 0, selecting("a")),
				queueBackup("good", 1, cairnv1.BackupPhaseQueued, 2, selecting("a")),
				queueBackup("bad", 2, cairnv1.BackupPhaseQueued, 3, selecting("a")),
				queueBackup("behind", 3, cairnv1.BackupPhaseQueued, 5, selecting("a")),
			},
			fault:       conflict,
			want:        map[string]string{"running": "ReadyToStart", "good": "Queued:1", "bad": "Queued:3", "behind": "Queued:5"},
			wantRetried: map[string]string{"running": "ReadyToStart", "good": "Queued:1", "bad": "Queued:2", "behind": "Queued:3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects := []client.Object{
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
				&cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: OperatorNamespace},
					Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true}},
			}
			for _, b := range tt.backups {
				objects = append(objects, b)
			}
			var faulty atomic.Bool
			faulty.Store(true)
			c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(objects...).
				WithStatusSubresource(&cairnv1.Backup{}).
				WithInterceptorFuncs(interceptor.Funcs{
					SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
						if faulty.Load() && obj.GetName() == "bad" {
							return tt.fault
						}
						return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
					},
				}).Build()
			r := &queue.Reconciler{Client: c, Namespace: OperatorNamespace, ConcurrentBackups: tt.concurrency,
				ResyncPeriod: time.Minute, Clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)),
				Recorder: events.NewFakeRecorder(100), Gate: openGate{}}
			var logged []string
			ctx := ctrl.LoggerInto(context.Background(), funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}))

			_, err := r.Reconcile(ctx, ctrl.Request{})
			if err == nil {
				t.Errorf("the pass with a failed write returned no error: it would not be retried")
			}
			if got := queueStates(t, c, tt.want); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("after the failing pass: %v, want %v", got, tt.want)
			}
			if !slices.ContainsFunc(logged, func(l string) bool { return strings.Contains(l, "cairn-system/bad") }) {
				t.Errorf("the failed write was not logged with the backup's name: %q", logged)
			}

			faulty.Store(false)
			if _, err := r.Reconcile(ctx, ctrl.Request{}); err != nil {
				t.Fatalf("the retry failed: %v", err)
			}
			if got := queueStates(t, c, tt.wantRetried); !reflect.DeepEqual(got, tt.wantRetried) {
				t.Errorf("after the retry: %v, want %v", got, tt.wantRetried)
			}
		})
	}
}

// queueStates reads the named backups' phases and positions ("Queued:2") from c.
func queueStates(t *testing.T, c client.Client, names map[string]string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for name := range names {
		var b cairnv1.Backup
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: OperatorNamespace, Name: name}, &b); err != nil {
			t.Fatal(err)
		}
		s := string(b.Status.Phase)
		if b.Status.Phase == cairnv1.BackupPhaseQueued {
			s = fmt.Sprintf("Queued:%d", b.Status.QueuePosition)
		}
		got[name] = s
	}
	return got
}
