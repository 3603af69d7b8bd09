package controller_test

import (
	"context"
	"errors"
	"slices"
	"time"

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
		recorder *phaseRecorder
	)

	BeforeAll(func() {
		fs, loc := createDefaultLocation("ops-default")
		fault = testenv.NewFaultStore(fs)
		createObject(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-sc"}, Provisioner: testDriver})
		createObject(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
			"metadata":       map[string]any{"name": "csi-class", "annotations": map[string]any{backup.DefaultSnapshotClassAnnotation: "true"}},
			"driver":         testDriver,
			"deletionPolicy": "Delete",
		}})
		ctx, cancel := context.WithCancel(suiteCtx)
		DeferCleanup(cancel)
		go testenv.SimulateSnapshotter(ctx, k8sClient, 300*time.Millisecond)
		stop := startManager(controller.Config{ItemOperationSyncFrequency: 100 * time.Millisecond, StorageTimeout: 2 * time.Second,
			WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				if bsl.Name == "ops-default" {
					return fault
				}
				return s
			}})
		DeferCleanup(func() { stop() })
		DeferCleanup(deleteAllBackups)
		eventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
		recorder = recordPhases()
	})
	AfterEach(func() { fault.Up() })

	It("keeps waiting while the operations cannot be read, then completes once storage is back", func() {
		ensureNamespace("ops-down")
		boundClaim("ops-down", "wait-disk") // its snapshot is ready after 3 s
		createBackup(operatorNamespace, "ops-down", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-down"}})
		waitPhase("ops-down", cairnv1.BackupPhaseWaitingForPluginOperations)
		fault.Down(errors.New("storage unreachable"))

		// The snapshot gets ready while storage is down: the reconciler cannot read or record
		// the operations, so the backup keeps waiting instead of moving on with a wrong count.
		Eventually(func(g Gomega) {
			vss := volumeSnapshots("ops-down")
			g.Expect(vss).To(HaveLen(1))
			ready, _, _ := unstructured.NestedBool(vss[0].Object, "status", "readyToUse")
			g.Expect(ready).To(BeTrue())
		}).WithTimeout(20 * time.Second).Should(Succeed())
		Consistently(func() cairnv1.BackupPhase { return getBackup(operatorNamespace, "ops-down").Status.Phase }).
			WithTimeout(2 * time.Second).Should(Equal(cairnv1.BackupPhaseWaitingForPluginOperations))

		fault.Up()
		b := waitPhase("ops-down", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.BackupItemOperationsAttempted).To(Equal(int32(1)))
		Expect(b.Status.BackupItemOperationsCompleted).To(Equal(int32(1)))
		Expect(b.Status.BackupItemOperationsFailed).To(BeZero())
		phases := recorder.of("ops-down")
		Expect(phases).To(ContainElement(cairnv1.BackupPhaseWaitingForPluginOperations))
		Expect(phases[slices.Index(phases, cairnv1.BackupPhaseWaitingForPluginOperations):]).To(HaveExactElements(
			cairnv1.BackupPhaseWaitingForPluginOperations, cairnv1.BackupPhaseFinalizing, cairnv1.BackupPhaseCompleted))
	})
})
