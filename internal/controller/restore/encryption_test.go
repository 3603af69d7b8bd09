package restore_test

import (
	"bytes"
	"crypto/rand"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
)

// Encryption at rest (DESIGN.md section 18): a backup to an encrypted location holds nothing
// readable in storage, restores, survives a key rotation, and a key taken away is a clear error.
var _ = Describe("An encrypted location", Ordered, func() {
	const distinctive = "tenant-db-password-5c9b1f3e"
	var (
		loc      *cairnv1.BackupStorageLocation
		dir      string
		keys     *corev1.Secret
		stop     func()
		key1     = make([]byte, 32)
		key2     = make([]byte, 32)
		restored = func(ns string) string {
			GinkgoHelper()
			var s corev1.Secret
			Expect(K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: ns, Name: "db"}, &s)).To(Succeed())
			return string(s.Data["password"])
		}
	)

	BeforeAll(func() {
		_, _ = rand.Read(key1)
		_, _ = rand.Read(key2)
		keys = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "enc-keys", Namespace: OperatorNamespace}, Data: map[string][]byte{"k1": key1}}
		Expect(K8sClient.Create(SuiteCtx, keys)).To(Succeed())
		DeferCleanup(func() { _ = K8sClient.Delete(SuiteCtx, keys) })
		dir = GinkgoT().TempDir()
		spec := FilesystemSpec(dir)
		spec.Encryption = &cairnv1.LocationEncryption{KeySecretRef: cairnv1.LocalSecretReference{Name: "enc-keys"}, WriteKey: "k1"}
		loc = CreateLocation(spec)
		stop = StartManager(controller.Config{ProgressInterval: 10 * time.Millisecond})
		DeferCleanup(func() { stop() })
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
		EnsureNamespace("enc-app")
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "enc-app"}, Data: map[string][]byte{"password": []byte(distinctive)}})
	})
	AfterAll(func() {
		var list cairnv1.RestoreList
		Expect(K8sClient.List(SuiteCtx, &list)).To(Succeed())
		for i := range list.Items {
			_ = K8sClient.Delete(SuiteCtx, &list.Items[i])
		}
		DeleteAllBackups()
	})

	It("stores nothing readable, and restores", func() {
		CreateBackup(OperatorNamespace, "enc-b1", cairnv1.BackupSpec{IncludedNamespaces: []string{"enc-app"}, StorageLocation: loc.Name})
		WaitPhase("enc-b1", cairnv1.BackupPhaseCompleted)
		files := 0
		Expect(filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			Expect(err).NotTo(HaveOccurred())
			files++
			Expect(bytes.HasPrefix(b, []byte(storage.EncryptedFormat+" k1 "))).To(BeTrue(), "%s is not encrypted with k1", path)
			for _, plain := range []string{distinctive, "enc-b1", "enc-app"} {
				Expect(bytes.Contains(b, []byte(plain))).To(BeFalse(), "%s holds %q in plain text", path, plain)
			}
			return nil
		})).To(Succeed())
		Expect(files).To(BeNumerically(">=", 4), "the archive, its lists, the log and the commit marker")

		CreateRestore(OperatorNamespace, "enc-r1", cairnv1.RestoreSpec{BackupName: "enc-b1",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"enc-app": "enc-copy1"}})
		WaitRestore(OperatorNamespace, "enc-r1", cairnv1.RestorePhaseCompleted)
		Expect(restored("enc-copy1")).To(Equal(distinctive))
	})

	It("rotates keys: new backups use the new key, old ones stay restorable while the old key is kept", func() {
		patch := client.MergeFrom(keys.DeepCopy())
		keys.Data["k2"] = key2
		Expect(K8sClient.Patch(SuiteCtx, keys, patch)).To(Succeed())
		bsl := &cairnv1.BackupStorageLocation{}
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(loc), bsl)).To(Succeed())
		lpatch := client.MergeFrom(bsl.DeepCopy())
		bsl.Spec.Encryption.WriteKey = "k2"
		Expect(K8sClient.Patch(SuiteCtx, bsl, lpatch)).To(Succeed())

		CreateBackup(OperatorNamespace, "enc-b2", cairnv1.BackupSpec{IncludedNamespaces: []string{"enc-app"}, StorageLocation: loc.Name})
		WaitPhase("enc-b2", cairnv1.BackupPhaseCompleted)
		marker, err := os.ReadFile(filepath.Join(dir, "backups", OperatorNamespace, "enc-b2", "cairn-backup.json"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(marker)).To(HavePrefix(storage.EncryptedFormat + " k2 "))

		CreateRestore(OperatorNamespace, "enc-r2", cairnv1.RestoreSpec{BackupName: "enc-b1",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"enc-app": "enc-copy2"}})
		WaitRestore(OperatorNamespace, "enc-r2", cairnv1.RestorePhaseCompleted)
		Expect(restored("enc-copy2")).To(Equal(distinctive))
	})

	It("says which key is missing when the Secret lost the one a backup was written with", func() {
		patch := client.MergeFrom(keys.DeepCopy())
		delete(keys.Data, "k1")
		Expect(K8sClient.Patch(SuiteCtx, keys, patch)).To(Succeed())
		CreateRestore(OperatorNamespace, "enc-r3", cairnv1.RestoreSpec{BackupName: "enc-b1",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"enc-app": "enc-copy3"}})
		Eventually(func(g Gomega) {
			rs := GetRestore(OperatorNamespace, "enc-r3")
			g.Expect(rs.Status.Phase).To(BeElementOf(cairnv1.RestorePhaseFailed, cairnv1.RestorePhaseFailedValidation))
			g.Expect(rs.Status.FailureReason + fmtErrors(rs.Status.ValidationErrors)).To(ContainSubstring(`written with key "k1"`))
		}).WithTimeout(60 * time.Second).Should(Succeed())
		var s corev1.Secret
		Expect(apierrors.IsNotFound(K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: "enc-copy3", Name: "db"}, &s))).To(BeTrue(), "nothing restored")
	})

	It("is Unavailable, naming the Secret, when its key Secret is missing; encryption cannot be turned off", func() {
		spec := FilesystemSpec(GinkgoT().TempDir())
		spec.Encryption = &cairnv1.LocationEncryption{KeySecretRef: cairnv1.LocalSecretReference{Name: "no-such-keys"}, WriteKey: "k1"}
		missing := CreateLocation(spec)
		EventuallyLocation(missing, cairnv1.StorageLocationPhaseUnavailable, "no-such-keys does not exist")

		bsl := &cairnv1.BackupStorageLocation{}
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(loc), bsl)).To(Succeed())
		patch := client.MergeFrom(bsl.DeepCopy())
		bsl.Spec.Encryption = nil
		err := K8sClient.Patch(SuiteCtx, bsl, patch)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("cannot be turned on or off later"))
	})
})

func fmtErrors(errs []string) string {
	var b bytes.Buffer
	for _, e := range errs {
		b.WriteString(" " + e)
	}
	return b.String()
}
