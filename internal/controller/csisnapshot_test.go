package controller_test

import (
	"context"
	"fmt"
	"strings"
	"time"

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
	Expect(k8sClient.List(suiteCtx, list, client.InNamespace(namespace))).To(Succeed())
	return list.Items
}

func boundClaim(namespace, name string) {
	GinkgoHelper()
	pv := namespace + "-" + name
	createObject(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv}, Spec: corev1.PersistentVolumeSpec{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}, StorageClassName: "csi-sc",
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "handle-" + name}},
	}})
	createObject(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: pv, StorageClassName: ptr.To("csi-sc"),
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}})
}

var _ = Describe("CSI volume snapshots", Ordered, func() {
	var store *storage.Filesystem
	var stopManager func()

	BeforeAll(func() {
		store, _ = createDefaultLocation("snap-default")
		createObject(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-sc"}, Provisioner: testDriver})
		class := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
			"metadata":       map[string]any{"name": "csi-class", "annotations": map[string]any{backup.DefaultSnapshotClassAnnotation: "true"}},
			"driver":         testDriver,
			"deletionPolicy": "Delete",
		}}
		createObject(class)
		ctx, cancel := context.WithCancel(suiteCtx)
		DeferCleanup(cancel)
		go testenv.SimulateSnapshotter(ctx, k8sClient, 300*time.Millisecond)
		stopManager = startManager(controller.Config{ConcurrentBackups: 2, ItemOperationSyncFrequency: 100 * time.Millisecond})
		DeferCleanup(func() { stopManager() })
		DeferCleanup(deleteAllBackups)
	})

	It("waits for the snapshots of 3 PVCs, then completes with them ready in the archive", func() {
		ensureNamespace("snap")
		for i := range 3 {
			boundClaim("snap", fmt.Sprintf("data-%d", i))
		}
		createBackup(operatorNamespace, "snap-3", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap"}})
		waitPhase("snap-3", cairnv1.BackupPhaseWaitingForPluginOperations)
		b := waitPhase("snap-3", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.BackupItemOperationsAttempted).To(Equal(int32(3)))
		Expect(b.Status.BackupItemOperationsCompleted).To(Equal(int32(3)))
		vss := volumeSnapshots("snap")
		Expect(vss).To(HaveLen(3))
		Expect(vss[0].GetLabels()).To(HaveKeyWithValue(backup.BackupNameLabel, "snap-3"))

		snapshots, contents := 0, 0
		for _, e := range committedEntries(store, operatorNamespace, "snap-3") {
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
		ensureNamespace("snap-fail")
		boundClaim("snap-fail", "will-fail")
		createBackup(operatorNamespace, "snap-failed", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap-fail"}})
		b := waitPhase("snap-failed", cairnv1.BackupPhasePartiallyFailed)
		Expect(b.Status.BackupItemOperationsFailed).To(Equal(int32(1)))
	})

	It("cancels a snapshot past the timeout: the VolumeSnapshot is deleted", func() {
		ensureNamespace("snap-slow")
		boundClaim("snap-slow", "slow-disk")
		createBackup(operatorNamespace, "snap-timeout", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap-slow"},
			ItemOperationTimeout: &metav1.Duration{Duration: 2 * time.Second}})
		waitPhase("snap-timeout", cairnv1.BackupPhasePartiallyFailed)
		Eventually(func() []unstructured.Unstructured { return volumeSnapshots("snap-slow") }).Should(BeEmpty())
	})

	It("cancels a backup waiting for snapshots: every VolumeSnapshot is deleted, only the log is kept", func() {
		ensureNamespace("snap-cancel")
		boundClaim("snap-cancel", "slow-a")
		boundClaim("snap-cancel", "slow-b")
		createBackup(operatorNamespace, "snap-cancel", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap-cancel"}})
		waitPhase("snap-cancel", cairnv1.BackupPhaseWaitingForPluginOperations)
		Expect(volumeSnapshots("snap-cancel")).To(HaveLen(2))

		cancelBackup("snap-cancel")
		expectCancelled(store, "snap-cancel")
		Eventually(func() []unstructured.Unstructured { return volumeSnapshots("snap-cancel") }).Should(BeEmpty())
		b := getBackup(operatorNamespace, "snap-cancel")
		Expect(b.Status.BackupItemOperationsFailed).To(Equal(int32(2)))
		Eventually(func() []string { return eventReasons("snap-cancel") }).Should(ContainElements("Cancelling", "Cancelled"))
	})

	It("resumes after a manager restart while the snapshot is being taken, and completes", func() {
		ensureNamespace("snap-restart")
		boundClaim("snap-restart", "wait-disk")
		createBackup(operatorNamespace, "snap-restart", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap-restart"}})
		waitPhase("snap-restart", cairnv1.BackupPhaseWaitingForPluginOperations)
		stopManager()
		// The snapshot becomes ready while no manager runs.
		Eventually(func(g Gomega) {
			vss := volumeSnapshots("snap-restart")
			g.Expect(vss).To(HaveLen(1))
			ready, _, _ := unstructured.NestedBool(vss[0].Object, "status", "readyToUse")
			g.Expect(ready).To(BeTrue())
		}).WithTimeout(20 * time.Second).Should(Succeed())
		Expect(getBackup(operatorNamespace, "snap-restart").Status.Phase).To(Equal(cairnv1.BackupPhaseWaitingForPluginOperations))
		stopManager = startManager(controller.Config{ConcurrentBackups: 2, ItemOperationSyncFrequency: 100 * time.Millisecond})
		b := waitPhase("snap-restart", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.BackupItemOperationsCompleted).To(Equal(int32(1)))
		Expect(volumeSnapshots("snap-restart")).To(HaveLen(1), "the snapshot was not taken again")
	})

	It("takes no snapshot when snapshotVolumes is false", func() {
		ensureNamespace("snap-off")
		boundClaim("snap-off", "data")
		createBackup(operatorNamespace, "snap-off", cairnv1.BackupSpec{IncludedNamespaces: []string{"snap-off"}, SnapshotVolumes: ptr.To(false)})
		waitPhase("snap-off", cairnv1.BackupPhaseCompleted)
		Expect(volumeSnapshots("snap-off")).To(BeEmpty())
	})
})
