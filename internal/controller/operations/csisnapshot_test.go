package operations_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

const testDriver = testenv.TestDriver

var volumeSnapshotsGVK = snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshotList")

func volumeSnapshots(namespace string) []unstructured.Unstructured {
	GinkgoHelper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(volumeSnapshotsGVK)
	Expect(K8sClient.List(SuiteCtx, list, client.InNamespace(namespace))).To(Succeed())
	return list.Items
}

func boundClaim(namespace, name string) {
	GinkgoHelper()
	pv := namespace + "-" + name
	CreateObject(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv}, Spec: corev1.PersistentVolumeSpec{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}, StorageClassName: "csi-sc",
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "handle-" + name}},
	}})
	CreateObject(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: pv, StorageClassName: ptr.To("csi-sc"),
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}})
}

var _ = Describe("CSI volume snapshots", Ordered, func() {
	var store *storage.Filesystem
	var stopManager func()

	BeforeAll(func() {
		store, _ = CreateDefaultLocation("snap-default")
		CreateObject(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-sc"}, Provisioner: testDriver})
		class := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
			"metadata":       map[string]any{"name": "csi-class", "annotations": map[string]any{backup.DefaultSnapshotClassAnnotation: "true"}},
			"driver":         testDriver,
			"deletionPolicy": "Delete",
		}}
		CreateObject(class)
		ctx, cancel := context.WithCancel(SuiteCtx)
		DeferCleanup(cancel)
		go testenv.SimulateSnapshotter(ctx, K8sClient, 300*time.Millisecond)
		stopManager = StartManager(controller.Config{ConcurrentBackups: 2, ItemOperationSyncFrequency: 100 * time.Millisecond})
		DeferCleanup(func() { stopManager() })
		DeferCleanup(DeleteAllBackups)
	})

	It("waits for the snapshots of 3 PVCs, then completes with them ready in the archive", func() {
		EnsureNamespace("snap")
		for i := range 3 {
			boundClaim("snap", fmt.Sprintf("data-%d", i))
		}
		CreateBackup(OperatorNamespace, "snap-3", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap"}})
		WaitPhase("snap-3", cairnv1.BackupPhaseWaitingForPluginOperations)
		b := WaitPhase("snap-3", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.BackupItemOperationsAttempted).To(Equal(int32(3)))
		Expect(b.Status.BackupItemOperationsCompleted).To(Equal(int32(3)))
		vss := volumeSnapshots("snap")
		Expect(vss).To(HaveLen(3))
		Expect(vss[0].GetLabels()).To(HaveKeyWithValue(backup.BackupNameLabel, "snap-3"))

		snapshots, contents := 0, 0
		for _, e := range CommittedEntries(store, OperatorNamespace, "snap-3") {
			switch {
			case strings.HasPrefix(e.Name, "resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/snap/"):
				snapshots++
				Expect(string(e.Data)).To(ContainSubstring(`"readyToUse":true`))
			case strings.HasPrefix(e.Name, "resources/volumesnapshotcontents.snapshot.storage.k8s.io/cluster/"):
				contents++
			}
		}
		Expect(snapshots).To(Equal(3))
		Expect(contents).To(Equal(3))
	})

	It("ends PartiallyFailed when a snapshot fails", func() {
		EnsureNamespace("snap-fail")
		boundClaim("snap-fail", "will-fail")
		CreateBackup(OperatorNamespace, "snap-failed", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap-fail"}})
		b := WaitPhase("snap-failed", cairnv1.BackupPhasePartiallyFailed)
		Expect(b.Status.BackupItemOperationsFailed).To(Equal(int32(1)))
	})

	It("cancels a snapshot past the timeout: the VolumeSnapshot is deleted", func() {
		EnsureNamespace("snap-slow")
		boundClaim("snap-slow", "slow-disk")
		CreateBackup(OperatorNamespace, "snap-timeout", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap-slow"},
			ItemOperationTimeout: &metav1.Duration{Duration: 2 * time.Second}})
		WaitPhase("snap-timeout", cairnv1.BackupPhasePartiallyFailed)
		Eventually(func() []unstructured.Unstructured { return volumeSnapshots("snap-slow") }).Should(BeEmpty())
	})

	It("cancels a backup waiting for snapshots: every VolumeSnapshot is deleted, only the log is kept", func() {
		EnsureNamespace("snap-cancel")
		boundClaim("snap-cancel", "slow-a")
		boundClaim("snap-cancel", "slow-b")
		CreateBackup(OperatorNamespace, "snap-cancel", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap-cancel"}})
		WaitPhase("snap-cancel", cairnv1.BackupPhaseWaitingForPluginOperations)
		Expect(volumeSnapshots("snap-cancel")).To(HaveLen(2))

		CancelBackup("snap-cancel")
		ExpectCancelled(store, "snap-cancel")
		Eventually(func() []unstructured.Unstructured { return volumeSnapshots("snap-cancel") }).Should(BeEmpty())
		b := GetBackup(OperatorNamespace, "snap-cancel")
		Expect(b.Status.BackupItemOperationsFailed).To(Equal(int32(2)))
		Eventually(func() []string { return EventReasons("snap-cancel") }).Should(ContainElements("Cancelling", "Cancelled"))
	})

	It("resumes after a manager restart while the snapshot is being taken, and completes", func() {
		EnsureNamespace("snap-restart")
		boundClaim("snap-restart", "wait-disk")
		CreateBackup(OperatorNamespace, "snap-restart", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap-restart"}})
		WaitPhase("snap-restart", cairnv1.BackupPhaseWaitingForPluginOperations)
		stopManager()
		// The snapshot becomes ready while no manager runs.
		Eventually(func(g Gomega) {
			vss := volumeSnapshots("snap-restart")
			g.Expect(vss).To(HaveLen(1))
			ready, _, _ := unstructured.NestedBool(vss[0].Object, "status", "readyToUse")
			g.Expect(ready).To(BeTrue())
		}).WithTimeout(20 * time.Second).Should(Succeed())
		Expect(GetBackup(OperatorNamespace, "snap-restart").Status.Phase).To(Equal(cairnv1.BackupPhaseWaitingForPluginOperations))
		stopManager = StartManager(controller.Config{ConcurrentBackups: 2, ItemOperationSyncFrequency: 100 * time.Millisecond})
		b := WaitPhase("snap-restart", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.BackupItemOperationsCompleted).To(Equal(int32(1)))
		Expect(volumeSnapshots("snap-restart")).To(HaveLen(1), "the snapshot was not taken again")
	})

	It("takes no snapshot when snapshotVolumes is false", func() {
		EnsureNamespace("snap-off")
		boundClaim("snap-off", "data")
		CreateBackup(OperatorNamespace, "snap-off", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap-off"}, SnapshotVolumes: ptr.To(false)})
		WaitPhase("snap-off", cairnv1.BackupPhaseCompleted)
		Expect(volumeSnapshots("snap-off")).To(BeEmpty())
	})
})
