package controller_test

import (
	"errors"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// phaseRecorder records every phase a backup passes through, from a watch.
type phaseRecorder struct {
	mu     sync.Mutex
	phases map[string][]cairnv1.BackupPhase
	// firsts holds each backup as first seen in each phase.
	firsts map[string]*cairnv1.Backup
}

func recordPhases() *phaseRecorder {
	GinkgoHelper()
	p := &phaseRecorder{phases: map[string][]cairnv1.BackupPhase{}, firsts: map[string]*cairnv1.Backup{}}
	w, err := watchClient().Watch(suiteCtx, &cairnv1.BackupList{}, client.InNamespace(operatorNamespace))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			b, ok := ev.Object.(*cairnv1.Backup)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			p.mu.Lock()
			seen := p.phases[b.Name]
			if len(seen) == 0 || seen[len(seen)-1] != b.Status.Phase {
				p.phases[b.Name] = append(seen, b.Status.Phase)
			}
			if key := b.Name + "/" + string(b.Status.Phase); p.firsts[key] == nil {
				p.firsts[key] = b
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// first is the backup as first seen in phase, or nil.
func (p *phaseRecorder) first(name string, phase cairnv1.BackupPhase) *cairnv1.Backup {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firsts[name+"/"+string(phase)]
}

func (p *phaseRecorder) of(name string) []cairnv1.BackupPhase {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.phases[name])
}

// expectGone waits until the backup object is gone.
func expectGone(name string) {
	GinkgoHelper()
	Eventually(func() bool {
		err := k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: operatorNamespace, Name: name}, &cairnv1.Backup{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(30*time.Second).Should(BeTrue(), "backup %s is still there", name)
}

func deleteBackup(name string) {
	GinkgoHelper()
	Expect(k8sClient.Delete(suiteCtx, getBackup(operatorNamespace, name))).To(Succeed())
}

var _ = Describe("Deletion", Ordered, func() {
	var (
		fault    *testenv.FaultStore
		plain    *storage.Filesystem
		stop     func()
		config   controller.Config
		recorder *phaseRecorder
	)

	BeforeAll(func() {
		fsA, locA := createDefaultLocation("del-a")
		fault = testenv.NewFaultStore(fsA)
		dirB := GinkgoT().TempDir()
		var err error
		plain, err = storage.NewFilesystem(dirB)
		Expect(err).NotTo(HaveOccurred())
		locB := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "del-b", Namespace: operatorNamespace}, Spec: filesystemSpec(dirB)}
		Expect(k8sClient.Create(suiteCtx, locB)).To(Succeed())
		DeferCleanup(func() { Expect(k8sClient.Delete(suiteCtx, locB)).To(Succeed()) })

		for _, ns := range []string{"del-1", "del-2", "del-3"} {
			ensureNamespace(ns)
			createObject(configMap(ns, "settings", nil))
		}

		config = controller.Config{ConcurrentBackups: 2, RetryBackoffMin: 200 * time.Millisecond, RetryBackoffMax: time.Second,
			StorageTimeout: 5 * time.Second,
			WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				if bsl.Name == "del-a" {
					return fault
				}
				return s
			}}
		stop = startManager(config)
		DeferCleanup(func() { stop() })
		DeferCleanup(deleteAllBackups)
		for _, loc := range []*cairnv1.BackupStorageLocation{locA, locB} {
			eventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
		}
		recorder = recordPhases()
	})
	AfterEach(func() { fault.ReleaseDeletes(); fault.ReleasePuts(); fault.FailDeletes(0, nil); fault.Up() })

	completed := func(name, namespace string) storage.BackupKeys {
		GinkgoHelper()
		createBackup(operatorNamespace, name, cairnv1.BackupSpec{IncludedNamespaces: []string{namespace}})
		b := waitPhase(name, cairnv1.BackupPhaseCompleted)
		Expect(b.Finalizers).To(ContainElement(cairnv1.BackupDataFinalizer))
		keys := storage.Layout{}.Backup(operatorNamespace, name)
		Expect(fault.Exists(suiteCtx, keys.Metadata)).To(BeTrue())
		return keys
	}

	It("deletes a backup's data and then the object, and nothing of a backup whose name it prefixes", func() {
		keys1 := completed("b1", "del-1")
		keys10 := completed("b10", "del-1")
		before10, err := fault.List(suiteCtx, keys10.Dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(before10).To(HaveLen(5)) // archive, log, resource list, results, metadata
		deleteBackup("b1")
		expectGone("b1")
		// A deletion this quick goes without a Deleting phase (TestQuickDeletionWritesNoStatus);
		// it never failed.
		Expect(recorder.of("b1")).NotTo(ContainElement(cairnv1.BackupPhaseDeletionFailed))
		Expect(fault.List(suiteCtx, keys1.Dir)).To(BeEmpty())
		Expect(fault.List(suiteCtx, keys10.Dir)).To(Equal(before10))
		for _, key := range fault.Deletes() {
			Expect(key).To(HavePrefix(keys1.Dir))
		}
	})

	It("retries failed deletions with backoff: DeletionFailed → Deleting → DeletionFailed → … → gone", func() {
		keys := completed("flaky", "del-2")
		fault.FailDeletes(3, errors.New("503 SlowDown: please reduce your request rate"))
		deleteBackup("flaky")
		// Watched, not polled: each DeletionFailed lasts only the backoff (200 ms at first).
		var failed *cairnv1.Backup
		Eventually(func() *cairnv1.Backup {
			failed = recorder.first("flaky", cairnv1.BackupPhaseDeletionFailed)
			return failed
		}).ShouldNot(BeNil())
		Expect(failed.Status.LastDeletionError).To(ContainSubstring("503 SlowDown"))
		Expect(failed.Status.NextDeletionAttempt).NotTo(BeNil())
		Expect(failed.Status.DeletionAttempts).To(BeEquivalentTo(1))
		expectGone("flaky")
		Expect(fault.List(suiteCtx, keys.Dir)).To(BeEmpty())
		// The first attempt fails before it would show Deleting; each retry shows it at once.
		phases := recorder.of("flaky")
		first := slices.Index(phases, cairnv1.BackupPhaseDeletionFailed)
		Expect(first).To(BeNumerically(">", 0))
		Expect(phases[first-1]).To(Equal(cairnv1.BackupPhaseCompleted))
		Expect(phases[first:]).To(Equal([]cairnv1.BackupPhase{
			cairnv1.BackupPhaseDeletionFailed, cairnv1.BackupPhaseDeleting,
			cairnv1.BackupPhaseDeletionFailed, cairnv1.BackupPhaseDeleting,
			cairnv1.BackupPhaseDeletionFailed, cairnv1.BackupPhaseDeleting,
		}), "three failures, then the attempt that succeeds: %v", phases)
	})

	It("does not hold up a backup in another location, and queues one in the same location until the deletion ends or fails", func() {
		completed("slow-delete", "del-1")
		fault.HangDeletes()
		deleteBackup("slow-delete")
		Eventually(fault.HangingDeletes).Should(Equal(1))
		// A deletion that takes longer than a second shows Deleting, with its event.
		Eventually(func() cairnv1.BackupPhase { return getBackup(operatorNamespace, "slow-delete").Status.Phase }).
			Should(Equal(cairnv1.BackupPhaseDeleting))
		Eventually(func() []string { return eventReasons("slow-delete") }).Should(ContainElement("Deleting"))

		createBackup(operatorNamespace, "elsewhere", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-2"}, StorageLocation: "del-b"})
		createBackup(operatorNamespace, "same-place", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-3"}})
		// The other location's backup runs to the end while the deletion hangs.
		waitPhase("elsewhere", cairnv1.BackupPhaseCompleted)
		Expect(plain.Exists(suiteCtx, storage.Layout{}.Backup(operatorNamespace, "elsewhere").Metadata)).To(BeTrue())
		Expect(fault.HangingDeletes()).To(Equal(1))
		cond := queuedCondition("same-place")
		Expect(getBackup(operatorNamespace, "same-place").Status.Phase).To(Equal(cairnv1.BackupPhaseQueued))
		Expect(cond.Reason).To(Equal(cairnv1.ReasonWaitingForDeletion))
		Expect(cond.Message).To(Equal("waiting for backup cairn-system/slow-delete to be deleted from storage location del-a"))

		// The hung delete times out (--storage-timeout): DeletionFailed releases the location.
		waitPhase("same-place", cairnv1.BackupPhaseCompleted)
		Expect(recorder.of("slow-delete")).To(ContainElement(cairnv1.BackupPhaseDeletionFailed))
		fault.ReleaseDeletes()
		expectGone("slow-delete")
	})

	It("retries a deletion the operator was running when it restarted", func() {
		keys := completed("interrupted", "del-2")
		fault.HangDeletes()
		deleteBackup("interrupted")
		Eventually(fault.HangingDeletes).Should(Equal(1))
		Eventually(func() cairnv1.BackupPhase { return getBackup(operatorNamespace, "interrupted").Status.Phase }).
			Should(Equal(cairnv1.BackupPhaseDeleting))
		stop()
		stop = startManager(config)
		// The new manager finds Deleting with no deletion running: DeletionFailed, then retried
		// (which hangs again, briefly, until released below).
		Eventually(func() []string {
			var notes []string
			for _, e := range backupEvents(operatorNamespace, "interrupted") {
				notes = append(notes, e.Note)
			}
			return notes
		}).Should(ContainElement(ContainSubstring("no deletion in progress (the operator restarted), retrying")))
		Eventually(func() []cairnv1.BackupPhase { return recorder.of("interrupted") }).
			Should(ContainElements(cairnv1.BackupPhaseDeleting, cairnv1.BackupPhaseDeletionFailed))
		fault.ReleaseDeletes()
		expectGone("interrupted")
		Expect(fault.List(suiteCtx, keys.Dir)).To(BeEmpty())
	})

	It("cancels a queued or running backup that is deleted, then removes its data", func() {
		fault.BlockPuts(".tar.gz")
		createBackup(operatorNamespace, "del-running", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-1"}})
		waitPhase("del-running", cairnv1.BackupPhaseInProgress)
		Eventually(fault.BlockedPuts).Should(Equal(1))
		createBackup(operatorNamespace, "del-queued", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-1"}})
		waitPhase("del-queued", cairnv1.BackupPhaseQueued)

		deleteBackup("del-queued")
		expectGone("del-queued")
		Expect(recorder.of("del-queued")).To(ContainElement(cairnv1.BackupPhaseFailed))

		deleteBackup("del-running")
		expectGone("del-running")
		Expect(recorder.of("del-running")).To(ContainElements(cairnv1.BackupPhaseFinalizingCancelled, cairnv1.BackupPhaseFailed))
		Expect(fault.List(suiteCtx, storage.Layout{}.Backup(operatorNamespace, "del-running").Dir)).To(BeEmpty())
		Eventually(func() []string { return eventReasons("del-running") }).Should(ContainElements("Cancelling", "Cancelled"))
	})

	It("says what to do when the location is ReadOnly, and keep-data lets the object go without touching storage", func() {
		dir := GinkgoT().TempDir()
		fs, err := storage.NewFilesystem(dir)
		Expect(err).NotTo(HaveOccurred())
		locC := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "del-c", Namespace: operatorNamespace}, Spec: filesystemSpec(dir)}
		Expect(k8sClient.Create(suiteCtx, locC)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, locC) })
		eventuallyLocation(locC, cairnv1.StorageLocationPhaseAvailable, "")
		createBackup(operatorNamespace, "archived", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-3"}, StorageLocation: "del-c"})
		waitPhase("archived", cairnv1.BackupPhaseCompleted)
		keys := storage.Layout{}.Backup(operatorNamespace, "archived")

		Expect(k8sClient.Patch(suiteCtx, locC, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"accessMode":"ReadOnly"}}`)))).To(Succeed())
		deleteBackup("archived")
		Eventually(func(g Gomega) {
			b := getBackup(operatorNamespace, "archived")
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseDeletionFailed))
			g.Expect(b.Status.LastDeletionError).To(Equal(`storage location del-c is ReadOnly, so the backup's data cannot be deleted: make it ReadWrite, or set the annotation cairn.dev/keep-data="true" to delete only the Backup object`))
		}).Should(Succeed())
		Expect(fs.Exists(suiteCtx, keys.Metadata)).To(BeTrue())

		Expect(k8sClient.Patch(suiteCtx, getBackup(operatorNamespace, "archived"),
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"cairn.dev/keep-data":"true"}}}`)))).To(Succeed())
		expectGone("archived")
		Expect(fs.List(suiteCtx, keys.Dir)).To(HaveLen(5), "keep-data touches nothing in storage")
		Eventually(func() []string { return eventReasons("archived") }).Should(ContainElement("DataKept"))
	})

	It("never lets a new backup overwrite the kept data of an earlier one with the same name", func() {
		keys := completed("same-name", "del-2")
		first := getBackup(operatorNamespace, "same-name")
		Expect(k8sClient.Patch(suiteCtx, first, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"cairn.dev/keep-data":"true"}}}`)))).To(Succeed())
		deleteBackup("same-name")
		expectGone("same-name")
		kept, err := storage.ReadMetadata(suiteCtx, fault, keys)
		Expect(err).NotTo(HaveOccurred())
		Expect(kept.UID).To(Equal(string(first.UID)))

		createBackup(operatorNamespace, "same-name", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-3"}})
		b := waitPhase("same-name", cairnv1.BackupPhaseFailedValidation)
		Expect(b.Status.ValidationErrors).To(ConsistOf(ContainSubstring("storage location del-a already holds a backup named cairn-system/same-name, made by another Backup object")))
		again, err := storage.ReadMetadata(suiteCtx, fault, keys)
		Expect(err).NotTo(HaveOccurred())
		Expect(again).To(Equal(kept))

		// Deleting the refused one leaves the earlier data alone too.
		deleteBackup("same-name")
		expectGone("same-name")
		Expect(fault.Exists(suiteCtx, keys.Metadata)).To(BeTrue())
	})

	It("says what to do when the location is gone", func() {
		dir := GinkgoT().TempDir()
		locD := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "del-d", Namespace: operatorNamespace}, Spec: filesystemSpec(dir)}
		Expect(k8sClient.Create(suiteCtx, locD)).To(Succeed())
		eventuallyLocation(locD, cairnv1.StorageLocationPhaseAvailable, "")
		createBackup(operatorNamespace, "orphan", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-3"}, StorageLocation: "del-d"})
		waitPhase("orphan", cairnv1.BackupPhaseCompleted)
		Expect(k8sClient.Delete(suiteCtx, locD)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(locD), &cairnv1.BackupStorageLocation{}))
		}).Should(BeTrue())
		deleteBackup("orphan")
		Eventually(func(g Gomega) {
			b := getBackup(operatorNamespace, "orphan")
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseDeletionFailed))
			g.Expect(b.Status.LastDeletionError).To(ContainSubstring(`storage location "del-d" does not exist`))
			g.Expect(b.Status.LastDeletionError).To(ContainSubstring(`cairn.dev/keep-data="true"`))
		}).Should(Succeed())
		b := getBackup(operatorNamespace, "orphan")
		Expect(controllerutil.ContainsFinalizer(b, cairnv1.BackupDataFinalizer)).To(BeTrue())
		Expect(meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionCancelled)).To(BeNil())
	})
})
