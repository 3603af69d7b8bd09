package restore_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// objectWrites records, in order, every request that writes an object's content through an S3
// proxy: a PutObject, or the start of a multipart upload (its parts and completion are the
// same write). Setting a retention (PUT ?retention) writes no content and is not one.
type objectWrites struct {
	mu   sync.Mutex
	keys []string
}

func (w *objectWrites) record(r *http.Request) {
	q := r.URL.Query()
	write := r.Method == http.MethodPut && !q.Has("retention") && !q.Has("partNumber") && !q.Has("legal-hold") && !q.Has("tagging") ||
		r.Method == http.MethodPost && q.Has("uploads")
	if !write {
		return
	}
	// Path-style: /<bucket>/<key>.
	_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keys = append(w.keys, key)
}

func (w *objectWrites) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.keys...)
}

// Object Lock (DESIGN.md section 18) against versitygw, which enforces it: a committed backup's
// objects are locked until its retain-until date, Cairn writes no object twice once the commit
// marker is written (backup, finalize, restore, deletion attempt: counted through a proxy), and
// deleting it before the date ends DeletionFailed saying until when, retried then.
var _ = Describe("A location with Object Lock", Ordered, func() {
	const (
		ttl          = 10 * time.Second
		minRetention = 20 * time.Second
	)
	var (
		server *testenv.S3Server
		writes = &objectWrites{}
		loc    *cairnv1.BackupStorageLocation
		stop   func()
	)

	BeforeAll(func() {
		server = testenv.StartVersionedS3Server(GinkgoT())
		server.CreateLockedBucket("locked")
		server.CreateBucket("unlocked")
		target, err := url.Parse(server.Endpoint())
		Expect(err).NotTo(HaveOccurred())
		forward := httputil.NewSingleHostReverseProxy(target)
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writes.record(r)
			forward.ServeHTTP(w, r)
		}))
		DeferCleanup(proxy.Close)
		CreateCredentialSecret("olock-s3", server.CredentialsFile())
		spec := S3Spec(server, "locked", "olock-s3")
		spec.Config["endpoint"] = proxy.URL
		spec.ObjectLock = &cairnv1.LocationObjectLock{Mode: cairnv1.ObjectLockModeCompliance, MinRetention: metav1.Duration{Duration: minRetention}}
		loc = CreateLocation(spec)
		stop = StartManager(controller.Config{ProgressInterval: 10 * time.Millisecond, RetryBackoffMin: time.Second, RetryBackoffMax: 2 * time.Second})
		DeferCleanup(func() { stop() })
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
		EnsureNamespace("olock-app")
		CreateObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "olock-app"}, Data: map[string]string{"k": "v"}})
	})
	AfterAll(func() {
		var list cairnv1.RestoreList
		Expect(K8sClient.List(SuiteCtx, &list)).To(Succeed())
		for i := range list.Items {
			_ = K8sClient.Delete(SuiteCtx, &list.Items[i])
		}
	})

	It("is Unavailable on a bucket without Object Lock, saying so", func() {
		spec := S3Spec(server, "unlocked", "olock-s3")
		spec.ObjectStorage.Prefix = "elsewhere"
		spec.ObjectLock = &cairnv1.LocationObjectLock{Mode: cairnv1.ObjectLockModeGovernance, MinRetention: metav1.Duration{Duration: time.Hour}}
		unlocked := CreateLocation(spec)
		EventuallyLocation(unlocked, cairnv1.StorageLocationPhaseUnavailable, `bucket "unlocked" at `+server.Endpoint()+` does not have Object Lock enabled`)
	})

	It("locks a committed backup, writes nothing twice after its marker, and the GC deletes it only after its date", func() {
		CreateBackup(OperatorNamespace, "olock-b1", cairnv1.BackupSpec{IncludedNamespaces: []string{"olock-app"}, StorageLocation: loc.Name,
			TTL: &metav1.Duration{Duration: ttl}})
		b := WaitPhase("olock-b1", cairnv1.BackupPhaseCompleted)

		// Every object of the backup is locked, in Compliance mode, until the date in its marker:
		// minRetention after the commit, later than its expiration.
		raw := server.Client()
		dir := "cluster-a/backups/" + OperatorNamespace + "/olock-b1/"
		listed, err := raw.ListObjectsV2(SuiteCtx, &s3.ListObjectsV2Input{Bucket: aws.String("locked"), Prefix: aws.String(dir)})
		Expect(err).NotTo(HaveOccurred())
		Expect(len(listed.Contents)).To(BeNumerically(">=", 4), "the archive, its lists, the log and the commit marker")
		store, err := location.Open(SuiteCtx, K8sClient, loc)
		Expect(err).NotTo(HaveOccurred())
		meta, err := storage.ReadMetadata(SuiteCtx, store, store.Layout.Backup(OperatorNamespace, "olock-b1"))
		Expect(err).NotTo(HaveOccurred())
		// (The status keeps whole seconds; the commit's date had its fraction, rounded up.)
		committed := b.Status.CompletionTimestamp.Time
		Expect(meta.RetainUntil).To(BeTemporally(">=", committed.Add(minRetention)))
		Expect(meta.RetainUntil).To(BeTemporally("<=", committed.Add(minRetention+time.Second)))
		Expect(meta.RetainUntil).To(BeTemporally(">", b.Status.Expiration.Time))
		for _, obj := range listed.Contents {
			ret, err := raw.GetObjectRetention(SuiteCtx, &s3.GetObjectRetentionInput{Bucket: aws.String("locked"), Key: obj.Key})
			Expect(err).NotTo(HaveOccurred(), *obj.Key)
			Expect(ret.Retention.Mode).To(BeEquivalentTo("COMPLIANCE"), *obj.Key)
			Expect(ret.Retention.RetainUntilDate.Equal(meta.RetainUntil)).To(BeTrue(), "%s retained until %s, want %s", *obj.Key, ret.Retention.RetainUntilDate, meta.RetainUntil)
		}

		CreateRestore(OperatorNamespace, "olock-r1", cairnv1.RestoreSpec{BackupName: "olock-b1",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"olock-app": "olock-copy"}})
		WaitRestore(OperatorNamespace, "olock-r1", cairnv1.RestorePhaseCompleted)

		// Expired before its date: the GC deletes it, which touches nothing and ends
		// DeletionFailed saying until when.
		until := meta.RetainUntil.UTC().Format(time.RFC3339)
		Eventually(func(g Gomega) {
			got := GetBackup(OperatorNamespace, "olock-b1")
			g.Expect(got.Status.Phase).To(Equal(cairnv1.BackupPhaseDeletionFailed))
			g.Expect(got.Status.LastDeletionError).To(ContainSubstring("locked (Object Lock, COMPLIANCE mode) until " + until))
			g.Expect(got.Status.NextDeletionAttempt.Time).To(BeTemporally(">", meta.RetainUntil))
			g.Expect(got.Status.NextDeletionAttempt.Time).To(BeTemporally("<", meta.RetainUntil.Add(10*time.Second)))
		}).WithTimeout(20 * time.Second).Should(Succeed())
		Consistently(func(g Gomega) {
			got := GetBackup(OperatorNamespace, "olock-b1")
			g.Expect(got.Status.DeletionAttempts).To(BeEquivalentTo(1), "no attempt before the date (the backoff is 1-2 s)")
		}).WithTimeout(time.Until(meta.RetainUntil) - time.Second).Should(Succeed())

		// At the date it is retried and goes, every version of every object.
		Eventually(func() bool {
			return apierrors.IsNotFound(K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: OperatorNamespace, Name: "olock-b1"}, &cairnv1.Backup{}))
		}).WithTimeout(time.Until(meta.RetainUntil)+20*time.Second).Should(BeTrue(), "the backup is deleted at its date")
		versions, err := raw.ListObjectVersions(SuiteCtx, &s3.ListObjectVersionsInput{Bucket: aws.String("locked"), Prefix: aws.String(dir)})
		Expect(err).NotTo(HaveOccurred())
		Expect(versions.Versions).To(BeEmpty())
		Expect(versions.DeleteMarkers).To(BeEmpty())

		// No object was written twice once the marker was: every write after it is to a new key.
		all := writes.list()
		marker := -1
		for i, key := range all {
			if key == dir+storage.MetadataFileName {
				marker = i
			}
		}
		Expect(marker).To(BeNumerically(">=", 0), "the marker's write went through the proxy: %v", all)
		seen := map[string]int{}
		for i, key := range all {
			seen[key]++
			if i > marker {
				Expect(seen[key]).To(Equal(1), "%s written again after the commit marker (writes: %v)", key, all)
				Expect(key).NotTo(HavePrefix(dir), "a write into the committed backup's directory after its marker")
			}
		}
		Expect(all[marker+1:]).To(ContainElement(HavePrefix("cluster-a/restores/")), "the restore's files went through the proxy")
		GinkgoWriter.Printf("object writes per key: %v\n", seen)
	})
})
