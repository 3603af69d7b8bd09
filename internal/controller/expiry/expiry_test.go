package expiry_test

import (
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
		defaultStore, def = CreateDefaultLocation("gc-default")
		dir := GinkgoT().TempDir()
		var err error
		archiveStore, err = storage.NewFilesystem(dir)
		Expect(err).NotTo(HaveOccurred())
		archive = &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "gc-archive", Namespace: OperatorNamespace}, Spec: FilesystemSpec(dir)}
		Expect(K8sClient.Create(SuiteCtx, archive)).To(Succeed())
		DeferCleanup(func() { Expect(K8sClient.Delete(SuiteCtx, archive)).To(Succeed()) })
		EnsureNamespace(namespace)
		CreateObject(ConfigMap(namespace, "settings", nil))

		stop := StartManager(controller.Config{})
		DeferCleanup(func() { stop() })
		DeferCleanup(DeleteAllBackups)
		for _, loc := range []*cairnv1.BackupStorageLocation{def, archive} {
			EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
		}
	})

	ttl := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	// dataOf lists what a store holds of an admin backup.
	dataOf := func(store storage.ObjectStore, name string) func() ([]string, error) {
		return func() ([]string, error) {
			return store.List(SuiteCtx, storage.Layout{}.Backup(OperatorNamespace, name).Dir)
		}
	}
	gone := func(name string) func() bool {
		return func() bool {
			err := K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: OperatorNamespace, Name: name}, &cairnv1.Backup{})
			return apierrors.IsNotFound(err)
		}
	}

	It("deletes a backup with ttl 3s, data first, once it expires", func() {
		CreateBackup(OperatorNamespace, "short-lived", cairnv1.BackupSpec{IncludedNamespaces: []string{namespace}, TTL: ttl(3 * time.Second)})
		b := WaitPhase("short-lived", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.Expiration).NotTo(BeNil())
		Expect(b.Status.Expiration.Sub(b.Status.StartTimestamp.Time)).To(Equal(3 * time.Second))
		Expect(dataOf(defaultStore, "short-lived")()).NotTo(BeEmpty())
		Eventually(gone("short-lived")).WithTimeout(20 * time.Second).Should(BeTrue())
		Expect(dataOf(defaultStore, "short-lived")()).To(BeEmpty())
	})

	It("gives a backup with ttl 0s no expiration, and the default ttl to one without ttl", func() {
		CreateBackup(OperatorNamespace, "kept", cairnv1.BackupSpec{IncludedNamespaces: []string{namespace}, TTL: ttl(0)})
		CreateBackup(OperatorNamespace, "defaulted", cairnv1.BackupSpec{IncludedNamespaces: []string{namespace}})
		b := WaitPhase("kept", cairnv1.BackupPhaseCompleted)
		Expect(b.Spec.TTL).To(Equal(ttl(0)))
		Expect(b.Status.Expiration).To(BeNil())
		b = WaitPhase("defaulted", cairnv1.BackupPhaseCompleted)
		Expect(b.Spec.TTL).To(BeNil())
		Expect(b.Status.Expiration.Sub(b.Status.StartTimestamp.Time)).To(Equal(cairnv1.DefaultBackupTTL))
	})

	It("does not delete an expired backup through a ReadOnly location, says why, and deletes it once the location is ReadWrite", func() {
		CreateBackup(OperatorNamespace, "archived", cairnv1.BackupSpec{IncludedNamespaces: []string{namespace}, StorageLocation: archive.Name, TTL: ttl(8 * time.Second)})
		WaitPhase("archived", cairnv1.BackupPhaseCompleted)
		SetAccessMode(archive, cairnv1.AccessModeReadOnly)

		var expired *metav1.Condition
		Eventually(func(g Gomega) {
			b := GetBackup(OperatorNamespace, "archived")
			expired = meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionExpired)
			g.Expect(expired).NotTo(BeNil())
		}).WithTimeout(20 * time.Second).Should(Succeed())
		Expect(expired.Status).To(Equal(metav1.ConditionTrue))
		Expect(expired.Reason).To(Equal(cairnv1.ReasonLocationReadOnly))
		Expect(expired.Message).To(ContainSubstring("storage location gc-archive is ReadOnly"))
		b := GetBackup(OperatorNamespace, "archived")
		Expect(b.DeletionTimestamp).To(BeNil())
		Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
		Expect(dataOf(archiveStore, "archived")()).NotTo(BeEmpty())

		SetAccessMode(archive, cairnv1.AccessModeReadWrite)
		Eventually(gone("archived")).Should(BeTrue())
		Expect(dataOf(archiveStore, "archived")()).To(BeEmpty())
	})
})
