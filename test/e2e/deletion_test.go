package e2e

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cairn-backup/cairn/internal/storage"
)

// Deleting with `kubectl delete` while the S3 server is down: the backup shows DeletionFailed
// and the error, and goes once the server is back, leaving nothing in the bucket.
var _ = Describe("Deleting a backup with kubectl delete", func() {
	It("shows DeletionFailed while the S3 server is down, and removes everything once it is back", func() {
		server := s3Location("s3-delete", "delete-e2e")
		namespaceWithConfigMap("delete-e2e")
		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: doomed, namespace: cairn-system}
spec:
  includedNamespaces: [delete-e2e]
  storageLocation: s3-delete
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitBackupPhase("cairn-system", "doomed", "Completed")
		Expect(kubectlOK("get", "backup", "doomed", "-n", "cairn-system", "-o", "jsonpath={.metadata.finalizers}")).To(ContainSubstring("cairn.dev/backup-data"))
		bucket := bucketClient(server, "delete-e2e")
		keys := storage.Layout{Prefix: "cluster"}.Backup("cairn-system", "doomed")
		Expect(bucket.List(context.Background(), keys.Dir)).To(ContainElement(keys.Metadata))

		server.Stop()
		Expect(kubectlOK("delete", "backup", "doomed", "-n", "cairn-system", "--wait=false")).To(ContainSubstring("deleted"))
		waitBackupPhase("cairn-system", "doomed", "DeletionFailed")
		Eventually(func() string {
			out, _, _ := kubectl("get", "backup", "doomed", "-n", "cairn-system", "-o", "wide")
			return out
		}).WithTimeout(30 * time.Second).Should(And(ContainSubstring("DeletionFailed"), ContainSubstring("DELETION ERROR"), ContainSubstring("connection refused")))

		server.Start()
		_, stderr, err = kubectl("wait", "backup/doomed", "-n", "cairn-system", "--for=delete", "--timeout=60s")
		Expect(err).NotTo(HaveOccurred(), stderr)
		Expect(bucket.List(context.Background(), keys.Dir)).To(BeEmpty())
		all, err := bucket.List(context.Background(), "")
		Expect(err).NotTo(HaveOccurred())
		for _, key := range all {
			Expect(strings.Contains(key, "doomed")).To(BeFalse(), "left in the bucket: %s", key)
		}
	})
})
