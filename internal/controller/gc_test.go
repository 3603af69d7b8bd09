package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
)

var _ = Describe("Expiry", Ordered, func() {
	const namespace = "gc-1"
	var (
		defaultStore, archiveStore *storage.Filesystem
		archive                    *cairnv1.BackupStorageLocation
	)

	BeforeAll(func() {
		var def *cairnv1.BackupStorageLocation
		defaultStore, def = createDefaultLocation("gc-default")
		dir := GinkgoT().TempDir()
		var err error
		archiveStore, err = storage.NewFilesystem(dir)
		Expect(err).NotTo(HaveOccurred())
		archive = &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "gc-archive", Namespace: operatorNamespace}, Spec: filesystemSpec(dir)}
		Expect(k8sClient.Create(suiteCtx, archive)).To(Succeed())
		DeferCleanup(func() { Expect(k8sClient.Delete(suiteCtx, archive)).To(Succeed()) })
		ensureNamespace(namespace)
		createObject(configMap(namespace, "settings", nil))

		stop := startManager(controller.Config{})
		DeferCleanup(func() { stop() })
		DeferCleanup(deleteAllBackups)
		for _, loc := range []*cairnv1.BackupStorageLocation{def, archive} {
			eventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
		}
	})

	ttl := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	// dataOf lists what a store holds of an admin backup.
	dataOf := func(store storage.ObjectStore, name string) func() ([]string, error) {
		return func() ([]string, error) {
			return store.List(suiteCtx, storage.Layout{}.Backup(operatorNamespace, name).Dir)
		}
	}
	gone := func(name string) func() bool {
		return func() bool {
			err := k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: operatorNamespace, Name: name}, &cairnv1.Backup{})
			return apierrors.IsNotFound(err)
		}
	}

	It("deletes a backup with ttl 3s, data first, once it expires", func() {
		createBackup(operatorNamespace, "short-lived", cairnv1.BackupSpec{IncludedNamespaces: []string{namespace}, TTL: ttl(3 * time.Second)})
		b := waitPhase("short-lived", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.Expiration).NotTo(BeNil())
		Expect(b.Status.Expiration.Sub(b.Status.StartTimestamp.Time)).To(Equal(3 * time.Second))
		Expect(dataOf(defaultStore, "short-lived")()).NotTo(BeEmpty())
		Eventually(gone("short-lived")).WithTimeout(20 * time.Second).Should(BeTrue())
		Expect(dataOf(defaultStore, "short-lived")()).To(BeEmpty())
	})

	It("gives a backup with ttl 0s no expiration, and the default ttl to one without ttl", func() {
		createBackup(operatorNamespace, "kept", cairnv1.BackupSpec{IncludedNamespaces: []string{namespace}, TTL: ttl(0)})
		createBackup(operatorNamespace, "defaulted", cairnv1.BackupSpec{IncludedNamespaces: []string{namespace}})
		b := waitPhase("kept", cairnv1.BackupPhaseCompleted)
		Expect(b.Spec.TTL).To(Equal(ttl(0)))
		Expect(b.Status.Expiration).To(BeNil())
		b = waitPhase("defaulted", cairnv1.BackupPhaseCompleted)
		Expect(b.Spec.TTL).To(BeNil())
		Expect(b.Status.Expiration.Sub(b.Status.StartTimestamp.Time)).To(Equal(cairnv1.DefaultBackupTTL))
	})

	It("does not delete an expired backup through a ReadOnly location, says why, and deletes it once the location is ReadWrite", func() {
		createBackup(operatorNamespace, "archived", cairnv1.BackupSpec{IncludedNamespaces: []string{namespace}, StorageLocation: archive.Name, TTL: ttl(8 * time.Second)})
		waitPhase("archived", cairnv1.BackupPhaseCompleted)
		setAccessMode(archive, cairnv1.AccessModeReadOnly)

		var expired *metav1.Condition
		Eventually(func(g Gomega) {
			b := getBackup(operatorNamespace, "archived")
			expired = meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionExpired)
			g.Expect(expired).NotTo(BeNil())
		}).WithTimeout(20 * time.Second).Should(Succeed())
		Expect(expired.Status).To(Equal(metav1.ConditionTrue))
		Expect(expired.Reason).To(Equal(cairnv1.ReasonLocationReadOnly))
		Expect(expired.Message).To(ContainSubstring("storage location gc-archive is ReadOnly"))
		b := getBackup(operatorNamespace, "archived")
		Expect(b.DeletionTimestamp).To(BeNil())
		Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
		Expect(dataOf(archiveStore, "archived")()).NotTo(BeEmpty())

		setAccessMode(archive, cairnv1.AccessModeReadWrite)
		Eventually(gone("archived")).Should(BeTrue())
		Expect(dataOf(archiveStore, "archived")()).To(BeEmpty())
	})
})

// setAccessMode switches a storage location between ReadWrite and ReadOnly.
func setAccessMode(bsl *cairnv1.BackupStorageLocation, mode cairnv1.AccessMode) {
	GinkgoHelper()
	patch := client.MergeFrom(bsl.DeepCopy())
	bsl.Spec.AccessMode = mode
	Expect(k8sClient.Patch(suiteCtx, bsl, patch)).To(Succeed())
}
