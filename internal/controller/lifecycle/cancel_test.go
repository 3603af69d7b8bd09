package lifecycle_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

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
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

var _ = Describe("Cancellation", Ordered, func() {
	var (
		fault  *testenv.FaultStore
		pools  *PoolRecorder
		stop   func()
		config controller.Config
	)

	BeforeAll(func() {
		fs, loc := CreateDefaultLocation("cancel-default")
		fault = testenv.NewFaultStore(fs)

		EnsureNamespace("cancel-big")
		// Incompressible data, so that a blocked upload holds up the writer and then the workers.
		for i := range 300 {
			cm := ConfigMap("cancel-big", fmt.Sprintf("cm-%03d", i), nil)
			random := make([]byte, 3000)
			_, _ = rand.Read(random)
			cm.Data = map[string]string{"k": base64.StdEncoding.EncodeToString(random)}
			CreateObject(cm)
		}
		EnsureNamespace("ops-cancel")
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-cancel", Name: "token"}, StringData: map[string]string{"t": "x"}})

		pools = &PoolRecorder{}
		config = controller.Config{ConcurrentBackups: 2, ItemBlockWorkerCount: 2, OnWorkerPool: pools.Record,
			Actions: []backup.BackupItemAction{AsyncSecretAction{}}, ItemOperationSyncFrequency: 100 * time.Millisecond,
			RetryBackoffMin: 200 * time.Millisecond, RetryBackoffMax: time.Second,
			WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				if bsl.Name == "cancel-default" {
					return fault
				}
				return s
			}}
		stop = StartManager(config)
		DeferCleanup(func() { stop() })
		DeferCleanup(DeleteAllBackups)
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
	})

	// runBlocked starts a backup whose archive upload blocks, and waits until it is InProgress
	// with its worker pool busy.
	runBlocked := func(name string) {
		GinkgoHelper()
		fault.BlockPuts(".tar.gz")
		CreateBackup(OperatorNamespace, name, cairnv1.BackupSpec{IncludedNamespaces: []string{"cancel-big", "ops-cancel"}})
		WaitPhase(name, cairnv1.BackupPhaseInProgress)
		Eventually(fault.BlockedPuts).Should(Equal(1))
		Eventually(func() int { _, running := pools.Snapshot(); return running }).Should(Equal(2))
	}
	AfterEach(func() { fault.ReleasePuts(); fault.Up() })

	It("stops a running backup's worker pool and upload, cancels its operations and keeps only the log", func() {
		runBlocked("cancel-running")
		// The pool is held up by the upload, not done: it stays busy until cancelled.
		Consistently(func() int { _, running := pools.Snapshot(); return running }).WithTimeout(300 * time.Millisecond).Should(Equal(2))

		CancelBackup("cancel-running")
		// The bound here is generous for a shared machine; `make bench` measures the latency.
		Eventually(func() int { _, running := pools.Snapshot(); return running }).WithTimeout(5 * time.Second).Should(BeZero())
		Eventually(fault.BlockedPuts).WithTimeout(5 * time.Second).Should(BeZero())

		ExpectCancelled(fault, "cancel-running")
		Expect(CancelledOperations()).To(ContainElement("op-ops-cancel-token"))
		b := GetBackup(OperatorNamespace, "cancel-running")
		Expect(b.Status.BackupItemOperationsAttempted).To(BeEquivalentTo(1))
		Expect(b.Status.BackupItemOperationsFailed).To(BeEquivalentTo(1))
		Eventually(func() []string { return EventReasons("cancel-running") }).Should(ContainElements("Started", "Cancelling", "Cancelled"))
		log := ReadLog(fault, storage.Layout{}.Backup(OperatorNamespace, "cancel-running"))
		Expect(log).To(ContainSubstring("the worker pool and the upload were stopped"))
		Expect(log).To(ContainSubstring("op-ops-cancel-token"))
	})

	It("cancels the unfinished operations of a backup waiting for them", func() {
		EnsureNamespace("ops-wait")
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-wait", Name: "one"}, StringData: map[string]string{"t": "x"}})
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-wait", Name: "two"}, StringData: map[string]string{"t": "x"}})
		SetOperation("op-ops-wait-one", "done")
		CreateBackup(OperatorNamespace, "cancel-waiting", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-wait"}})
		WaitPhase("cancel-waiting", cairnv1.BackupPhaseWaitingForPluginOperations)
		Eventually(func() int32 {
			return GetBackup(OperatorNamespace, "cancel-waiting").Status.BackupItemOperationsCompleted
		}).Should(BeEquivalentTo(1))

		CancelBackup("cancel-waiting")
		ExpectCancelled(fault, "cancel-waiting")
		Expect(CancelledOperations()).To(ContainElement("op-ops-wait-two"))
		Expect(CancelledOperations()).NotTo(ContainElement("op-ops-wait-one"))
		b := GetBackup(OperatorNamespace, "cancel-waiting")
		Expect(b.Status.BackupItemOperationsCompleted).To(BeEquivalentTo(1))
		Expect(b.Status.BackupItemOperationsFailed).To(BeEquivalentTo(1))
	})

	It("cancels ReadyToStart and Finalizing backups through their owners", func() {
		stop()
		// Only the queue: the first backup stops in ReadyToStart.
		stop = StartManager(controller.Config{Controllers: []string{"queue", "storagelocation"}, WrapStore: config.WrapStore})
		CreateBackup(OperatorNamespace, "cancel-ready", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-cancel"}})
		WaitPhase("cancel-ready", cairnv1.BackupPhaseReadyToStart)
		CancelBackup("cancel-ready")
		stop()
		// Everything but the finalizer: the second backup stops in Finalizing.
		stop = StartManager(controller.Config{Controllers: []string{"queue", "backup", "storagelocation"}, WrapStore: config.WrapStore})
		b := WaitPhase("cancel-ready", cairnv1.BackupPhaseFailed)
		Expect(b.Status.FailureReason).To(Equal(cairnv1.FailureReasonCancelled))
		Expect(b.Status.StartTimestamp).To(BeNil())
		Expect(fault.List(SuiteCtx, storage.Layout{}.Backup(OperatorNamespace, "cancel-ready").Dir)).To(BeEmpty())

		CreateBackup(OperatorNamespace, "cancel-finalizing", cairnv1.BackupSpec{IncludedNamespaces: []string{"cancel-big"}})
		WaitPhase("cancel-finalizing", cairnv1.BackupPhaseFinalizing)
		CancelBackup("cancel-finalizing")
		stop()
		stop = StartManager(config)
		ExpectCancelled(fault, "cancel-finalizing")
	})

	It("never loses a cancel: cancelled during InProgress while the operator is down, it ends cancelled", func() {
		runBlocked("cancel-restart")
		stop() // the operator stops in the middle of the backup
		fault.ReleasePuts()
		CancelBackup("cancel-restart")
		stop = StartManager(config)
		ExpectCancelled(fault, "cancel-restart")
		Expect(GetBackup(OperatorNamespace, "cancel-restart").Status.FailureReason).NotTo(Equal(lifecycle.FailureReasonRestarted))
	})

	It("retries the cleanup while the storage is unreachable and finishes when it is back", func() {
		runBlocked("cancel-offline")
		fault.Down(errors.New("dial tcp 127.0.0.1:9000: connect: connection refused"))
		CancelBackup("cancel-offline")

		Eventually(func(g Gomega) {
			b := GetBackup(OperatorNamespace, "cancel-offline")
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseFinalizingCancelled))
			cond := meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionCancelled)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(cairnv1.ReasonCleanupFailed))
			g.Expect(cond.Message).To(ContainSubstring("connection refused"))
			g.Expect(cond.Message).To(MatchRegexp(`attempt [2-9]`))
		}).Should(Succeed())
		Eventually(func() []string { return EventReasons("cancel-offline") }).Should(ContainElement(cairnv1.ReasonCleanupFailed))
		// It never claims success while the data is still there.
		Consistently(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "cancel-offline").Status.Phase }).
			WithTimeout(time.Second).Should(Equal(cairnv1.BackupPhaseFinalizingCancelled))

		fault.Up()
		ExpectCancelled(fault, "cancel-offline")
	})

	It("finishes a run whose last write meets someone else's write, and honours a cancel found then", func() {
		// The run is held in its last uploads while the object changes under it.
		fault.BlockPuts("-results.json.gz")
		CreateBackup(OperatorNamespace, "relabelled", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-cancel"}})
		Eventually(fault.BlockedPuts).Should(Equal(1))
		Expect(K8sClient.Patch(SuiteCtx, GetBackup(OperatorNamespace, "relabelled"),
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`)))).To(Succeed())
		SetOperation("op-ops-cancel-token", "done")
		fault.ReleasePuts()
		b := WaitPhase("relabelled", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.FailureReason).To(BeEmpty())

		fault.BlockPuts("-results.json.gz")
		CreateBackup(OperatorNamespace, "late-cancel", cairnv1.BackupSpec{IncludedNamespaces: []string{"cancel-big"}})
		Eventually(fault.BlockedPuts).Should(Equal(1))
		CancelBackup("late-cancel")
		fault.ReleasePuts()
		ExpectCancelled(fault, "late-cancel")
	})

	It("ends the cancel without removing data when the location became ReadOnly, instead of retrying forever", func() {
		runBlocked("cancel-readonly")
		stop()
		fault.ReleasePuts()
		CancelBackup("cancel-readonly")
		SetAccessMode := func(mode cairnv1.AccessMode) {
			GinkgoHelper()
			var loc cairnv1.BackupStorageLocation
			Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: OperatorNamespace, Name: "cancel-default"}, &loc)).To(Succeed())
			Expect(K8sClient.Patch(SuiteCtx, &loc, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"accessMode":"`+string(mode)+`"}}`)))).To(Succeed())
		}
		SetAccessMode(cairnv1.AccessModeReadOnly)
		DeferCleanup(func() { SetAccessMode(cairnv1.AccessModeReadWrite) })
		stop = StartManager(config)
		b := WaitPhase("cancel-readonly", cairnv1.BackupPhaseFailed)
		Expect(b.Status.FailureReason).To(Equal(cairnv1.FailureReasonCancelled))
		cond := meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionCancelled)
		Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		Expect(cond.Message).To(Equal("Backup cancelled by user; its data was not removed: storage location cancel-default is ReadOnly"))
	})

	It("cancels a waiting backup whose operations object is gone", func() {
		EnsureNamespace("ops-lost")
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-lost", Name: "one"}, StringData: map[string]string{"t": "x"}})
		CreateBackup(OperatorNamespace, "ops-lost", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-lost"}})
		WaitPhase("ops-lost", cairnv1.BackupPhaseWaitingForPluginOperations)
		Expect(fault.ObjectStore.Delete(SuiteCtx, storage.Layout{}.Backup(OperatorNamespace, "ops-lost").ItemOperations)).To(Succeed())
		CancelBackup("ops-lost")
		ExpectCancelled(fault, "ops-lost")
	})

	It("changes nothing when a finished backup is cancelled, and says so", func() {
		CreateBackup(OperatorNamespace, "cancel-late", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-cancel"}, SnapshotVolumes: nil})
		SetOperation("op-ops-cancel-token", "done")
		before := WaitPhase("cancel-late", cairnv1.BackupPhaseCompleted)
		CancelBackup("cancel-late")
		Eventually(func() []string { return EventReasons("cancel-late") }).Should(ContainElement("CancelIgnored"))
		after := GetBackup(OperatorNamespace, "cancel-late")
		Expect(OwnersBackupStatus(after.Status)).To(Equal(OwnersBackupStatus(before.Status)))
		keys := storage.Layout{}.Backup(OperatorNamespace, "cancel-late")
		Expect(fault.Exists(SuiteCtx, keys.Metadata)).To(BeTrue())
		var warning string
		for _, e := range BackupEvents(OperatorNamespace, "cancel-late") {
			if e.Reason == "CancelIgnored" {
				Expect(e.Type).To(Equal(corev1.EventTypeWarning))
				warning = e.Note
			}
		}
		Expect(warning).To(ContainSubstring("already ended in phase Completed"))
		Expect(strings.Count(strings.Join(EventReasons("cancel-late"), ","), "CancelIgnored")).To(Equal(1))
	})
})
