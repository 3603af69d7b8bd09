package e2e

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cairn-backup/cairn/internal/testenv"
)

var _ = Describe("Cairn's API through kubectl", Ordered, func() {
	It("applies the samples", func() {
		out := kubectlOK("apply", "-f", "config/samples/")
		Expect(out).To(ContainSubstring("backup.cairn.dev/nightly-example created"))
		Expect(out).To(ContainSubstring("backup.cairn.dev/team-example created"))
		Expect(out).To(ContainSubstring("backupstoragelocation.cairn.dev/s3-example created"))
		Expect(out).To(ContainSubstring("backupstoragelocation.cairn.dev/archive-example created"))
	})

	It("queues the sample backups and prints the Phase, Queue, Progress, Location and Age columns", func() {
		// nightly-example selects default and team-*; team-example (in default) selects default:
		// they overlap, so the second waits.
		kubectlOK("wait", "backup/nightly-example", "-n", "cairn-system", "--for=jsonpath={.status.phase}=ReadyToStart", "--timeout=30s")
		kubectlOK("wait", "backup/team-example", "-n", "default", "--for=jsonpath={.status.queuePosition}=1", "--timeout=30s")
		// Progress is written by the backup runner; write some here to see the column.
		kubectlOK("patch", "backup", "nightly-example", "-n", "cairn-system", "--subresource", "status",
			"--type", "merge", "-p", `{"status":{"progress":{"totalItems":10,"itemsBackedUp":3,"summary":"3/10"}}}`)

		out := kubectlOK("get", "backups", "-A")
		header, rows := table(out)
		Expect(header).To(Equal([]string{"NAMESPACE", "NAME", "PHASE", "QUEUE", "PROGRESS", "LOCATION", "AGE"}))
		Expect(rows).To(HaveLen(2))
		byName := map[string]map[string]string{}
		for _, r := range rows {
			byName[r["NAME"]] = r
		}
		Expect(byName["nightly-example"]).To(And(HaveKeyWithValue("PHASE", "ReadyToStart"), HaveKeyWithValue("QUEUE", ""),
			HaveKeyWithValue("PROGRESS", "3/10"), HaveKeyWithValue("LOCATION", "default")))
		Expect(byName["team-example"]).To(And(HaveKeyWithValue("PHASE", "Queued"), HaveKeyWithValue("QUEUE", "1"),
			HaveKeyWithValue("PROGRESS", ""), HaveKeyWithValue("LOCATION", "default")))
		Expect(kubectlOK("get", "backup", "team-example", "-n", "default", "-o",
			`jsonpath={.status.conditions[?(@.type=="Queued")].message}`)).To(Equal("namespace default overlaps running backup cairn-system/nightly-example"))

		out = kubectlOK("get", "bk", "-A")
		Expect(out).To(ContainSubstring("team-example"))
		out = kubectlOK("get", "bsl", "-n", "cairn-system")
		Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(Equal([]string{"NAME", "PROVIDER", "PHASE", "DEFAULT", "ACCESS", "LAST", "VALIDATED", "AGE"}))
	})

	It("rejects a spec change with the CEL rule's message", func() {
		_, stderr, err := kubectl("patch", "backup", "nightly-example", "-n", "cairn-system", "--type", "merge",
			"-p", `{"spec":{"ttl":"1h"}}`)
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring("spec is immutable after the backup is created: only spec.cancel may be changed, from false to true"))

		// Re-applying an edited manifest is a spec change too.
		edited := strings.Replace(readSample("cairn_v1alpha1_backup_team.yaml"), "configmaps", "secrets", 1)
		stderr, err = kubectlStdin(edited, "apply", "-f", "-")
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring("spec is immutable"))
	})

	It("accepts cancel: true on a queued backup, which fails at once, then rejects cancel: false", func() {
		out := kubectlOK("patch", "backup", "team-example", "-n", "default", "--type", "merge",
			"-p", `{"spec":{"cancel":true}}`)
		Expect(out).To(ContainSubstring("backup.cairn.dev/team-example patched"))
		Expect(kubectlOK("get", "backup", "team-example", "-n", "default", "-o", "jsonpath={.spec.cancel}")).To(Equal("true"))
		kubectlOK("wait", "backup/team-example", "-n", "default", "--for=jsonpath={.status.phase}=Failed", "--timeout=30s")
		Expect(kubectlOK("get", "backup", "team-example", "-n", "default", "-o", "jsonpath={.status.failureReason}")).To(Equal("Backup cancelled by user"))

		_, stderr, err := kubectl("patch", "backup", "team-example", "-n", "default", "--type", "merge",
			"-p", `{"spec":{"cancel":false}}`)
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring("spec.cancel cannot be changed back to false: a cancelled backup stays cancelled"))
	})

	It("rejects a storage location without what its provider needs", func() {
		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata:
  name: broken
  namespace: cairn-system
spec:
  provider: s3
`, "apply", "-f", "-")
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring("an s3 location needs objectStorage.bucket"))
	})
})

var _ = Describe("The manager binary", func() {
	It("serves /healthz, /readyz and the controller-runtime metrics", func() {
		Expect(httpStatus("http://" + manager.probeAddr + "/healthz")).To(Equal(http.StatusOK))
		Expect(httpStatus("http://" + manager.probeAddr + "/readyz")).To(Equal(http.StatusOK))
		resp, err := http.Get("http://" + manager.metricsAddr + "/metrics")
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(body)).To(ContainSubstring("controller_runtime_reconcile_total"))
	})

	DescribeTable("exits non-zero with a one-line message naming a bad flag",
		func(flag, want string) {
			cmd := exec.Command(managerBinary(), "--kubeconfig", kubeconfig, flag)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			done := make(chan error, 1)
			Expect(cmd.Start()).To(Succeed())
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Signal(syscall.SIGKILL)
				Fail("the manager did not exit on " + flag)
			}
			var exit *exec.ExitError
			Expect(errors.As(err, &exit)).To(BeTrue(), "want a non-zero exit, got %v", err)
			Expect(exit.ExitCode()).NotTo(BeZero())
			msg := strings.TrimSpace(stderr.String())
			Expect(strings.Count(msg, "\n")).To(BeZero(), "want one line, got %q", msg)
			Expect(msg).To(ContainSubstring(want))
		},
		Entry("--concurrent-backups=0", "--concurrent-backups=0", "invalid value 0 for --concurrent-backups: must be at least 1"),
		Entry("--item-block-worker-count=0", "--item-block-worker-count=0", "invalid value 0 for --item-block-worker-count: must be at least 1"),
		Entry("--concurrent-backups=many", "--concurrent-backups=many", "concurrent-backups"),
	)
})

func readSample(name string) string {
	GinkgoHelper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "samples", name))
	Expect(err).NotTo(HaveOccurred())
	return string(data)
}

func kubectlStdin(stdin string, args ...string) (stderr string, err error) {
	cmd := exec.Command(kubectlBinary(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stderr = &out
	err = cmd.Run()
	return out.String(), err
}

// table splits kubectl's table output into its header and rows, reading each cell at its
// column's offset in the header, so that empty cells stay empty.
func table(out string) (header []string, rows []map[string]string) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	head := lines[0]
	var starts []int
	for i := 0; i < len(head); i++ {
		if head[i] != ' ' && (i == 0 || head[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	header = strings.Fields(head)
	for _, line := range lines[1:] {
		row := map[string]string{}
		for c, start := range starts {
			end := len(line)
			if c+1 < len(starts) && starts[c+1] < end {
				end = starts[c+1]
			}
			cell := ""
			if start < len(line) {
				cell = strings.TrimSpace(line[start:end])
			}
			row[header[c]] = cell
		}
		rows = append(rows, row)
	}
	return header, rows
}
