package e2e

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// Restart recovery (DESIGN.md section 7, docs/architecture.md "Restart recovery"): for every
// non-terminal phase, a backup is brought into it, the manager is killed with SIGKILL (no
// shutdown code runs) and started again, and the backup must end where the design says.
//
// The suite runs one manager, which reconciles Backups in every namespace, so a second manager
// on the same API server would fight it over every other spec's backups (and, with its own
// --namespace, fail theirs as tenant backups). These specs therefore kill the suite's manager
// itself and start it again with the same flags. Specs of one Ginkgo process run one after
// another, and parallel processes each have their own API server and manager, so no other spec
// is running while it is down. Leader election stays off, as in the rest of the suite: with it
// the new manager would first wait out the dead one's lease (15 s), which tests nothing here.
//
// A phase is held with a proxy in front of a real S3 server that holds chosen requests: before
// they reach the server (storage never saw them) or after it answered (storage did the work,
// the manager never heard). Each spec has its own namespace, bucket and location; its backups
// are team backups of that namespace.
var _ = Describe("Restart recovery after kill -9", func() {
	It("New: backups created while the manager was down are queued and run", func() {
		ns := "restart-new"
		namespaceWithConfigMap(ns)
		killManager()
		createBackup(ns, "plain", "")
		createBackup(ns, "marked", "")
		// A backup whose phase says New (the queue's own phase, like "").
		kubectlOK("patch", "backup", "marked", "-n", ns, "--subresource=status", "--type=merge", "-p", `{"status":{"phase":"New"}}`)
		w := watchBackups(ns)

		restartManager()
		for _, name := range []string{"plain", "marked"} {
			waitBackupPhase(ns, name, "Completed")
			Expect(filepath.Join(storageDir, "backups", ns, name, storage.MetadataFileName)).To(BeAnExistingFile())
		}
		Eventually(func() []string { return w.phases("plain") }).WithTimeout(10 * time.Second).Should(Equal([]string{"", "Queued", "ReadyToStart", "InProgress", "Finalizing", "Completed"}))
		Eventually(func() []string { return w.phases("marked") }).WithTimeout(10 * time.Second).Should(Equal([]string{"New", "Queued", "ReadyToStart", "InProgress", "Finalizing", "Completed"}))
		expectAllTerminal(ns)
	})

	It("Queued: queued backups keep their positions and run in that order", func() {
		ns := "restart-queued"
		namespaceWithConfigMap(ns)
		server, proxy := proxiedS3Location(ns)
		// The first backup runs, its archive upload held: the others queue behind it (same
		// namespace, one backup at a time).
		hold := proxy.holdBefore(request(http.MethodPut, ns, keysOf(ns, "blocker").Archive))
		createBackup(ns, "blocker", ns)
		hold.waitHeld()
		waitBackupPhase(ns, "blocker", "InProgress")
		// Queued in an order that is not the names' order.
		createBackup(ns, "zeta", ns)
		waitBackupPhase(ns, "zeta", "Queued")
		createBackup(ns, "alpha", ns)
		waitBackupPhase(ns, "alpha", "Queued")
		zeta, err := strconv.Atoi(backupField(ns, "zeta", "{.status.queuePosition}"))
		Expect(err).NotTo(HaveOccurred())
		alpha, err := strconv.Atoi(backupField(ns, "alpha", "{.status.queuePosition}"))
		Expect(err).NotTo(HaveOccurred())
		Expect(zeta).To(BeNumerically("<", alpha))

		killManager()
		hold.end()
		w := watchBackups(ns)
		restartManager()
		waitBackupPhase(ns, "blocker", "Failed")
		Expect(backupField(ns, "blocker", "{.status.failureReason}")).To(Equal("the operator restarted during the backup"))
		waitBackupPhase(ns, "zeta", "Completed")
		waitBackupPhase(ns, "alpha", "Completed")
		Expect(w.states("zeta")[0].Status.QueuePosition).To(BeEquivalentTo(zeta))
		Expect(w.states("alpha")[0].Status.QueuePosition).To(BeEquivalentTo(alpha))
		Expect(w.order(cairnv1.BackupPhaseReadyToStart)).To(Equal([]string{"zeta", "alpha"}))
		Expect(bucketClient(server, ns).List(context.Background(), keysOf(ns, "zeta").Dir)).To(ContainElement(keysOf(ns, "zeta").Metadata))
		expectAllTerminal(ns)
	})

	It("ReadyToStart: a dequeued backup is started", func() {
		ns := "restart-readytostart"
		namespaceWithConfigMap(ns)
		server, proxy := proxiedS3Location(ns)
		// Before it starts, the backup reconciler reads the location for an earlier backup of
		// the same name: held, the backup stays ReadyToStart.
		keys := keysOf(ns, "waiting")
		hold := proxy.holdBefore(request(http.MethodGet, ns, keys.Metadata))
		createBackup(ns, "waiting", ns)
		hold.waitHeld()
		Expect(backupField(ns, "waiting", "{.status.phase}")).To(Equal("ReadyToStart"))

		killManager()
		hold.end()
		w := watchBackups(ns)
		restartManager()
		waitBackupPhase(ns, "waiting", "Completed")
		Eventually(func() []string { return w.phases("waiting") }).WithTimeout(10 * time.Second).Should(Equal([]string{"ReadyToStart", "InProgress", "Finalizing", "Completed"}))
		Expect(bucketClient(server, ns).List(context.Background(), keys.Dir)).To(ContainElement(keys.Metadata))
		expectAllTerminal(ns)
	})

	It("InProgress: the backup fails, its uploads are removed and its log is kept", func() {
		ns := "restart-inprogress"
		namespaceWithConfigMap(ns)
		server, proxy := proxiedS3Location(ns)
		// The run's last upload, its log, reaches the bucket but its answer never comes back:
		// the archive, the item lists and the log are stored, and the backup is InProgress.
		keys := keysOf(ns, "interrupted")
		hold := proxy.holdAfter(request(http.MethodPut, ns, keys.Logs))
		createBackup(ns, "interrupted", ns)
		hold.waitHeld()
		Expect(backupField(ns, "interrupted", "{.status.phase}")).To(Equal("InProgress"))
		bucket := bucketClient(server, ns)
		Expect(bucket.List(context.Background(), keys.Dir)).To(ContainElements(keys.Archive, keys.ResourceList, keys.Results, keys.Logs))

		killManager()
		hold.end()
		w := watchBackups(ns)
		restartManager()
		waitBackupPhase(ns, "interrupted", "Failed")
		Expect(backupField(ns, "interrupted", "{.status.failureReason}")).To(Equal("the operator restarted during the backup"))
		Expect(backupField(ns, "interrupted", "{.status.completionTimestamp}")).NotTo(BeEmpty())
		Eventually(func() []string { return w.phases("interrupted") }).WithTimeout(10 * time.Second).Should(Equal([]string{"InProgress", "FinalizingFailed", "Failed"}))
		Expect(backupField(ns, "interrupted", `{.status.conditions[?(@.type=="CleanedUp")].status}`)).To(Equal("True"))
		Expect(bucket.List(context.Background(), keys.Dir)).To(Equal([]string{keys.Logs}))
		Expect(readLog(bucket, keys.Logs)).To(ContainSubstring("Backup started"))
		expectAllTerminal(ns)
	})

	It("InProgress, storage down at the restart: the backup fails, and its uploads are removed once storage is back", func() {
		ns := "restart-storage-down"
		namespaceWithConfigMap(ns)
		server, proxy := proxiedS3Location(ns)
		keys := keysOf(ns, "stranded")
		hold := proxy.holdAfter(request(http.MethodPut, ns, keys.Logs))
		createBackup(ns, "stranded", ns)
		hold.waitHeld()
		Expect(backupField(ns, "stranded", "{.status.phase}")).To(Equal("InProgress"))

		killManager()
		hold.end()
		server.Stop()
		restartManager()
		// The restart recovery needs no storage: the backup fails at once, and says that its
		// partial data is still being removed, rather than claim to be done.
		waitBackupPhase(ns, "stranded", "FinalizingFailed")
		Expect(backupField(ns, "stranded", "{.status.failureReason}")).To(Equal("the operator restarted during the backup"))
		Eventually(func() string {
			return backupField(ns, "stranded", `{.status.conditions[?(@.type=="CleanedUp")].reason}`)
		}).WithTimeout(20 * time.Second).Should(Equal("CleanupFailed"))
		server.Start()
		waitBackupPhase(ns, "stranded", "Failed")
		bucket := bucketClient(server, ns)
		Expect(bucket.List(context.Background(), keys.Dir)).To(Equal([]string{keys.Logs}), "the interrupted backup's uploads were left in the bucket")
		expectAllTerminal(ns)
	})

	It("InProgress during a multipart archive upload: no incomplete upload is left in the bucket", func() {
		ns := "restart-multipart"
		namespaceWithConfigMap(ns)
		bigConfigMaps(ns, 14) // an archive of more than one 8 MiB part
		server, proxy := proxiedS3Location(ns)
		// The archive's first part is stored, its answer never comes back.
		keys := keysOf(ns, "big")
		firstPart := request(http.MethodPut, ns, keys.Archive)
		hold := proxy.holdAfter(func(r *http.Request) bool { return firstPart(r) && r.URL.Query().Get("partNumber") == "1" })
		createBackup(ns, "big", ns)
		hold.waitHeld()
		Expect(backupField(ns, "big", "{.status.phase}")).To(Equal("InProgress"))
		Expect(incompleteUploads(server, ns, keys.Dir)).To(ConsistOf(keys.Archive))

		killManager()
		hold.end()
		restartManager()
		waitBackupPhase(ns, "big", "Failed")
		Expect(backupField(ns, "big", "{.status.failureReason}")).To(Equal("the operator restarted during the backup"))
		Expect(incompleteUploads(server, ns, keys.Dir)).To(BeEmpty(), "the interrupted archive upload was not aborted")
		expectAllTerminal(ns)
	})

	It("InProgress, cancelled while the manager was down: the cancel is not lost", func() {
		ns := "restart-cancelled-down"
		namespaceWithConfigMap(ns)
		server, proxy := proxiedS3Location(ns)
		keys := keysOf(ns, "stopped")
		hold := proxy.holdBefore(request(http.MethodPut, ns, keys.Archive))
		createBackup(ns, "stopped", ns)
		hold.waitHeld()
		Expect(backupField(ns, "stopped", "{.status.phase}")).To(Equal("InProgress"))

		killManager()
		hold.end()
		kubectlOK("patch", "backup", "stopped", "-n", ns, "--type", "merge", "-p", `{"spec":{"cancel":true}}`)
		w := watchBackups(ns)
		restartManager()
		waitBackupPhase(ns, "stopped", "Failed")
		Eventually(func() []string { return w.phases("stopped") }).WithTimeout(10 * time.Second).Should(Equal([]string{"InProgress", "FinalizingCancelled", "Failed"}))
		Expect(backupField(ns, "stopped", "{.status.failureReason}")).To(Equal("Backup cancelled by user"))
		bucket := bucketClient(server, ns)
		Expect(bucket.List(context.Background(), keys.Dir)).To(Equal([]string{keys.Logs}))
		Expect(readLog(bucket, keys.Logs)).To(ContainSubstring("Backup cancelled by user"))
		expectAllTerminal(ns)
	})

	It("WaitingForPluginOperations: the stored operations are resumed and the backup completes", func() {
		ns := "restart-operations"
		namespaceWithCSIVolume(ns)

		// No snapshotter runs yet: the snapshot is not ready, and the backup waits for it.
		createBackup(ns, "with-snapshot", "")
		waitBackupPhase(ns, "with-snapshot", "WaitingForPluginOperations")
		snapshot := kubectlOK("get", "volumesnapshot", "-n", ns, "-o", "jsonpath={.items[*].metadata.name}")
		Expect(strings.Fields(snapshot)).To(HaveLen(1))

		killManager()
		// The snapshot becomes ready while the manager is down.
		ctx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		c, err := client.New(env.Config, client.Options{Scheme: testenv.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		go testenv.SimulateSnapshotter(ctx, c, 0)
		Eventually(func() string {
			out, _, _ := kubectl("get", "volumesnapshot", snapshot, "-n", ns, "-o", "jsonpath={.status.readyToUse}")
			return out
		}).WithTimeout(30 * time.Second).Should(Equal("true"))
		DeferCleanup(func() {
			kubectlOK("delete", "volumesnapshotcontent", "content-"+snapshot, "--ignore-not-found", "--wait=false")
		})

		w := watchBackups(ns)
		restartManager()
		waitBackupPhase(ns, "with-snapshot", "Completed")
		Eventually(func() []string { return w.phases("with-snapshot") }).WithTimeout(10 * time.Second).Should(Equal([]string{"WaitingForPluginOperations", "Finalizing", "Completed"}))
		Expect(backupField(ns, "with-snapshot", "{.status.backupItemOperationsAttempted}/{.status.backupItemOperationsCompleted}")).To(Equal("1/1"))
		// The operation stored before the kill was followed, not started again.
		Expect(strings.Fields(kubectlOK("get", "volumesnapshot", "-n", ns, "-o", "jsonpath={.items[*].metadata.name}"))).To(Equal([]string{snapshot}))
		archive := filepath.Join(storageDir, "backups", ns, "with-snapshot", "with-snapshot.tar.gz")
		out, err := exec.Command("tar", "tzf", archive).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(strings.Fields(string(out))).To(ContainElement("resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/" + ns + "/" + snapshot + ".json"))
		expectAllTerminal(ns)
	})

	It("Finalizing: the backup completes and its commit marker is written", func() {
		ns := "restart-finalizing"
		namespaceWithConfigMap(ns)
		server, proxy := proxiedS3Location(ns)
		// The finalizer's last step, the commit marker, never reaches the bucket.
		keys := keysOf(ns, "finishing")
		hold := proxy.holdBefore(request(http.MethodPut, ns, keys.Metadata))
		createBackup(ns, "finishing", ns)
		hold.waitHeld()
		Expect(backupField(ns, "finishing", "{.status.phase}")).To(Equal("Finalizing"))
		bucket := bucketClient(server, ns)
		Expect(bucket.List(context.Background(), keys.Dir)).NotTo(ContainElement(keys.Metadata))

		killManager()
		hold.end()
		w := watchBackups(ns)
		restartManager()
		waitBackupPhase(ns, "finishing", "Completed")
		Eventually(func() []string { return w.phases("finishing") }).WithTimeout(10 * time.Second).Should(Equal([]string{"Finalizing", "Completed"}))
		meta, err := storage.ReadMetadata(context.Background(), bucket, keys)
		Expect(err).NotTo(HaveOccurred())
		Expect(meta.UID).To(Equal(backupField(ns, "finishing", "{.metadata.uid}")))
		Expect(meta.Phase).To(Equal("Completed"))
		expectAllTerminal(ns)
	})

	It("FinalizingCancelled: the backup ends Failed, cancelled, with only its log left", func() {
		ns := "restart-cancelled"
		namespaceWithConfigMap(ns)
		server, proxy := proxiedS3Location(ns)
		// Every write of the backup hangs: the run cannot upload, and once cancelled, the
		// cleanup cannot write the log.
		keys := keysOf(ns, "cancelled")
		hold := proxy.holdBefore(writesUnder(ns, keys.Dir))
		createBackup(ns, "cancelled", ns)
		hold.waitHeld()
		waitBackupPhase(ns, "cancelled", "InProgress")
		kubectlOK("patch", "backup", "cancelled", "-n", ns, "--type", "merge", "-p", `{"spec":{"cancel":true}}`)
		waitBackupPhase(ns, "cancelled", "FinalizingCancelled")

		killManager()
		hold.end()
		w := watchBackups(ns)
		restartManager()
		waitBackupPhase(ns, "cancelled", "Failed")
		Eventually(func() []string { return w.phases("cancelled") }).WithTimeout(10 * time.Second).Should(Equal([]string{"FinalizingCancelled", "Failed"}))
		Expect(backupField(ns, "cancelled", "{.status.failureReason}")).To(Equal("Backup cancelled by user"))
		Expect(backupField(ns, "cancelled", `{.status.conditions[?(@.type=="Cancelled")].status}`)).To(Equal("True"))
		bucket := bucketClient(server, ns)
		Expect(bucket.List(context.Background(), keys.Dir)).To(Equal([]string{keys.Logs}))
		Expect(readLog(bucket, keys.Logs)).To(ContainSubstring("Backup cancelled by user"))
		expectAllTerminal(ns)
	})

	It("Deleting: the interrupted deletion becomes DeletionFailed, is retried, and the backup goes", func() {
		ns := "restart-deleting"
		namespaceWithConfigMap(ns)
		server, proxy := proxiedS3Location(ns)
		createBackup(ns, "doomed", ns)
		waitBackupPhase(ns, "doomed", "Completed")
		// The deletion's first removal, the commit marker's, is done by the bucket but its
		// answer never comes back: the backup is half deleted, and Deleting once its deletion
		// has run a second.
		keys := keysOf(ns, "doomed")
		hold := proxy.holdAfter(request(http.MethodDelete, ns, keys.Metadata))
		kubectlOK("delete", "backup", "doomed", "-n", ns, "--wait=false")
		hold.waitHeld()
		waitBackupPhase(ns, "doomed", "Deleting")
		bucket := bucketClient(server, ns)
		Expect(bucket.List(context.Background(), keys.Dir)).To(ContainElement(keys.Archive))

		killManager()
		hold.end()
		w := watchBackups(ns)
		restartManager()
		Eventually(func() bool { return w.deleted("doomed") }).WithTimeout(60*time.Second).Should(BeTrue(), managerLog)
		Eventually(func() []string { return w.phases("doomed") }).WithTimeout(10 * time.Second).Should(HaveExactElements("Deleting", "DeletionFailed", "Deleting"))
		Expect(w.states("doomed")).To(ContainElement(HaveField("Status.LastDeletionError", "no deletion in progress (the operator restarted), retrying")))
		Expect(bucket.List(context.Background(), keys.Dir)).To(BeEmpty())
		expectAllTerminal(ns)
	})

	It("DeletionFailed: the deletion is retried and the backup goes once storage works", func() {
		ns := "restart-deletionfailed"
		namespaceWithConfigMap(ns)
		server := s3Location(ns, ns)
		createBackup(ns, "retried", ns)
		waitBackupPhase(ns, "retried", "Completed")

		server.Stop()
		w := watchBackups(ns)
		kubectlOK("delete", "backup", "retried", "-n", ns, "--wait=false")
		// Killed in DeletionFailed, after a few attempts (the backoff is 2 s by now).
		Eventually(func() *cairnv1.Backup {
			states := w.states("retried")
			if len(states) == 0 {
				return nil
			}
			return &states[len(states)-1]
		}).WithTimeout(60*time.Second).WithPolling(20*time.Millisecond).Should(And(
			HaveField("Status.Phase", cairnv1.BackupPhaseDeletionFailed),
			HaveField("Status.DeletionAttempts", BeNumerically(">=", 3)),
		), managerLog)
		killManager()
		// Almost always DeletionFailed; on a busy machine the kill may land in the few
		// milliseconds of the next retry's Deleting, which a restart must handle just as well.
		Expect(backupField(ns, "retried", "{.status.phase}")).To(BeElementOf("DeletionFailed", "Deleting"))

		server.Start()
		restartManager()
		_, stderr, err := kubectl("wait", "backup/retried", "-n", ns, "--for=delete", "--timeout=60s")
		Expect(err).NotTo(HaveOccurred(), "%s\nmanager log:\n%s", stderr, manager.log.String())
		Expect(bucketClient(server, ns).List(context.Background(), keysOf(ns, "retried").Dir)).To(BeEmpty())
		expectAllTerminal(ns)
	})
})

// createBackup creates a team backup of namespace (its own namespace only) in location, or in
// the default location when location is "".
func createBackup(namespace, name, location string) {
	GinkgoHelper()
	spec := "{}"
	if location != "" {
		spec = fmt.Sprintf("{storageLocation: %s}", location)
	}
	stderr, err := kubectlStdin(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: %s, namespace: %s}
spec: %s
`, name, namespace, spec), "apply", "-f", "-")
	Expect(err).NotTo(HaveOccurred(), stderr)
}

// backupField reads fields of a backup with a kubectl JSONPath template.
func backupField(namespace, name, template string) string {
	GinkgoHelper()
	return kubectlOK("get", "backup", name, "-n", namespace, "-o", "jsonpath="+template)
}

// expectAllTerminal checks that no backup of namespace is left in a non-terminal phase.
func expectAllTerminal(namespace string) {
	GinkgoHelper()
	out := kubectlOK("get", "backups", "-n", namespace, "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.phase}{"\n"}{end}`)
	for _, line := range strings.Fields(out) {
		name, phase, _ := strings.Cut(line, "=")
		Expect(cairnv1.BackupPhase(phase).IsTerminal()).To(BeTrue(), "backup %s/%s is %q", namespace, name, phase)
	}
}

// managerLog is the current manager's log, for failure messages.
func managerLog() string { return "manager log:\n" + manager.log.String() }

// keysOf is where a backup's objects are in the bucket of a location made by createS3Location.
func keysOf(namespace, name string) storage.BackupKeys {
	return storage.Layout{Prefix: "cluster"}.Backup(namespace, name)
}

// readLog reads a backup's gzipped log from a bucket.
func readLog(bucket *storage.S3, key string) string {
	GinkgoHelper()
	rc, err := bucket.Get(context.Background(), key)
	Expect(err).NotTo(HaveOccurred())
	defer rc.Close()
	gz, err := gzip.NewReader(rc)
	Expect(err).NotTo(HaveOccurred())
	data, err := io.ReadAll(gz)
	Expect(err).NotTo(HaveOccurred())
	return string(data)
}

// bigConfigMaps adds n ConfigMaps of about 900 KB of random (incompressible) text each to
// namespace. They are created with a client: kubectl apply would copy each into an annotation,
// which may not exceed 256 KB.
func bigConfigMaps(namespace string, n int) {
	GinkgoHelper()
	c, err := client.New(env.Config, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	for i := range n {
		data := make([]byte, 675<<10)
		_, _ = rand.Read(data)
		Expect(c.Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i), Namespace: namespace},
			Data:       map[string]string{"random": base64.StdEncoding.EncodeToString(data)},
		})).To(Succeed())
	}
}

