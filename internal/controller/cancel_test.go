package controller_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// cancelBackup sets spec.cancel as `kubectl patch --type merge` does (same field manager).
func cancelBackup(name string) {
	GinkgoHelper()
	Expect(k8sClient.Patch(suiteCtx, getBackup(operatorNamespace, name),
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`)), client.FieldOwner("kubectl-patch"))).To(Succeed())
}

// readLog returns a backup's log, decompressed.
func readLog(store storage.ObjectStore, keys storage.BackupKeys) string {
	GinkgoHelper()
	return string(gunzip(store, keys.Logs))
}

// eventReasons lists the reasons of a backup's events.
func eventReasons(name string) []string {
	GinkgoHelper()
	var reasons []string
	for _, e := range backupEvents(operatorNamespace, name) {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// expectCancelled checks the end of a cancelled backup: Failed with the cancel's failureReason,
// Cancelled=True, a Cancelled event, and nothing left in the store but its log, which says
// who cancelled.
func expectCancelled(store storage.ObjectStore, name string) {
	GinkgoHelper()
	b := waitPhase(name, cairnv1.BackupPhaseFailed)
	Expect(b.Status.FailureReason).To(Equal(cairnv1.FailureReasonCancelled))
	cond := meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionCancelled)
	Expect(cond).NotTo(BeNil())
	Expect(cond.Status).To(Equal(metav1.ConditionTrue))
	Expect(cond.Reason).To(Equal(cairnv1.ReasonCancelledByUser))
	Expect(b.Status.CompletionTimestamp).NotTo(BeNil())
	Eventually(func() []string { return eventReasons(name) }).Should(ContainElement("Cancelled"))
	keys := storage.Layout{}.Backup(operatorNamespace, name)
	Expect(store.List(suiteCtx, keys.Dir)).To(Equal([]string{keys.Logs}))
	Expect(readLog(store, keys)).To(And(ContainSubstring(cairnv1.FailureReasonCancelled), ContainSubstring(`field manager \"kubectl-patch\"`)))
}

var _ = Describe("Cancellation", Ordered, func() {
	var (
		fault  *testenv.FaultStore
		pools  *poolRecorder
		stop   func()
		config controller.Config
	)

	BeforeAll(func() {
		fs, loc := createDefaultLocation("cancel-default")
		fault = testenv.NewFaultStore(fs)

		ensureNamespace("cancel-big")
		// Incompressible data, so that a blocked upload holds up the writer and then the workers.
		for i := range 300 {
			cm := configMap("cancel-big", fmt.Sprintf("cm-%03d", i), nil)
			random := make([]byte, 3000)
			_, _ = rand.Read(random)
			cm.Data = map[string]string{"k": base64.StdEncoding.EncodeToString(random)}
			createObject(cm)
		}
		ensureNamespace("ops-cancel")
		createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-cancel", Name: "token"}, StringData: map[string]string{"t": "x"}})

		pools = &poolRecorder{}
		config = controller.Config{ConcurrentBackups: 2, ItemBlockWorkerCount: 2, OnWorkerPool: pools.record,
			Actions: []backup.BackupItemAction{asyncSecretAction{}}, ItemOperationSyncFrequency: 100 * time.Millisecond,
			RetryBackoffMin: 200 * time.Millisecond, RetryBackoffMax: time.Second,
			WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				if bsl.Name == "cancel-default" {
					return fault
				}
				return s
			}}
		stop = startManager(config)
		DeferCleanup(func() { stop() })
		DeferCleanup(deleteAllBackups)
		eventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
	})

	// runBlocked starts a backup whose archive upload blocks, and waits until it is InProgress
	// with its worker pool busy.
	runBlocked := func(name string) {
		GinkgoHelper()
		fault.BlockPuts(".tar.gz")
		createBackup(operatorNamespace, name, cairnv1.BackupSpec{IncludedNamespaces: []string{"cancel-big", "ops-cancel"}})
		waitPhase(name, cairnv1.BackupPhaseInProgress)
		Eventually(fault.BlockedPuts).Should(Equal(1))
		Eventually(func() int { _, running := pools.snapshot(); return running }).Should(Equal(2))
	}
	AfterEach(func() { fault.ReleasePuts(); fault.Up() })

	It("stops a running backup's worker pool and upload, cancels its operations and keeps only the log", func() {
		runBlocked("cancel-running")
		// The pool is held up by the upload, not done: it stays busy until cancelled.
		Consistently(func() int { _, running := pools.snapshot(); return running }).WithTimeout(300 * time.Millisecond).Should(Equal(2))

		cancelBackup("cancel-running")
		// The bound here is generous for a shared machine; `make bench` measures the latency.
		Eventually(func() int { _, running := pools.snapshot(); return running }).WithTimeout(5 * time.Second).Should(BeZero())
		Eventually(fault.BlockedPuts).WithTimeout(5 * time.Second).Should(BeZero())

		expectCancelled(fault, "cancel-running")
		Expect(cancelledOperations()).To(ContainElement("op-ops-cancel-token"))
		b := getBackup(operatorNamespace, "cancel-running")
		Expect(b.Status.BackupItemOperationsAttempted).To(BeEquivalentTo(1))
		Expect(b.Status.BackupItemOperationsFailed).To(BeEquivalentTo(1))
		Eventually(func() []string { return eventReasons("cancel-running") }).Should(ContainElements("Started", "Cancelling", "Cancelled"))
		log := readLog(fault, storage.Layout{}.Backup(operatorNamespace, "cancel-running"))
		Expect(log).To(ContainSubstring("the worker pool and the upload were stopped"))
		Expect(log).To(ContainSubstring("op-ops-cancel-token"))
	})

	It("cancels the unfinished operations of a backup waiting for them", func() {
		ensureNamespace("ops-wait")
		createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-wait", Name: "one"}, StringData: map[string]string{"t": "x"}})
		createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-wait", Name: "two"}, StringData: map[string]string{"t": "x"}})
		setOperation("op-ops-wait-one", "done")
		createBackup(operatorNamespace, "cancel-waiting", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-wait"}})
		waitPhase("cancel-waiting", cairnv1.BackupPhaseWaitingForPluginOperations)
		Eventually(func() int32 {
			return getBackup(operatorNamespace, "cancel-waiting").Status.BackupItemOperationsCompleted
		}).Should(BeEquivalentTo(1))

		cancelBackup("cancel-waiting")
		expectCancelled(fault, "cancel-waiting")
		Expect(cancelledOperations()).To(ContainElement("op-ops-wait-two"))
		Expect(cancelledOperations()).NotTo(ContainElement("op-ops-wait-one"))
		b := getBackup(operatorNamespace, "cancel-waiting")
		Expect(b.Status.BackupItemOperationsCompleted).To(BeEquivalentTo(1))
		Expect(b.Status.BackupItemOperationsFailed).To(BeEquivalentTo(1))
	})

	It("cancels ReadyToStart and Finalizing backups through their owners", func() {
		stop()
		// Only the queue: the first backup stops in ReadyToStart.
		stop = startManager(controller.Config{Controllers: []string{"queue", "storagelocation"}, WrapStore: config.WrapStore})
		createBackup(operatorNamespace, "cancel-ready", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-cancel"}})
		waitPhase("cancel-ready", cairnv1.BackupPhaseReadyToStart)
		cancelBackup("cancel-ready")
		stop()
		// Everything but the finalizer: the second backup stops in Finalizing.
		stop = startManager(controller.Config{Controllers: []string{"queue", "backup", "storagelocation"}, WrapStore: config.WrapStore})
		b := waitPhase("cancel-ready", cairnv1.BackupPhaseFailed)
		Expect(b.Status.FailureReason).To(Equal(cairnv1.FailureReasonCancelled))
		Expect(b.Status.StartTimestamp).To(BeNil())
		Expect(fault.List(suiteCtx, storage.Layout{}.Backup(operatorNamespace, "cancel-ready").Dir)).To(BeEmpty())

		createBackup(operatorNamespace, "cancel-finalizing", cairnv1.BackupSpec{IncludedNamespaces: []string{"cancel-big"}})
		waitPhase("cancel-finalizing", cairnv1.BackupPhaseFinalizing)
		cancelBackup("cancel-finalizing")
		stop()
		stop = startManager(config)
		expectCancelled(fault, "cancel-finalizing")
	})

	It("never loses a cancel: cancelled during InProgress while the operator is down, it ends cancelled", func() {
		runBlocked("cancel-restart")
		stop() // the operator stops in the middle of the backup
		fault.ReleasePuts()
		cancelBackup("cancel-restart")
		stop = startManager(config)
		expectCancelled(fault, "cancel-restart")
		Expect(getBackup(operatorNamespace, "cancel-restart").Status.FailureReason).NotTo(Equal(controller.FailureReasonRestarted))
	})

	It("retries the cleanup while the storage is unreachable and finishes when it is back", func() {
		runBlocked("cancel-offline")
		fault.Down(errors.New("dial tcp 127.0.0.1:9000: connect: connection refused"))
		cancelBackup("cancel-offline")

		Eventually(func(g Gomega) {
			b := getBackup(operatorNamespace, "cancel-offline")
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseFinalizingCancelled))
			cond := meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionCancelled)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(cairnv1.ReasonCleanupFailed))
			g.Expect(cond.Message).To(ContainSubstring("connection refused"))
			g.Expect(cond.Message).To(MatchRegexp(`attempt [2-9]`))
		}).Should(Succeed())
		Eventually(func() []string { return eventReasons("cancel-offline") }).Should(ContainElement(cairnv1.ReasonCleanupFailed))
		// It never claims success while the data is still there.
		Consistently(func() cairnv1.BackupPhase { return getBackup(operatorNamespace, "cancel-offline").Status.Phase }).
			WithTimeout(time.Second).Should(Equal(cairnv1.BackupPhaseFinalizingCancelled))

		fault.Up()
		expectCancelled(fault, "cancel-offline")
	})

	It("finishes a run whose last write meets someone else's write, and honours a cancel found then", func() {
		// The run is held in its last uploads while the object changes under it.
		fault.BlockPuts("-results.json.gz")
		createBackup(operatorNamespace, "relabelled", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-cancel"}})
		Eventually(fault.BlockedPuts).Should(Equal(1))
		Expect(k8sClient.Patch(suiteCtx, getBackup(operatorNamespace, "relabelled"),
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`)))).To(Succeed())
		setOperation("op-ops-cancel-token", "done")
		fault.ReleasePuts()
		b := waitPhase("relabelled", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.FailureReason).To(BeEmpty())

		fault.BlockPuts("-results.json.gz")
		createBackup(operatorNamespace, "late-cancel", cairnv1.BackupSpec{IncludedNamespaces: []string{"cancel-big"}})
		Eventually(fault.BlockedPuts).Should(Equal(1))
		cancelBackup("late-cancel")
		fault.ReleasePuts()
		expectCancelled(fault, "late-cancel")
	})

	It("ends the cancel without removing data when the location became ReadOnly, instead of retrying forever", func() {
		runBlocked("cancel-readonly")
		stop()
		fault.ReleasePuts()
		cancelBackup("cancel-readonly")
		setAccessMode := func(mode cairnv1.AccessMode) {
			GinkgoHelper()
			var loc cairnv1.BackupStorageLocation
			Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: operatorNamespace, Name: "cancel-default"}, &loc)).To(Succeed())
			Expect(k8sClient.Patch(suiteCtx, &loc, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"accessMode":"`+string(mode)+`"}}`)))).To(Succeed())
		}
		setAccessMode(cairnv1.AccessModeReadOnly)
		DeferCleanup(func() { setAccessMode(cairnv1.AccessModeReadWrite) })
		stop = startManager(config)
		b := waitPhase("cancel-readonly", cairnv1.BackupPhaseFailed)
		Expect(b.Status.FailureReason).To(Equal(cairnv1.FailureReasonCancelled))
		cond := meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionCancelled)
		Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		Expect(cond.Message).To(Equal("Backup cancelled by user; its data was not removed: storage location cancel-default is ReadOnly"))
	})

	It("cancels a waiting backup whose operations object is gone", func() {
		ensureNamespace("ops-lost")
		createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-lost", Name: "one"}, StringData: map[string]string{"t": "x"}})
		createBackup(operatorNamespace, "ops-lost", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-lost"}})
		waitPhase("ops-lost", cairnv1.BackupPhaseWaitingForPluginOperations)
		Expect(fault.ObjectStore.Delete(suiteCtx, storage.Layout{}.Backup(operatorNamespace, "ops-lost").ItemOperations)).To(Succeed())
		cancelBackup("ops-lost")
		expectCancelled(fault, "ops-lost")
	})

	It("changes nothing when a finished backup is cancelled, and says so", func() {
		createBackup(operatorNamespace, "cancel-late", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-cancel"}, SnapshotVolumes: nil})
		setOperation("op-ops-cancel-token", "done")
		before := waitPhase("cancel-late", cairnv1.BackupPhaseCompleted)
		cancelBackup("cancel-late")
		Eventually(func() []string { return eventReasons("cancel-late") }).Should(ContainElement("CancelIgnored"))
		after := getBackup(operatorNamespace, "cancel-late")
		Expect(ownersBackupStatus(after.Status)).To(Equal(ownersBackupStatus(before.Status)))
		keys := storage.Layout{}.Backup(operatorNamespace, "cancel-late")
		Expect(fault.Exists(suiteCtx, keys.Metadata)).To(BeTrue())
		var warning string
		for _, e := range backupEvents(operatorNamespace, "cancel-late") {
			if e.Reason == "CancelIgnored" {
				Expect(e.Type).To(Equal(corev1.EventTypeWarning))
				warning = e.Note
			}
		}
		Expect(warning).To(ContainSubstring("already ended in phase Completed"))
		Expect(strings.Count(strings.Join(eventReasons("cancel-late"), ","), "CancelIgnored")).To(Equal(1))
	})
})
