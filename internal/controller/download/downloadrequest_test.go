package download_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/controller/download"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

var downloadCounter int

// downloadFixture is a backup and a restore in each of two team namespaces, with every file of
// theirs in one storage location, and the download reconciler running.
type downloadFixture struct {
	teamA, teamB string
	store        storage.ObjectStore
	layout       storage.Layout
	bsl          *cairnv1.BackupStorageLocation
}

func newDownloadFixture(spec cairnv1.BackupStorageLocationSpec, store storage.ObjectStore, ttl time.Duration) *downloadFixture {
	GinkgoHelper()
	downloadCounter++
	f := &downloadFixture{
		teamA: fmt.Sprintf("dl-a-%d", downloadCounter), teamB: fmt.Sprintf("dl-b-%d", downloadCounter),
		store: store, layout: storage.Layout{Prefix: prefixOf(spec)},
	}
	f.bsl = CreateLocation(spec)
	for _, ns := range []string{f.teamA, f.teamB} {
		CreateObject(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		members[ns] = NewMember(ns, "member", memberRules)
		b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b1"}}
		Expect(K8sClient.Create(SuiteCtx, b)).To(Succeed())
		started := metav1.Now()
		b.Status = cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StorageLocation: f.bsl.Name, StartTimestamp: &started}
		Expect(K8sClient.Status().Update(SuiteCtx, b)).To(Succeed())
		// Its commit marker names it: the files are its own.
		Expect(storage.WriteMetadata(SuiteCtx, store, f.layout.Backup(ns, "b1"), storage.BackupMetadata{
			FormatVersion: "1.1.0", Namespace: ns, Name: "b1", UID: string(b.UID), Phase: string(cairnv1.BackupPhaseCompleted)})).To(Succeed())
		rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1"}, Spec: cairnv1.RestoreSpec{BackupName: "b1"}}
		Expect(K8sClient.Create(SuiteCtx, rs)).To(Succeed())
		rs.Status = cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseCompleted, StorageLocation: f.bsl.Name}
		Expect(K8sClient.Status().Update(SuiteCtx, rs)).To(Succeed())
		for _, kind := range allDownloadKinds {
			Expect(store.Put(SuiteCtx, f.key(ns, kind), strings.NewReader(fileContent(ns, kind)))).To(Succeed())
		}
	}
	DeferCleanup(StartManager(controller.Config{Controllers: []string{"downloadrequest"},
		DownloadBindAddress: "127.0.0.1:0", DownloadRequestTTL: ttl}))
	return f
}

func prefixOf(spec cairnv1.BackupStorageLocationSpec) string {
	if spec.ObjectStorage == nil {
		return ""
	}
	return spec.ObjectStorage.Prefix
}

// members are the person of each team namespace who asks for its downloads: requests in a
// namespace are created as its member, and a URL made for a member is fetched with their token.
var members = map[string]Member{}