// incompleteUploads lists the keys of the multipart uploads under prefix that were started and
// neither completed nor aborted: parts the bucket keeps (and bills) though no object shows them.
func incompleteUploads(server *testenv.S3Server, bucket, prefix string) []string {
	GinkgoHelper()
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(server.Endpoint()), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(server.AccessKey, server.SecretKey, "")})
	out, err := c.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &bucket, Prefix: &prefix})
	Expect(err).NotTo(HaveOccurred())
	keys := []string{}
	for _, u := range out.Uploads {
		keys = append(keys, aws.ToString(u.Key))
	}
	return keys
}

// proxiedS3Location starts a real S3 server with a bucket named name and a storage location
// named name that reaches it through a holdingProxy.
func proxiedS3Location(name string) (*testenv.S3Server, *holdingProxy) {
	GinkgoHelper()
	server := testenv.StartS3Server(GinkgoT())
	server.CreateBucket(name)
	proxy := startHoldingProxy(server.Endpoint())
	createS3Location(name, name, server, proxy.URL)
	return server, proxy
}

// holdingProxy stands between the manager and an S3 server and holds the requests that a hold
// matches: before they reach the server (storage never sees them), or after the server
// answered (storage did the work, the client never hears of it). A held request is never let
// through: when its hold ends it is dropped, so a request of a killed manager cannot land
// after the kill. Requests that no hold matches pass untouched.
type holdingProxy struct {
	URL   string
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	holds []*hold
}

