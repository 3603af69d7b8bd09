package operations_test

import (
	"context"
	"errors"
	"slices"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

var _ = Describe("Async operations while storage fails", Ordered, func() {
	var (
		fault    *testenv.FaultStore
		recorder *PhaseRecorder
	)

	BeforeAll(func() {
		fs, loc := CreateDefaultLocation("ops-default")
		fault = testenv.NewFaultStore(fs)
		CreateObject(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-sc"}, Provisioner: testDriver})
		CreateObject(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
			"metadata":       map[string]any{"name": "csi-class", "annotations": map[string]any{backup.DefaultSnapshotClassAnnotation: "true"}},
			"driver":         testDriver,
			"deletionPolicy": "Delete",
		}})
		ctx, cancel := context.WithCancel(SuiteCtx)
		DeferCleanup(cancel)
		go testenv.SimulateSnapshotter(ctx, K8sClient, 300*time.Millisecond)
		stop := StartManager(controller.Config{ItemOperationSyncFrequency: 100 * time.Millisecond, StorageTimeout: 2 * time.Second,
			WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				if bsl.Name == "ops-default" {
					return fault
				}
				return s
			}})
		DeferCleanup(func() { stop() })
		DeferCleanup(DeleteAllBackups)
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
		recorder = RecordPhases()
	})
	AfterEach(func() { fault.Up() })

	It("keeps waiting while the operations cannot be read, then completes once storage is back", func() {
		EnsureNamespace("ops-down")
		boundClaim("ops-down", "wait-disk") // its snapshot is ready after 3 s
		CreateBackup(OperatorNamespace, "ops-down", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-down"}})
		WaitPhase("ops-down", cairnv1.BackupPhaseWaitingForPluginOperations)
		fault.Down(errors.New("storage unreachable"))

		// The snapshot gets ready while storage is down: the reconciler cannot read or record
		// the operations, so the backup keeps waiting instead of moving on with a wrong count.
		Eventually(func(g Gomega) {
			vss := volumeSnapshots("ops-down")
			g.Expect(vss).To(HaveLen(1))
			ready, _, _ := unstructured.NestedBool(vss[0].Object, "status", "readyToUse")
			g.Expect(ready).To(BeTrue())
		}).WithTimeout(20 * time.Second).Should(Succeed())
		Consistently(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "ops-down").Status.Phase }).
			WithTimeout(2 * time.Second).Should(Equal(cairnv1.BackupPhaseWaitingForPluginOperations))

		fault.Up()
		b := WaitPhase("ops-down", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.BackupItemOperationsAttempted).To(Equal(int32(1)))
		Expect(b.Status.BackupItemOperationsCompleted).To(Equal(int32(1)))
		Expect(b.Status.BackupItemOperationsFailed).To(BeZero())
		// The recorder's watch may deliver the last change a moment after the GET above saw it.
		Eventually(func(g Gomega) {
			phases := recorder.Of("ops-down")
			g.Expect(phases).To(ContainElement(cairnv1.BackupPhaseWaitingForPluginOperations))
			g.Expect(phases[slices.Index(phases, cairnv1.BackupPhaseWaitingForPluginOperations):]).To(HaveExactElements(
				cairnv1.BackupPhaseWaitingForPluginOperations, cairnv1.BackupPhaseFinalizing, cairnv1.BackupPhaseCompleted))
		}).Should(Succeed())
	})
})
