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
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// Disaster recovery from an encrypted S3 location (DESIGN.md sections 11 and 18): a second
// control plane with its own manager, given the same bucket through a ReadOnly location and the
// same key Secret, syncs the first cluster's backups and restores them; with a wrong key its
// sync says which key does not open them, and without the key its location says which is
// missing.
var _ = Describe("An encrypted S3 location in a second cluster", Ordered, func() {
	const distinctive = "dr-db-password-8d41e07a"
	var (
		server *testenv.S3Server
		key1   = make([]byte, 32)
		second *SecondCluster
	)

	BeforeAll(func() {
		_, _ = rand.Read(key1)
		server = testenv.StartS3Server(GinkgoT())
		server.CreateBucket("dr-bucket")
	})

	It("is written by the first cluster with nothing readable in the bucket", func() {
		CreateCredentialSecret("dr-s3", server.CredentialsFile())
		keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dr-keys", Namespace: OperatorNamespace}, Data: map[string][]byte{"k1": key1}}
		Expect(K8sClient.Create(SuiteCtx, keys)).To(Succeed())
		DeferCleanup(func() { _ = K8sClient.Delete(SuiteCtx, keys) })
		spec := S3Spec(server, "dr-bucket", "dr-s3")
		spec.Encryption = &cairnv1.LocationEncryption{KeySecretRef: cairnv1.LocalSecretReference{Name: "dr-keys"}, WriteKey: "k1"}
		loc := CreateLocation(spec)
		stop := StartManager(controller.Config{ProgressInterval: 10 * time.Millisecond})
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
		EnsureNamespace("dr-app")
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "dr-app"}, Data: map[string][]byte{"password": []byte(distinctive)}})
		CreateBackup(OperatorNamespace, "dr-b1", cairnv1.BackupSpec{IncludedNamespaces: []string{"dr-app"}, StorageLocation: loc.Name})
		WaitPhase("dr-b1", cairnv1.BackupPhaseCompleted)
		stop() // the first cluster is lost
		files := 0
		Expect(filepath.WalkDir(filepath.Join(server.Dir, "dr-bucket"), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			Expect(err).NotTo(HaveOccurred())
			files++
			Expect(bytes.HasPrefix(data, []byte(storage.EncryptedFormat+" k1 "))).To(BeTrue(), "%s is not encrypted with k1", path)
			Expect(bytes.Contains(data, []byte(distinctive))).To(BeFalse(), "%s holds the Secret's value in plain text", path)
			return nil
		})).To(Succeed())
		Expect(files).To(BeNumerically(">=", 4))
	})

	It("is synced and restored by a second cluster with the same key, and says which key is wrong or missing", func() {
		second = StartSecondCluster()
		b := second.Client
		create := func(obj client.Object) {
			GinkgoHelper()
			Expect(b.Create(SuiteCtx, obj)).To(Succeed())
		}
		create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dr-s3", Namespace: OperatorNamespace}, Data: map[string][]byte{"cloud": []byte(server.CredentialsFile())}})
		wrong := make([]byte, 32)
		_, _ = rand.Read(wrong)
		keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dr-keys", Namespace: OperatorNamespace}, Data: map[string][]byte{"k1": wrong}}
		create(keys)
		spec := S3Spec(server, "dr-bucket", "dr-s3")
		spec.Encryption = &cairnv1.LocationEncryption{KeySecretRef: cairnv1.LocalSecretReference{Name: "dr-keys"}, WriteKey: "k1"}
		spec.AccessMode = cairnv1.AccessModeReadOnly
		spec.BackupSyncPeriod = &metav1.Duration{Duration: time.Second}
		loc := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "primary", Namespace: OperatorNamespace}, Spec: spec}
		create(loc)
		stop := second.StartManager(controller.Config{ProgressInterval: 10 * time.Millisecond})
		DeferCleanup(func() { stop() })

		// A key of the right name but the wrong bytes: nothing is synced, and the location's
		// event says the key does not open the backup.
		Eventually(func(g Gomega) {
			var list eventsv1.EventList
			g.Expect(b.List(SuiteCtx, &list, client.InNamespace(OperatorNamespace))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Regarding.Kind == "BackupStorageLocation" && e.Regarding.Name == "primary" && e.Reason == "SyncSkipped" {
					notes = append(notes, e.Note)
				}
			}
			g.Expect(notes).To(ContainElement(And(ContainSubstring("dr-b1"), ContainSubstring(`key "k1" is not the key the object was written with`))))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		var backups cairnv1.BackupList
		Expect(b.List(SuiteCtx, &backups, client.InNamespace(OperatorNamespace))).To(Succeed())
		Expect(backups.Items).To(BeEmpty(), "nothing synced with a wrong key")

		// The same Secret as the first cluster's: synced, and restored.
		patch := client.MergeFrom(keys.DeepCopy())
		keys.Data["k1"] = key1
		Expect(b.Patch(SuiteCtx, keys, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			var synced cairnv1.Backup
			g.Expect(b.Get(SuiteCtx, client.ObjectKey{Namespace: OperatorNamespace, Name: "dr-b1"}, &synced)).To(Succeed())
			g.Expect(synced.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
			g.Expect(synced.Annotations).To(HaveKeyWithValue(cairnv1.SyncedFromAnnotation, "primary"))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		create(&cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: OperatorNamespace, Name: "dr-r1"},
			Spec: cairnv1.RestoreSpec{BackupName: "dr-b1", NamespaceMapping: map[string]cairnv1.NamespaceName{"dr-app": "dr-copy"}}})
		Eventually(func(g Gomega) {
			var rs cairnv1.Restore
			g.Expect(b.Get(SuiteCtx, client.ObjectKey{Namespace: OperatorNamespace, Name: "dr-r1"}, &rs)).To(Succeed())
			g.Expect(rs.Status.Phase).To(Equal(cairnv1.RestorePhaseCompleted), "failureReason %q, validationErrors %v", rs.Status.FailureReason, rs.Status.ValidationErrors)
		}).WithTimeout(60 * time.Second).Should(Succeed())
		var restored corev1.Secret
		Expect(b.Get(SuiteCtx, client.ObjectKey{Namespace: "dr-copy", Name: "db"}, &restored)).To(Succeed())
		Expect(string(restored.Data["password"])).To(Equal(distinctive))

		// Without the key: the location says which one is missing.
		keys.Data = map[string][]byte{"k2": wrong}
		Expect(b.Update(SuiteCtx, keys)).To(Succeed())
		Eventually(func(g Gomega) {
			var got cairnv1.BackupStorageLocation
			g.Expect(b.Get(SuiteCtx, client.ObjectKeyFromObject(loc), &got)).To(Succeed())
			g.Expect(got.Status.Phase).To(Equal(cairnv1.StorageLocationPhaseUnavailable))
			g.Expect(got.Status.Message).To(ContainSubstring(`"k1" is not among the keys (k2)`))
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})
})
