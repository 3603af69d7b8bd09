package e2e

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// s3Location starts a real S3 server with a bucket and creates a storage location (with its
// credential Secret) for it, removed when the spec ends; it waits until the location is Available.
func s3Location(name, bucket string) *testenv.S3Server {
	GinkgoHelper()
	server := testenv.StartS3Server(GinkgoT())
	server.CreateBucket(bucket)
	createS3Location(name, bucket, server, server.Endpoint())
	return server
}

// createS3Location creates a storage location for a bucket of server, reached at endpoint.
func createS3Location(name, bucket string, server *testenv.S3Server, endpoint string) {
	GinkgoHelper()
	credentials := filepath.Join(GinkgoT().TempDir(), "cloud")
	Expect(os.WriteFile(credentials, []byte(server.CredentialsFile()), 0o600)).To(Succeed())
	kubectlOK("create", "secret", "generic", name, "-n", "cairn-system", "--from-file=cloud="+credentials)
	DeferCleanup(func() { kubectlOK("delete", "secret", name, "-n", "cairn-system") })
	stderr, err := kubectlStdin(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata: {name: %s, namespace: cairn-system}
spec:
  provider: s3
  objectStorage: {bucket: %s, prefix: cluster}
  config: {endpoint: %q, region: us-east-1, forcePathStyle: "true"}
  credential: {name: %s, key: cloud}
`, name, bucket, endpoint, name), "apply", "-f", "-")
	Expect(err).NotTo(HaveOccurred(), stderr)
	DeferCleanup(func() { kubectlOK("delete", "backupstoragelocation", name, "-n", "cairn-system") })
	_, stderr, err = kubectl("wait", "backupstoragelocation/"+name, "-n", "cairn-system",
		"--for=jsonpath={.status.phase}=Available", "--timeout=60s")
	Expect(err).NotTo(HaveOccurred(), stderr)
}

// namespaceWithConfigMap creates a namespace holding one ConfigMap, something to back up.
func namespaceWithConfigMap(name string) {
	GinkgoHelper()
	stderr, err := kubectlStdin(fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: %[1]s}
data: {a: b}
`, name), "apply", "-f", "-")
	Expect(err).NotTo(HaveOccurred(), stderr)
}

// bucketClient reads a bucket of the server directly, as a user with the credentials would.
func bucketClient(server *testenv.S3Server, bucket string) *storage.S3 {
	GinkgoHelper()
	s3, err := storage.NewS3(storage.S3Config{Bucket: bucket, Region: "us-east-1", Endpoint: server.Endpoint(), ForcePathStyle: true,
		Credentials: storage.S3Credentials{AccessKeyID: server.AccessKey, SecretAccessKey: server.SecretKey}})
	Expect(err).NotTo(HaveOccurred())
	return s3
}

// Cancelling with `kubectl patch`: a backup stuck uploading to an S3 server whose writes hang,
// and one queued behind it. The S3 server is real (versitygw on 127.0.0.1); its writes hang in a
// testenv.StallingProxy in front of it.
var _ = Describe("Cancelling backups with kubectl patch", func() {
	It("fails a Queued and an InProgress backup; the InProgress one keeps only its log, which is downloadable", func() {
		server := testenv.StartS3Server(GinkgoT())
		server.CreateBucket("cancel-e2e")
		proxy := testenv.StartStallingProxy(GinkgoT(), server.Endpoint())
		createS3Location("s3-cancel", "cancel-e2e", server, proxy.URL)
		namespaceWithConfigMap("cancel-e2e")

		// Writes hang from now on: the first backup cannot finish its upload, and the second
		// waits in the queue behind it (one backup at a time).
		proxy.Stall()
		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: stuck, namespace: cairn-system}
spec:
  includedNamespaces: [cancel-e2e]
  storageLocation: s3-cancel
---
apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: waiting, namespace: cairn-system}
spec:
  includedNamespaces: [cancel-e2e]
  storageLocation: s3-cancel
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitBackupPhase("cairn-system", "stuck", "InProgress")
		waitBackupPhase("cairn-system", "waiting", "Queued")

		Expect(kubectlOK("patch", "backup", "waiting", "-n", "cairn-system", "--type", "merge", "-p", `{"spec":{"cancel":true}}`)).
			To(ContainSubstring("patched"))
		waitBackupPhase("cairn-system", "waiting", "Failed")
		Expect(kubectlOK("get", "backup", "waiting", "-n", "cairn-system", "-o", "jsonpath={.status.failureReason}")).To(Equal("Backup cancelled by user"))

		Expect(kubectlOK("patch", "backup", "stuck", "-n", "cairn-system", "--type", "merge", "-p", `{"spec":{"cancel":true}}`)).
			To(ContainSubstring("patched"))
		// The upload stopped, but writes still hang: the cleanup cannot run yet, and the backup
		// says why instead of claiming to be done.
		waitBackupPhase("cairn-system", "stuck", "FinalizingCancelled")
		Eventually(func() string {
			out, _, _ := kubectl("get", "backup", "stuck", "-n", "cairn-system",
				"-o", `jsonpath={.status.conditions[?(@.type=="Cancelled")].reason}`)
			return out
		}).WithTimeout(60 * time.Second).Should(Equal("CleanupFailed"))

		proxy.Unstall()
		_, stderr, err = kubectl("wait", "backup/stuck", "-n", "cairn-system", "--for=jsonpath={.status.phase}=Failed", "--timeout=90s")
		Expect(err).NotTo(HaveOccurred(), stderr)
		Expect(kubectlOK("get", "backup", "stuck", "-n", "cairn-system", "-o", "jsonpath={.status.failureReason}")).To(Equal("Backup cancelled by user"))
		Expect(kubectlOK("get", "backup", "stuck", "-n", "cairn-system",
			"-o", `jsonpath={.status.conditions[?(@.type=="Cancelled")].status}`)).To(Equal("True"))

		// What is left in the bucket is the log, and it says who cancelled.
		s3 := bucketClient(server, "cancel-e2e")
		keys := storage.Layout{Prefix: "cluster"}.Backup("cairn-system", "stuck")
		Expect(s3.List(context.Background(), keys.Dir)).To(Equal([]string{keys.Logs}))
		rc, err := s3.Get(context.Background(), keys.Logs)
		Expect(err).NotTo(HaveOccurred())
		defer rc.Close()
		gz, err := gzip.NewReader(rc)
		Expect(err).NotTo(HaveOccurred())
		log, err := io.ReadAll(gz)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(log)).To(ContainSubstring(`field manager \"kubectl-patch\"`))
		Expect(strings.Count(string(log), "Backup cancelled by user")).To(BeNumerically(">=", 1))
		Expect(s3.List(context.Background(), storage.Layout{Prefix: "cluster"}.Backup("cairn-system", "waiting").Dir)).To(BeEmpty())

		// Deleting them removes the log too.
		kubectlOK("delete", "backup", "stuck", "waiting", "-n", "cairn-system", "--timeout=60s")
		Expect(s3.List(context.Background(), keys.Dir)).To(BeEmpty())
	})
})
