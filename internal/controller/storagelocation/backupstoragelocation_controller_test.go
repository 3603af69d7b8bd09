package storagelocation_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

var _ = Describe("BackupStorageLocation reconciler", Ordered, func() {
	BeforeAll(func() {
		DeferCleanup(StartManager(controller.Config{Controllers: []string{"storagelocation", "phaseevents"}}))
	})

	Context("filesystem", func() {
		It("marks a writable directory Available, with an event", func() {
			bsl := CreateLocation(FilesystemSpec(GinkgoT().TempDir()))
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")
			Eventually(func() []eventsv1.Event { return EventsFor(bsl) }).WithTimeout(10 * time.Second).Should(
				ContainElement(HaveField("Reason", "Available")))
		})

		It("creates a missing directory of a ReadWrite location", func() {
			dir := filepath.Join(GinkgoT().TempDir(), "new", "storage")
			bsl := CreateLocation(FilesystemSpec(dir))
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")
			Expect(dir).To(BeADirectory())
		})

		It("says when the path is not writable", func() {
			file := filepath.Join(GinkgoT().TempDir(), "a-file")
			Expect(os.WriteFile(file, []byte("x"), 0o600)).To(Succeed())
			bsl := CreateLocation(FilesystemSpec(filepath.Join(file, "storage")))
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseUnavailable, "path "+filepath.Join(file, "storage")+" cannot be created: not a directory")
			Eventually(func() []eventsv1.Event { return EventsFor(bsl) }).WithTimeout(10 * time.Second).Should(
				ContainElement(And(HaveField("Reason", "Unavailable"), HaveField("Type", corev1.EventTypeWarning))))
		})

		It("says when a relative path is given", func() {
			bsl := CreateLocation(FilesystemSpec("relative/dir"))
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseUnavailable, `config.path "relative/dir" must be an absolute path`)
		})

		It("accepts a ReadOnly location on an existing directory, and refuses to write to it", func() {
			spec := FilesystemSpec(GinkgoT().TempDir())
			spec.AccessMode = cairnv1.AccessModeReadOnly
			bsl := CreateLocation(spec)
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")
			store, err := location.Open(SuiteCtx, K8sClient, bsl)
			Expect(err).NotTo(HaveOccurred())
			Expect(store.Put(SuiteCtx, "x", strings.NewReader("y"))).To(MatchError(ContainSubstring("read-only")))
			Expect(store.Delete(SuiteCtx, "x")).To(MatchError(ContainSubstring("read-only")))
		})

		It("marks a ReadOnly location on a missing directory Unavailable", func() {
			missing := filepath.Join(GinkgoT().TempDir(), "missing")
			spec := FilesystemSpec(missing)
			spec.AccessMode = cairnv1.AccessModeReadOnly
			bsl := CreateLocation(spec)
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseUnavailable, "path "+missing+" does not exist")
			Expect(missing).NotTo(BeADirectory())
		})

		It("validates again every validationFrequency", func() {
			dir := GinkgoT().TempDir()
			spec := FilesystemSpec(filepath.Join(dir, "storage"))
			spec.ValidationFrequency = &metav1.Duration{Duration: time.Second}
			spec.AccessMode = cairnv1.AccessModeReadOnly
			Expect(os.Mkdir(filepath.Join(dir, "storage"), 0o750)).To(Succeed())
			bsl := CreateLocation(spec)
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")
			// The directory goes away without any change to the object: the next periodic
			// validation notices.
			Expect(os.Remove(filepath.Join(dir, "storage"))).To(Succeed())
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseUnavailable, "does not exist")
		})
	})

	Context("s3, against a real S3 server", func() {
		var server *testenv.S3Server
		BeforeEach(func() {
			server = testenv.StartS3Server(GinkgoT())
			server.CreateBucket("backups")
		})

		It("marks a good location Available", func() {
			CreateCredentialSecret("s3-good", server.CredentialsFile())
			bsl := CreateLocation(S3Spec(server, "backups", "s3-good"))
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")
		})

		It("says when the bucket is missing", func() {
			CreateCredentialSecret("s3-missing-bucket", server.CredentialsFile())
			bsl := CreateLocation(S3Spec(server, "nope", "s3-missing-bucket"))
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseUnavailable, `bucket "nope" does not exist`)
		})

		It("says when the endpoint is unreachable", func() {
			CreateCredentialSecret("s3-down", server.CredentialsFile())
			server.Stop()
			bsl := CreateLocation(S3Spec(server, "backups", "s3-down"))
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseUnavailable, "cannot reach the s3 endpoint "+server.Endpoint())
		})

		It("says when the credential secret is missing or malformed", func() {
			bsl := CreateLocation(S3Spec(server, "backups", "no-such-secret"))
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseUnavailable, "credential secret cairn-system/no-such-secret does not exist")
			CreateCredentialSecret("s3-malformed", "[default]\naws_access_key_id = x\n")
			spec2 := S3Spec(server, "backups", "s3-malformed")
			spec2.ObjectStorage.Prefix = "second" // its own prefix: locations that nest are refused
			bsl2 := CreateLocation(spec2)
			EventuallyLocation(bsl2, cairnv1.StorageLocationPhaseUnavailable, "has no aws_secret_access_key")
		})

		It("says access denied for wrong credentials, picks up rotated ones without a restart, and never shows them", func() {
			const wrongSecret = "definitely-not-the-secret-0123456789"
			secret := CreateCredentialSecret("s3-rotated", fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", server.AccessKey, wrongSecret))
			bsl := CreateLocation(S3Spec(server, "backups", "s3-rotated"))
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseUnavailable, `access denied to bucket "backups"`)

			secret.Data["cloud"] = []byte(server.CredentialsFile())
			Expect(K8sClient.Update(SuiteCtx, secret)).To(Succeed())
			EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")

			var got cairnv1.BackupStorageLocation
			Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(bsl), &got)).To(Succeed())
			shown := fmt.Sprintf("%+v", got.Status)
			for _, e := range EventsFor(bsl) {
				shown += e.Note
			}
			Expect(shown).NotTo(ContainSubstring(wrongSecret))
			Expect(shown).NotTo(ContainSubstring(server.SecretKey))
		})
	})

	Context("the default location", func() {
		It("flags two defaults on both, keeps the older one, and clears the flag when one steps back", func() {
			older := CreateLocation(func() cairnv1.BackupStorageLocationSpec {
				s := FilesystemSpec(GinkgoT().TempDir())
				s.Default = true
				return s
			}())
			EventuallyLocation(older, cairnv1.StorageLocationPhaseAvailable, "")
			time.Sleep(1100 * time.Millisecond) // creation timestamps have one-second resolution
			newer := CreateLocation(func() cairnv1.BackupStorageLocationSpec {
				s := FilesystemSpec(GinkgoT().TempDir())
				s.Default = true
				return s
			}())

			conflict := func(bsl *cairnv1.BackupStorageLocation) func(g Gomega) {
				return func(g Gomega) {
					var got cairnv1.BackupStorageLocation
					g.Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(bsl), &got)).To(Succeed())
					c := meta.FindStatusCondition(got.Status.Conditions, cairnv1.StorageLocationConditionDefaultConflict)
					g.Expect(c).NotTo(BeNil())
					g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
					g.Expect(c.Message).To(ContainSubstring("the oldest, %s, is the default", older.Name))
				}
			}
			Eventually(conflict(older)).WithTimeout(20 * time.Second).Should(Succeed())
			Eventually(conflict(newer)).WithTimeout(20 * time.Second).Should(Succeed())

			var all cairnv1.BackupStorageLocationList
			Expect(K8sClient.List(SuiteCtx, &all, client.InNamespace(OperatorNamespace))).To(Succeed())
			def, err := location.Resolve(all.Items, OperatorNamespace, "")
			Expect(err).NotTo(HaveOccurred())
			Expect(def.Name).To(Equal(older.Name))

			Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(newer), newer)).To(Succeed())
			newer.Spec.Default = false
			Expect(K8sClient.Update(SuiteCtx, newer)).To(Succeed())
			Eventually(func(g Gomega) {
				var got cairnv1.BackupStorageLocation
				g.Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(older), &got)).To(Succeed())
				g.Expect(meta.IsStatusConditionFalse(got.Status.Conditions, cairnv1.StorageLocationConditionDefaultConflict)).To(BeTrue())
			}).WithTimeout(20 * time.Second).Should(Succeed())
		})
	})
})
var _ = Describe("A location edited to overlap an older one", Ordered, func() {
	BeforeAll(func() {
		DeferCleanup(StartManager(controller.Config{RetryBackoffMin: 200 * time.Millisecond, RetryBackoffMax: time.Second, StorageTimeout: 5 * time.Second}))
		DeferCleanup(DeleteAllBackups)
	})

	It("never deletes the older location's objects through it, and deletes its own once it is moved away", func() {
		dir := GinkgoT().TempDir()
		fs, err := storage.NewFilesystem(dir)
		Expect(err).NotTo(HaveOccurred())
		withPrefix := func(prefix string) cairnv1.BackupStorageLocationSpec {
			s := FilesystemSpec(dir)
			s.ObjectStorage = &cairnv1.ObjectStorage{Prefix: prefix}
			return s
		}
		first := CreateLocation(withPrefix("first"))
		EventuallyLocation(first, cairnv1.StorageLocationPhaseAvailable, "")
		time.Sleep(1100 * time.Millisecond) // creation timestamps have one-second resolution
		second := CreateLocation(withPrefix("second"))
		EventuallyLocation(second, cairnv1.StorageLocationPhaseAvailable, "")

		EnsureNamespace("overlap-1")
		CreateObject(ConfigMap("overlap-1", "settings", nil))
		CreateBackup(OperatorNamespace, "overlap-shared", cairnv1.BackupSpec{IncludedNamespaces: []string{"overlap-1"}, StorageLocation: second.Name})
		WaitPhase("overlap-shared", cairnv1.BackupPhaseCompleted)
		secondKeys := storage.Layout{Prefix: "second"}.Backup(OperatorNamespace, "overlap-shared")
		Expect(fs.Exists(SuiteCtx, secondKeys.Metadata)).To(BeTrue())

		// The older location holds what a backup of the same name left there and never
		// committed (another cluster's, say): nothing in it says whose it is.
		firstKeys := storage.Layout{Prefix: "first"}.Backup(OperatorNamespace, "overlap-shared")
		Expect(fs.Put(SuiteCtx, firstKeys.Logs, strings.NewReader("another backup's log"))).To(Succeed())

		// An administrator points the second location at the first one's prefix.
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(second), second)).To(Succeed())
		second.Spec.ObjectStorage.Prefix = "first"
		Expect(K8sClient.Update(SuiteCtx, second)).To(Succeed())
		EventuallyLocation(second, cairnv1.StorageLocationPhaseUnavailable, "would nest with those of storage location "+first.Name)

		DeleteBackup("overlap-shared")
		Eventually(func(g Gomega) {
			b := GetBackup(OperatorNamespace, "overlap-shared")
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseDeletionFailed))
			g.Expect(b.Status.LastDeletionError).To(ContainSubstring("storage location " + first.Name))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(fs.Exists(SuiteCtx, firstKeys.Logs)).To(BeTrue(), "the older location's object was deleted")

		// Moved back, the location works again and the backup's own data goes.
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(second), second)).To(Succeed())
		second.Spec.ObjectStorage.Prefix = "second"
		Expect(K8sClient.Update(SuiteCtx, second)).To(Succeed())
		ExpectGone("overlap-shared")
		Expect(fs.List(SuiteCtx, secondKeys.Dir)).To(BeEmpty())
		Expect(fs.Exists(SuiteCtx, firstKeys.Logs)).To(BeTrue())
	})
})
