package deletion_test

import (
	"errors"
	"slices"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

var _ = Describe("Deletion", Ordered, func() {
	var (
		fault    *testenv.FaultStore
		plain    *storage.Filesystem
		stop     func()
		config   controller.Config
		recorder *PhaseRecorder
	)

	BeforeAll(func() {
		fsA, locA := CreateDefaultLocation("del-a")
		fault = testenv.NewFaultStore(fsA)
		dirB := GinkgoT().TempDir()
		var err error
		plain, err = storage.NewFilesystem(dirB)
		Expect(err).NotTo(HaveOccurred())
		locB := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "del-b", Namespace: OperatorNamespace}, Spec: FilesystemSpec(dirB)}
		Expect(K8sClient.Create(SuiteCtx, locB)).To(Succeed())
		DeferCleanup(func() { Expect(K8sClient.Delete(SuiteCtx, locB)).To(Succeed()) })

		for _, ns := range []string{"del-1", "del-2", "del-3"} {
			EnsureNamespace(ns)
			CreateObject(ConfigMap(ns, "settings", nil))
		}

		config = controller.Config{ConcurrentBackups: 2, RetryBackoffMin: 200 * time.Millisecond, RetryBackoffMax: time.Second,
			StorageTimeout: 5 * time.Second,
			WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				if bsl.Name == "del-a" {
					return fault
				}
				return s
			}}
		stop = StartManager(config)
		DeferCleanup(func() { stop() })
		DeferCleanup(DeleteAllBackups)
		for _, loc := range []*cairnv1.BackupStorageLocation{locA, locB} {
			EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
		}
		recorder = RecordPhases()
	})
	AfterEach(func() { fault.ReleaseDeletes(); fault.ReleasePuts(); fault.FailDeletes(0, nil); fault.Up() })

	completed := func(name, namespace string) storage.BackupKeys {
		GinkgoHelper()
		CreateBackup(OperatorNamespace, name, cairnv1.BackupSpec{IncludedNamespaces: []string{namespace}})
		b := WaitPhase(name, cairnv1.BackupPhaseCompleted)
		Expect(b.Finalizers).To(ContainElement(cairnv1.BackupDataFinalizer))
		keys := storage.Layout{}.Backup(OperatorNamespace, name)
		Expect(fault.Exists(SuiteCtx, keys.Metadata)).To(BeTrue())
		return keys
	}

	It("deletes a backup's data and then the object, and nothing of a backup whose name it prefixes", func() {
		keys1 := completed("b1", "del-1")
		keys10 := completed("b10", "del-1")
		before10, err := fault.List(SuiteCtx, keys10.Dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(before10).To(HaveLen(5)) // archive, log, resource list, results, metadata
		DeleteBackup("b1")
		ExpectGone("b1")
		// A deletion this quick goes without a Deleting phase (TestQuickDeletionWritesNoStatus);
		// it never failed.
		Expect(recorder.Of("b1")).NotTo(ContainElement(cairnv1.BackupPhaseDeletionFailed))
		Expect(fault.List(SuiteCtx, keys1.Dir)).To(BeEmpty())
		Expect(fault.List(SuiteCtx, keys10.Dir)).To(Equal(before10))
		for _, key := range fault.Deletes() {
			Expect(key).To(HavePrefix(keys1.Dir))
		}
	})

	It("retries failed deletions with backoff: DeletionFailed → Deleting → DeletionFailed → … → gone", func() {
		keys := completed("flaky", "del-2")
		fault.FailDeletes(3, errors.New("503 SlowDown: please reduce your request rate"))
		DeleteBackup("flaky")
		// Watched, not polled: each DeletionFailed lasts only the backoff (200 ms at first).
		var failed *cairnv1.Backup
		Eventually(func() *cairnv1.Backup {
			failed = recorder.First("flaky", cairnv1.BackupPhaseDeletionFailed)
			return failed
		}).ShouldNot(BeNil())
		Expect(failed.Status.LastDeletionError).To(ContainSubstring("503 SlowDown"))
		Expect(failed.Status.NextDeletionAttempt).NotTo(BeNil())
		Expect(failed.Status.DeletionAttempts).To(BeEquivalentTo(1))
		ExpectGone("flaky")
		Expect(fault.List(SuiteCtx, keys.Dir)).To(BeEmpty())
		// The first attempt fails before it would show Deleting; each retry shows it at once.
		phases := recorder.Of("flaky")
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
		DeleteBackup("slow-delete")
		Eventually(fault.HangingDeletes).Should(Equal(1))
		// A deletion that takes longer than a second shows Deleting, with its event.
		Eventually(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "slow-delete").Status.Phase }).
			Should(Equal(cairnv1.BackupPhaseDeleting))
		Eventually(func() []string { return EventReasons("slow-delete") }).Should(ContainElement("Deleting"))

		CreateBackup(OperatorNamespace, "elsewhere", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-2"}, StorageLocation: "del-b"})
		CreateBackup(OperatorNamespace, "same-place", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-3"}})
		// The other location's backup runs to the end while the deletion hangs.
		WaitPhase("elsewhere", cairnv1.BackupPhaseCompleted)
		Expect(plain.Exists(SuiteCtx, storage.Layout{}.Backup(OperatorNamespace, "elsewhere").Metadata)).To(BeTrue())
		Expect(fault.HangingDeletes()).To(Equal(1))
		cond := QueuedCondition("same-place")
		Expect(GetBackup(OperatorNamespace, "same-place").Status.Phase).To(Equal(cairnv1.BackupPhaseQueued))
		Expect(cond.Reason).To(Equal(cairnv1.ReasonWaitingForDeletion))
		Expect(cond.Message).To(Equal("waiting for backup cairn-system/slow-delete to be deleted from storage location del-a"))

		// The hung delete times out (--storage-timeout): DeletionFailed releases the location.
		WaitPhase("same-place", cairnv1.BackupPhaseCompleted)
		Eventually(func() []cairnv1.BackupPhase { return recorder.Of("slow-delete") }).Should(ContainElement(cairnv1.BackupPhaseDeletionFailed))
		fault.ReleaseDeletes()
		ExpectGone("slow-delete")
	})

	It("retries a deletion the operator was running when it restarted", func() {
		keys := completed("interrupted", "del-2")
		fault.HangDeletes()
		DeleteBackup("interrupted")
		Eventually(fault.HangingDeletes).Should(Equal(1))
		Eventually(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "interrupted").Status.Phase }).
			Should(Equal(cairnv1.BackupPhaseDeleting))
		stop()
		stop = StartManager(config)
		// The new manager finds Deleting with no deletion running: DeletionFailed, then retried
		// (which hangs again, briefly, until released below).
		Eventually(func() []string {
			var notes []string
			for _, e := range BackupEvents(OperatorNamespace, "interrupted") {
				notes = append(notes, e.Note)
			}
			return notes
		}).Should(ContainElement(ContainSubstring("no deletion in progress (the operator restarted), retrying")))
		Eventually(func() []cairnv1.BackupPhase { return recorder.Of("interrupted") }).
			Should(ContainElements(cairnv1.BackupPhaseDeleting, cairnv1.BackupPhaseDeletionFailed))
		fault.ReleaseDeletes()
		ExpectGone("interrupted")
		Expect(fault.List(SuiteCtx, keys.Dir)).To(BeEmpty())
	})

	It("cancels a queued or running backup that is deleted, then removes its data", func() {
		fault.BlockPuts(".tar.gz")
		CreateBackup(OperatorNamespace, "del-running", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-1"}})
		WaitPhase("del-running", cairnv1.BackupPhaseInProgress)
		Eventually(fault.BlockedPuts).Should(Equal(1))
		CreateBackup(OperatorNamespace, "del-queued", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-1"}})
		WaitPhase("del-queued", cairnv1.BackupPhaseQueued)

		DeleteBackup("del-queued")
		ExpectGone("del-queued")
		Eventually(func() []cairnv1.BackupPhase { return recorder.Of("del-queued") }).Should(ContainElement(cairnv1.BackupPhaseFailed))

		DeleteBackup("del-running")
		ExpectGone("del-running")
		Eventually(func() []cairnv1.BackupPhase { return recorder.Of("del-running") }).Should(ContainElements(cairnv1.BackupPhaseFinalizingCancelled, cairnv1.BackupPhaseFailed))
		Expect(fault.List(SuiteCtx, storage.Layout{}.Backup(OperatorNamespace, "del-running").Dir)).To(BeEmpty())
		Eventually(func() []string { return EventReasons("del-running") }).Should(ContainElements("Cancelling", "Cancelled"))
	})

	It("says what to do when the location is ReadOnly, and keep-data lets the object go without touching storage", func() {
		dir := GinkgoT().TempDir()
		fs, err := storage.NewFilesystem(dir)
		Expect(err).NotTo(HaveOccurred())
		locC := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "del-c", Namespace: OperatorNamespace}, Spec: FilesystemSpec(dir)}
		Expect(K8sClient.Create(SuiteCtx, locC)).To(Succeed())
		DeferCleanup(func() { _ = K8sClient.Delete(SuiteCtx, locC) })
		EventuallyLocation(locC, cairnv1.StorageLocationPhaseAvailable, "")
		CreateBackup(OperatorNamespace, "archived", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-3"}, StorageLocation: "del-c"})
		WaitPhase("archived", cairnv1.BackupPhaseCompleted)
		keys := storage.Layout{}.Backup(OperatorNamespace, "archived")

		Expect(K8sClient.Patch(SuiteCtx, locC, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"accessMode":"ReadOnly"}}`)))).To(Succeed())
		DeleteBackup("archived")
		Eventually(func(g Gomega) {
			b := GetBackup(OperatorNamespace, "archived")
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseDeletionFailed))
			g.Expect(b.Status.LastDeletionError).To(Equal(`storage location del-c is ReadOnly, so the backup's data cannot be deleted: make it ReadWrite, or set the annotation cairn.dev/keep-data="true" to delete only the Backup object`))
		}).Should(Succeed())
		Expect(fs.Exists(SuiteCtx, keys.Metadata)).To(BeTrue())

		Expect(K8sClient.Patch(SuiteCtx, GetBackup(OperatorNamespace, "archived"),
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"cairn.dev/keep-data":"true"}}}`)))).To(Succeed())
		ExpectGone("archived")
		Expect(fs.List(SuiteCtx, keys.Dir)).To(HaveLen(5), "keep-data touches nothing in storage")
		Eventually(func() []string { return EventReasons("archived") }).Should(ContainElement("DataKept"))
	})

	It("never lets a new backup overwrite the kept data of an earlier one with the same name", func() {
		keys := completed("same-name", "del-2")
		first := GetBackup(OperatorNamespace, "same-name")
		Expect(K8sClient.Patch(SuiteCtx, first, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"cairn.dev/keep-data":"true"}}}`)))).To(Succeed())
		DeleteBackup("same-name")
		ExpectGone("same-name")
		kept, err := storage.ReadMetadata(SuiteCtx, fault, keys)
		Expect(err).NotTo(HaveOccurred())
		Expect(kept.UID).To(Equal(string(first.UID)))

		CreateBackup(OperatorNamespace, "same-name", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-3"}})
		b := WaitPhase("same-name", cairnv1.BackupPhaseFailedValidation)
		Expect(b.Status.ValidationErrors).To(ConsistOf(ContainSubstring("storage location del-a already holds a backup named cairn-system/same-name, made by another Backup object")))
		again, err := storage.ReadMetadata(SuiteCtx, fault, keys)
		Expect(err).NotTo(HaveOccurred())
		Expect(again).To(Equal(kept))

		// Deleting the refused one leaves the earlier data alone too.
		DeleteBackup("same-name")
		ExpectGone("same-name")
		Expect(fault.Exists(SuiteCtx, keys.Metadata)).To(BeTrue())
	})

	It("says what to do when the location is gone", func() {
		dir := GinkgoT().TempDir()
		locD := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "del-d", Namespace: OperatorNamespace}, Spec: FilesystemSpec(dir)}
		Expect(K8sClient.Create(SuiteCtx, locD)).To(Succeed())
		EventuallyLocation(locD, cairnv1.StorageLocationPhaseAvailable, "")
		CreateBackup(OperatorNamespace, "orphan", cairnv1.BackupSpec{IncludedNamespaces: []string{"del-3"}, StorageLocation: "del-d"})
		WaitPhase("orphan", cairnv1.BackupPhaseCompleted)
		Expect(K8sClient.Delete(SuiteCtx, locD)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(locD), &cairnv1.BackupStorageLocation{}))
		}).Should(BeTrue())
		DeleteBackup("orphan")
		Eventually(func(g Gomega) {
			b := GetBackup(OperatorNamespace, "orphan")
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseDeletionFailed))
			g.Expect(b.Status.LastDeletionError).To(ContainSubstring(`storage location "del-d" does not exist`))
			g.Expect(b.Status.LastDeletionError).To(ContainSubstring(`cairn.dev/keep-data="true"`))
		}).Should(Succeed())
		b := GetBackup(OperatorNamespace, "orphan")
		Expect(controllerutil.ContainsFinalizer(b, cairnv1.BackupDataFinalizer)).To(BeTrue())
		Expect(meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionCancelled)).To(BeNil())
	})
})