// memberRules are what a member may do in their namespace: read its backups and restores and
// what the fixture's backups hold, and ask for downloads.
var memberRules = []rbacv1.PolicyRule{
	{APIGroups: []string{cairnv1.GroupVersion.Group}, Resources: []string{"backups", "restores"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{cairnv1.GroupVersion.Group}, Resources: []string{"downloadrequests"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
}

// tokenFor is the token of the member a download URL is made for ("" for a URL that names
// none), as their own CLI would send it.
func tokenFor(u string) string {
	GinkgoHelper()
	parsed, err := url.Parse(u)
	Expect(err).NotTo(HaveOccurred())
	for _, m := range members {
		if m.Username == parsed.Query().Get("user") {
			return m.Token
		}
	}
	return ""
}

var allDownloadKinds = []cairnv1.DownloadTargetKind{
	cairnv1.DownloadTargetBackupLog, cairnv1.DownloadTargetBackupContents, cairnv1.DownloadTargetBackupResults,
	cairnv1.DownloadTargetBackupResourceList, cairnv1.DownloadTargetBackupItemOperations,
	cairnv1.DownloadTargetRestoreLog, cairnv1.DownloadTargetRestoreResults, cairnv1.DownloadTargetRestoreResourceList,
}

// fileContent is what the fixture stores as a kind's file of namespace ns: text, but for the
// backup's resource list, which the manager reads (a backup's contents are handed out only to a
// requester who may get every kind it names) and which must be one.
func fileContent(ns string, kind cairnv1.DownloadTargetKind) string {
	if kind != cairnv1.DownloadTargetBackupResourceList {
		return fmt.Sprintf("the %s of namespace %s", kind, ns)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	_, err := fmt.Fprintf(gz, `{"configmaps":[%q]}`, ns+"/settings")
	Expect(err).NotTo(HaveOccurred())
	Expect(gz.Close()).To(Succeed())
	return buf.String()
}

// key is where the fixture stored a kind's file of namespace ns, from the layout (not from the
// code under test).
func (f *downloadFixture) key(ns string, kind cairnv1.DownloadTargetKind) string {
	b, r := f.layout.Backup(ns, "b1"), f.layout.Restore(ns, "r1")
	return map[cairnv1.DownloadTargetKind]string{
		cairnv1.DownloadTargetBackupLog: b.Logs, cairnv1.DownloadTargetBackupContents: b.Archive,
		cairnv1.DownloadTargetBackupResults: b.Results, cairnv1.DownloadTargetBackupResourceList: b.ResourceList,
		cairnv1.DownloadTargetBackupItemOperations: b.ItemOperations,
		cairnv1.DownloadTargetRestoreLog:           r.Logs, cairnv1.DownloadTargetRestoreResults: r.Results,
		cairnv1.DownloadTargetRestoreResourceList: r.ResourceList,
	}[kind]
}

func targetName(kind cairnv1.DownloadTargetKind) string {
	if kind.IsRestoreFile() {
		return "r1"
	}
	return "b1"
}

// request creates a DownloadRequest in ns, as its member if it has one, and waits until it is
// answered.
func request(ns string, kind cairnv1.DownloadTargetKind, name string) *cairnv1.DownloadRequest {
	GinkgoHelper()
	dr := &cairnv1.DownloadRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "dl-"},
		Spec:       cairnv1.DownloadRequestSpec{Target: cairnv1.DownloadTarget{Kind: kind, Name: name}},
	}
	creator := K8sClient
	if m, ok := members[ns]; ok {
		creator = m.Client
	}
	Expect(creator.Create(SuiteCtx, dr)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(dr), dr)).To(Succeed())
		g.Expect(dr.Status.Phase).To(BeElementOf(cairnv1.DownloadRequestPhaseProcessed, cairnv1.DownloadRequestPhaseFailed))
	}).Should(Succeed())
	return dr
}

// httpGet fetches u with the token of the member it is made for.
func httpGet(u string) (int, string) {
	GinkgoHelper()
	return httpGetAs(u, tokenFor(u))
}

// httpGetAs fetches u with token ("": none).
func httpGetAs(u, token string) (int, string) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(SuiteCtx, http.MethodGet, u, nil)
	Expect(err).NotTo(HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, string(body)
}

// httpGetAll reads a URL's body to its end, or to the error that ends it.
func httpGetAll(u string) ([]byte, error) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(SuiteCtx, http.MethodGet, u, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+tokenFor(u))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	Expect(resp.StatusCode).To(Equal(http.StatusOK))
	return io.ReadAll(resp.Body)
}

// tamper moves a URL to team b's copy of the same file, keeping team a's signature.
func tamper(u, teamA, teamB string) string {
	GinkgoHelper()
	Expect(u).To(ContainSubstring(teamA))
	return strings.ReplaceAll(u, teamA, teamB)
}

