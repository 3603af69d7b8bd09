package controllertest

// Storage locations, and the sync from them.

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

// CreateDefaultLocation creates a default filesystem location in a temporary directory, deleted
// when the container ends, and returns the store behind it.
func CreateDefaultLocation(name string) (*storage.Filesystem, *cairnv1.BackupStorageLocation) {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	store, err := storage.NewFilesystem(dir)
	Expect(err).NotTo(HaveOccurred())
	spec := FilesystemSpec(dir)
	spec.Default = true
	loc := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: OperatorNamespace}, Spec: spec}
	Expect(K8sClient.Create(SuiteCtx, loc)).To(Succeed())
	DeferCleanup(func() { Expect(K8sClient.Delete(SuiteCtx, loc)).To(Succeed()) })
	return store, loc
}

func FilesystemSpec(path string) cairnv1.BackupStorageLocationSpec {
	return cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": path}}
}

// EventuallyLocation waits until the location's status has phase and a message containing msg.
func EventuallyLocation(bsl *cairnv1.BackupStorageLocation, phase cairnv1.StorageLocationPhase, msg string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var got cairnv1.BackupStorageLocation
		g.Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(bsl), &got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(phase), "message: %s", got.Status.Message)
		g.Expect(got.Status.Message).To(ContainSubstring(msg))
		g.Expect(got.Status.LastValidationTime).NotTo(BeNil())
	}).WithTimeout(20 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

func CreateLocation(spec cairnv1.BackupStorageLocationSpec) *cairnv1.BackupStorageLocation {
	GinkgoHelper()
	LocationCounter++
	bsl := &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("loc-%d", LocationCounter), Namespace: OperatorNamespace},
		Spec:       spec,
	}
	Expect(K8sClient.Create(SuiteCtx, bsl)).To(Succeed())
	DeferCleanup(func() { _ = K8sClient.Delete(SuiteCtx, bsl) })
	return bsl
}

func CreateCredentialSecret(name, content string) *corev1.Secret {
	GinkgoHelper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: OperatorNamespace},
		Data:       map[string][]byte{"cloud": []byte(content)},
	}
	Expect(K8sClient.Create(SuiteCtx, s)).To(Succeed())
	DeferCleanup(func() { _ = K8sClient.Delete(SuiteCtx, s) })
	return s
}

// SetAccessMode switches a storage location between ReadWrite and ReadOnly.
func SetAccessMode(bsl *cairnv1.BackupStorageLocation, mode cairnv1.AccessMode) {
	GinkgoHelper()
	patch := client.MergeFrom(bsl.DeepCopy())
	bsl.Spec.AccessMode = mode
	Expect(K8sClient.Patch(SuiteCtx, bsl, patch)).To(Succeed())
}

// EventuallySynced waits until the backup exists and is terminal, and returns it.
func EventuallySynced(namespace, name string) *cairnv1.Backup {
	GinkgoHelper()
	var b *cairnv1.Backup
	Eventually(func(g Gomega) {
		b = FindBackup(namespace, name)
		g.Expect(b).NotTo(BeNil())
		g.Expect(b.Status.Phase.IsTerminal()).To(BeTrue(), "phase %q", b.Status.Phase)
	}).WithTimeout(20 * time.Second).Should(Succeed())
	return b
}

// SyncedLocation creates a filesystem location synced every period, and returns its store;
// prepare, when set, writes into the store before the location exists.
func SyncedLocation(name string, period time.Duration, mode cairnv1.AccessMode, prepare func(storage.ObjectStore)) (*storage.Filesystem, *cairnv1.BackupStorageLocation) {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	store, err := storage.NewFilesystem(dir)
	Expect(err).NotTo(HaveOccurred())
	if prepare != nil {
		prepare(store)
	}
	spec := FilesystemSpec(dir)
	spec.AccessMode = mode
	spec.BackupSyncPeriod = &metav1.Duration{Duration: period}
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: OperatorNamespace}, Spec: spec}
	Expect(K8sClient.Create(SuiteCtx, bsl)).To(Succeed())
	DeferCleanup(func() { _ = K8sClient.Delete(SuiteCtx, bsl) })
	return store, bsl
}

var LocationCounter int