// hold is one rule of a holdingProxy.
type hold struct {
	match       func(*http.Request) bool
	afterServer bool
	held        chan string
	ended       chan struct{}
	endOnce     sync.Once
}

// errDropped is what the proxy answers for a held request whose hold ended.
var errDropped = errors.New("held by the test's proxy and dropped")

func startHoldingProxy(target string) *holdingProxy {
	GinkgoHelper()
	u, err := url.Parse(target)
	Expect(err).NotTo(HaveOccurred())
	p := &holdingProxy{proxy: httputil.NewSingleHostReverseProxy(u)} // keeps the Host header, which SigV4 signed
	p.proxy.ModifyResponse = func(resp *http.Response) error {
		if h := p.matching(resp.Request, true); h != nil {
			h.wait(resp.Request)
			return errDropped
		}
		return nil
	}
	p.proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := p.matching(r, false); h != nil {
			h.wait(r)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		p.proxy.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	DeferCleanup(func() {
		p.mu.Lock()
		for _, h := range p.holds {
			h.end()
		}
		p.mu.Unlock()
		_ = srv.Close()
	})
	p.URL = "http://" + l.Addr().String()
	return p
}

// holdBefore holds the matching requests before they reach the server.
func (p *holdingProxy) holdBefore(match func(*http.Request) bool) *hold { return p.add(match, false) }

// holdAfter lets the matching requests reach the server and holds their answers.
func (p *holdingProxy) holdAfter(match func(*http.Request) bool) *hold { return p.add(match, true) }

func (p *holdingProxy) add(match func(*http.Request) bool, afterServer bool) *hold {
	h := &hold{match: match, afterServer: afterServer, held: make(chan string, 1), ended: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holds = append(p.holds, h)
	return h
}

// matching is the hold that applies to r at that stage, if any.
func (p *holdingProxy) matching(r *http.Request, afterServer bool) *hold {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.holds {
		select {
		case <-h.ended:
			continue
		default:
		}
		if h.afterServer == afterServer && h.match(r) {
			return h
		}
	}
	return nil
}

// wait reports r as held and blocks until the hold ends or r's client goes away.
func (h *hold) wait(r *http.Request) {
	select {
	case h.held <- r.Method + " " + r.URL.Path:
	default:
	}
	select {
	case <-h.ended:
	case <-r.Context().Done():
	}
}

// waitHeld waits until the hold holds a request: its client is now waiting on it.
func (h *hold) waitHeld() {
	GinkgoHelper()
	var req string
	Eventually(h.held).WithTimeout(60*time.Second).Should(Receive(&req), managerLog)
	fmt.Fprintf(GinkgoWriter, "holding %s\n", req)
}

// end stops holding: the requests held so far are dropped, later ones pass.
func (h *hold) end() { h.endOnce.Do(func() { close(h.ended) }) }

// request matches requests of method for one object of a bucket (path-style addressing).
func request(method, bucket, key string) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Method == method && r.URL.Path == "/"+bucket+"/"+key }
}

// writesUnder matches every write (not GET or HEAD) to objects of a bucket under dir.
func writesUnder(bucket, dir string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method != http.MethodGet && r.Method != http.MethodHead && strings.HasPrefix(r.URL.Path, "/"+bucket+"/"+dir)
	}
}