// downloadSpecs are the specs both providers must pass.
func downloadSpecs(setup func() *downloadFixture) {
	var f *downloadFixture
	BeforeEach(func() { f = setup() })

	It("answers every kind with a URL that reads exactly that file until it expires", func() {
		for _, kind := range allDownloadKinds {
			dr := request(f.teamA, kind, targetName(kind))
			Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseProcessed), "%s: %s", kind, dr.Status.Message)
			Expect(dr.Status.Expiration).NotTo(BeNil())
			Expect(dr.Status.Expiration.Time).To(BeTemporally("~", dr.CreationTimestamp.Add(download.DefaultRequestTTL), 5*time.Second))
			status, body := httpGet(dr.Status.DownloadURL)
			Expect(status).To(Equal(http.StatusOK), "%s: %s", kind, body)
			Expect(body).To(Equal(fileContent(f.teamA, kind)), "%s", kind)
		}
	})

	It("serves a URL only to the member who asked for it", func() {
		dr := request(f.teamA, cairnv1.DownloadTargetBackupContents, "b1")
		Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseProcessed), dr.Status.Message)
		status, body := httpGetAs(dr.Status.DownloadURL, "")
		Expect(status).To(Equal(http.StatusForbidden), body)
		Expect(body).To(ContainSubstring("serves only " + members[f.teamA].Username))
		status, body = httpGetAs(dr.Status.DownloadURL, members[f.teamB].Token)
		Expect(status).To(Equal(http.StatusForbidden), body)
		Expect(body).To(ContainSubstring("not " + members[f.teamB].Username))
		status, body = httpGet(dr.Status.DownloadURL)
		Expect(status).To(Equal(http.StatusOK), body)
	})

	It("refuses a URL tampered to name another namespace's file", func() {
		dr := request(f.teamA, cairnv1.DownloadTargetBackupContents, "b1")
		Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseProcessed), dr.Status.Message)
		status, _ := httpGet(tamper(dr.Status.DownloadURL, f.teamA, f.teamB))
		Expect(status).To(Equal(http.StatusForbidden))
	})

	It("fails a request for another namespace's backup, a missing target, and a missing file", func() {
		Expect(K8sClient.Delete(SuiteCtx, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: f.teamA, Name: "b1"}})).To(Succeed())
		// Only team b has a backup b1 now: team a's request must not find it.
		dr := request(f.teamA, cairnv1.DownloadTargetBackupContents, "b1")
		Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseFailed))
		Expect(dr.Status.Message).To(Equal("backup b1 does not exist in namespace " + f.teamA))
		Expect(dr.Status.DownloadURL).To(BeEmpty())

		dr = request(f.teamA, cairnv1.DownloadTargetRestoreLog, "nope")
		Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseFailed))
		Expect(dr.Status.Message).To(Equal("restore nope does not exist in namespace " + f.teamA))

		// A Backup made by hand under the name of data another Backup object committed (another
		// cluster's, in a shared bucket) reads none of it.
		Expect(storage.WriteMetadata(SuiteCtx, f.store, f.layout.Backup(f.teamA, "theirs"), storage.BackupMetadata{
			FormatVersion: "1.1.0", Namespace: f.teamA, Name: "theirs", UID: "another-cluster", Phase: string(cairnv1.BackupPhaseCompleted)})).To(Succeed())
		Expect(f.store.Put(SuiteCtx, f.layout.Backup(f.teamA, "theirs").Archive, strings.NewReader("their secrets"))).To(Succeed())
		theirs := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: f.teamA, Name: "theirs"}}
		Expect(K8sClient.Create(SuiteCtx, theirs)).To(Succeed())
		theirs.Status = cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseFailed, StorageLocation: f.bsl.Name, StartTimestamp: ptr.To(metav1.Now())}
		Expect(K8sClient.Status().Update(SuiteCtx, theirs)).To(Succeed())
		for _, kind := range []cairnv1.DownloadTargetKind{cairnv1.DownloadTargetBackupContents, cairnv1.DownloadTargetBackupLog} {
			// The manager's cache may still hold theirs without its status: such a request is
			// refused for that reason, never answered; ask again until the status is seen.
			Eventually(func(g Gomega) {
				dr = request(f.teamA, kind, "theirs")
				Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseFailed), "%s", kind)
				Expect(dr.Status.DownloadURL).To(BeEmpty())
				g.Expect(dr.Status.Message).To(ContainSubstring("belongs to another Backup object (UID another-cluster)"))
			}).Should(Succeed())
		}

		Expect(f.store.Delete(SuiteCtx, f.key(f.teamB, cairnv1.DownloadTargetBackupResults))).To(Succeed())
		dr = request(f.teamB, cairnv1.DownloadTargetBackupResults, "b1")
		Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseFailed))
		Expect(dr.Status.Message).To(Equal(fmt.Sprintf("backup b1 has no BackupResults file in storage location %s", f.bsl.Name)))
	})
}

var _ = Describe("DownloadRequest", func() {
	Context("on a filesystem location", func() {
		downloadSpecs(func() *downloadFixture {
			dir := GinkgoT().TempDir()
			store, err := storage.NewFilesystem(dir)
			Expect(err).NotTo(HaveOccurred())
			return newDownloadFixture(FilesystemSpec(dir), store, 0)
		})
	})

	Context("on an s3 location", func() {
		downloadSpecs(func() *downloadFixture {
			server := testenv.StartS3Server(GinkgoT())
			server.CreateBucket("backups")
			downloadCounter++
			secret := fmt.Sprintf("dl-s3-%d", downloadCounter)
			CreateCredentialSecret(secret, server.CredentialsFile())
			store, err := storage.NewS3(storage.S3Config{Bucket: "backups", Endpoint: server.Endpoint(), ForcePathStyle: true,
				Credentials: storage.S3Credentials{AccessKeyID: server.AccessKey, SecretAccessKey: server.SecretKey}})
			Expect(err).NotTo(HaveOccurred())
			return newDownloadFixture(S3Spec(server, "backups", secret), store, 0)
		})
	})

	// An encrypted location's files are served decrypted by the manager's download server, S3
	// ones too: no presigned URL, which would hand out ciphertext.
	Context("on an encrypted s3 location", func() {
		downloadSpecs(func() *downloadFixture {
			server := testenv.StartS3Server(GinkgoT())
			server.CreateBucket("backups")
			downloadCounter++
			secret := fmt.Sprintf("dl-enc-%d", downloadCounter)
			CreateCredentialSecret(secret, server.CredentialsFile())
			key := bytes.Repeat([]byte{byte(downloadCounter)}, storage.KeySize)
			keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret + "-keys", Namespace: OperatorNamespace}, Data: map[string][]byte{"k1": key}}
			CreateObject(keys)
			raw, err := storage.NewS3(storage.S3Config{Bucket: "backups", Endpoint: server.Endpoint(), ForcePathStyle: true,
				Credentials: storage.S3Credentials{AccessKeyID: server.AccessKey, SecretAccessKey: server.SecretKey}})
			Expect(err).NotTo(HaveOccurred())
			spec := S3Spec(server, "backups", secret)
			// Bound to their keys relative to the location's prefix, as the manager writes them.
			store, err := storage.Encrypted(raw, storage.Keyring{Keys: keys.Data, WriteKey: "k1"}, prefixOf(spec))
			Expect(err).NotTo(HaveOccurred())
			spec.Encryption = &cairnv1.LocationEncryption{KeySecretRef: cairnv1.LocalSecretReference{Name: keys.Name}, WriteKey: "k1"}
			f := newDownloadFixture(spec, store, 0)
			DeferCleanup(func() {
				// What was stored is ciphertext: the same file read raw is not the content.
				rc, err := raw.Get(SuiteCtx, f.key(f.teamA, cairnv1.DownloadTargetBackupLog))
				Expect(err).NotTo(HaveOccurred())
				b, _ := io.ReadAll(rc)
				_ = rc.Close()
				Expect(string(b)).NotTo(ContainSubstring(fileContent(f.teamA, cairnv1.DownloadTargetBackupLog)))
			})
			return f
		})
	})

	// An s3 location's files stream through the download server too: a presigned URL would
	// serve anyone who saw it, unverified (DESIGN.md section 21).
	It("serves an s3 location's files through the download server, not by a presigned URL", func() {
		server := testenv.StartS3Server(GinkgoT())
		server.CreateBucket("backups")
		CreateCredentialSecret("dl-public", server.CredentialsFile())
		store, err := storage.NewS3(storage.S3Config{Bucket: "backups", Endpoint: server.Endpoint(), ForcePathStyle: true,
			Credentials: storage.S3Credentials{AccessKeyID: server.AccessKey, SecretAccessKey: server.SecretKey}})
		Expect(err).NotTo(HaveOccurred())
		spec := S3Spec(server, "backups", "dl-public")
		spec.Config[cairnv1.ConfigKeyPublicURL] = strings.Replace(server.Endpoint(), "127.0.0.1", "localhost", 1)
		f := newDownloadFixture(spec, store, 0)
		dr := request(f.teamA, cairnv1.DownloadTargetBackupLog, "b1")
		Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseProcessed), dr.Status.Message)
		Expect(dr.Status.DownloadURL).To(ContainSubstring("/download?"))
		Expect(dr.Status.DownloadURL).NotTo(ContainSubstring("X-Amz-"))
		status, body := httpGet(dr.Status.DownloadURL)
		Expect(status).To(Equal(http.StatusOK))
		Expect(body).To(Equal(fileContent(f.teamA, cairnv1.DownloadTargetBackupLog)))
	})

	// A committed backup's files are verified against its commit marker as they stream: one
	// changed by a byte in storage ends with an error before its last bytes.
	It("cuts the download of a file that does not match its commit marker", func() {
		dir := GinkgoT().TempDir()
		store, err := storage.NewFilesystem(dir)
		Expect(err).NotTo(HaveOccurred())
		f := newDownloadFixture(FilesystemSpec(dir), store, 0)
		keys := f.layout.Backup(f.teamA, "b1")
		archive := bytes.Repeat([]byte("an archive of team a "), 20000) // over the server's 64 KiB reads
		logs := []byte(fileContent(f.teamA, cairnv1.DownloadTargetBackupLog))
		Expect(store.Put(SuiteCtx, keys.Archive, bytes.NewReader(archive))).To(Succeed())
		ad, _ := storage.Digest(bytes.NewReader(archive))
		ld, _ := storage.Digest(bytes.NewReader(logs))
		var b cairnv1.Backup
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: f.teamA, Name: "b1"}, &b)).To(Succeed())
		Expect(storage.WriteMetadata(SuiteCtx, store, keys, storage.BackupMetadata{
			FormatVersion: "1.1.0", Namespace: f.teamA, Name: "b1", UID: string(b.UID), Phase: string(cairnv1.BackupPhaseCompleted),
			ArchiveSHA256: ad.SHA256, ArchiveSize: ad.Size,
			Files: map[string]storage.FileDigest{"b1-logs.gz": {SHA256: ld.SHA256, Size: ld.Size}}})).To(Succeed())

		contents := request(f.teamA, cairnv1.DownloadTargetBackupContents, "b1")
		Expect(contents.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseProcessed), contents.Status.Message)
		got, err := httpGetAll(contents.Status.DownloadURL)
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(archive))

		changed := bytes.Clone(archive)
		changed[len(changed)-10] ^= 1
		Expect(store.Put(SuiteCtx, keys.Archive, bytes.NewReader(changed))).To(Succeed())
		got, err = httpGetAll(contents.Status.DownloadURL)
		Expect(err).To(HaveOccurred(), "a download that does not match ends with an error")
		Expect(len(got)).To(BeNumerically("<", len(archive)))

		Expect(store.Put(SuiteCtx, keys.Logs, strings.NewReader("a log written over the backup's"))).To(Succeed())
		dr := request(f.teamA, cairnv1.DownloadTargetBackupLog, "b1")
		Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseProcessed), dr.Status.Message)
		status, body := httpGet(dr.Status.DownloadURL)
		Expect(status).To(Equal(http.StatusBadGateway))
		Expect(body).To(ContainSubstring("does not match the digest its backup's commit marker records"))
	})

	It("deletes a request when it expires, and its URL stops working", func() {
		dir := GinkgoT().TempDir()
		store, err := storage.NewFilesystem(dir)
		Expect(err).NotTo(HaveOccurred())
		f := newDownloadFixture(FilesystemSpec(dir), store, 2*time.Second)
		dr := request(f.teamA, cairnv1.DownloadTargetBackupLog, "b1")
		Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseProcessed), dr.Status.Message)
		failed := request(f.teamA, cairnv1.DownloadTargetBackupLog, "nope")
		Expect(failed.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseFailed))
		status, _ := httpGet(dr.Status.DownloadURL)
		Expect(status).To(Equal(http.StatusOK))

		for _, req := range []*cairnv1.DownloadRequest{dr, failed} {
			Eventually(func() bool {
				err := K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(req), &cairnv1.DownloadRequest{})
				return client.IgnoreNotFound(err) == nil && err != nil
			}).Should(BeTrue(), "request %s is deleted at its expiration", req.Name)
		}
		status, body := httpGet(dr.Status.DownloadURL)
		Expect(status).To(Equal(http.StatusForbidden))
		Expect(body).To(ContainSubstring("expired"))
	})

	It("keeps the spec of a request as it was created", func() {
		ns := "dl-immutable"
		CreateObject(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		dr := &cairnv1.DownloadRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"},
			Spec: cairnv1.DownloadRequestSpec{Target: cairnv1.DownloadTarget{Kind: cairnv1.DownloadTargetBackupLog, Name: "b1"}}}
		Expect(K8sClient.Create(SuiteCtx, dr)).To(Succeed())
		dr.Spec.Target.Name = "b2"
		Expect(K8sClient.Update(SuiteCtx, dr)).To(MatchError(ContainSubstring("spec is immutable")))
		bad := &cairnv1.DownloadRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "y"},
			Spec: cairnv1.DownloadRequestSpec{Target: cairnv1.DownloadTarget{Kind: cairnv1.DownloadTargetBackupLog, Name: "../team-b/b1"}}}
		Expect(K8sClient.Create(SuiteCtx, bad)).NotTo(Succeed())
	})
})
