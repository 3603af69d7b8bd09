package e2e

import (
	"bytes"
	"errors"
	"fmt"
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
		kubectlOK("create", "configmap", "e2e-config", "-n", "default", "--from-literal=k=v")
		out := kubectlOK("apply", "-f", "config/samples/")
		Expect(out).To(ContainSubstring("backup.cairn.dev/nightly-example created"))
		Expect(out).To(ContainSubstring("backup.cairn.dev/team-example created"))
		Expect(out).To(ContainSubstring("backupstoragelocation.cairn.dev/s3-example created"))
		Expect(out).To(ContainSubstring("backupstoragelocation.cairn.dev/archive-example created"))
	})

	It("runs the sample backups to Completed and writes a restorable archive", func() {
		waitBackupPhase("cairn-system", "nightly-example", "Completed")
		waitBackupPhase("default", "team-example", "Completed")

		dir := filepath.Join(storageDir, "backups", "cairn-system", "nightly-example")
		Expect(filepath.Join(dir, "cairn-backup.json")).To(BeAnExistingFile())
		Expect(filepath.Join(dir, "nightly-example-logs.gz")).To(BeAnExistingFile())
		out, err := exec.Command("tar", "tzf", filepath.Join(dir, "nightly-example.tar.gz")).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		entries := strings.Fields(string(out))
		Expect(entries).To(ContainElements(
			"metadata/version",
			"resources/configmaps/namespaces/default/e2e-config.json",
			"resources/namespaces/cluster/default.json",
			"resources/backups.cairn.dev/namespaces/default/team-example.json",
			"resources/customresourcedefinitions.apiextensions.k8s.io/cluster/backups.cairn.dev.json",
		))
		for _, e := range entries {
			Expect(e).NotTo(HavePrefix("resources/events"), "events are excluded by the sample")
		}
		// The team's backup holds only its own namespace, and no cluster-scoped items.
		teamArchive := filepath.Join(storageDir, "backups", "default", "team-example", "team-example.tar.gz")
		out, err = exec.Command("tar", "tzf", teamArchive).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(strings.Fields(string(out))).To(ConsistOf("metadata/version", "resources/configmaps/namespaces/default/e2e-config.json"))
	})

	It("prints the Phase, Queue, Progress, Location and Age columns", func() {
		out := kubectlOK("get", "backups", "-A")
		header, rows := table(out)
		Expect(header).To(Equal([]string{"NAMESPACE", "NAME", "PHASE", "QUEUE", "PROGRESS", "LOCATION", "AGE"}))
		samples := 0
		for _, r := range rows {
			if r["NAME"] != "nightly-example" && r["NAME"] != "team-example" {
				continue // other specs' backups
			}
			samples++
			Expect(r).To(And(HaveKeyWithValue("PHASE", "Completed"), HaveKeyWithValue("QUEUE", ""), HaveKeyWithValue("LOCATION", "default")))
			Expect(r["PROGRESS"]).To(MatchRegexp(`^([1-9][0-9]*)/([1-9][0-9]*)$`))
		}
		Expect(samples).To(Equal(2))
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

	It("fails a backup created cancelled without running it", func() {
		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata:
  name: never
  namespace: cairn-system
spec:
  cancel: true
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitBackupPhase("cairn-system", "never", "Failed")
		Expect(kubectlOK("get", "backup", "never", "-n", "cairn-system", "-o", "jsonpath={.status.failureReason}")).To(Equal("Backup cancelled by user"))
		Expect(filepath.Join(storageDir, "backups", "cairn-system", "never")).NotTo(BeADirectory())
	})

	It("accepts cancel: true, then rejects cancel: false", func() {
		out := kubectlOK("patch", "backup", "team-example", "-n", "default", "--type", "merge",
			"-p", `{"spec":{"cancel":true}}`)
		Expect(out).To(ContainSubstring("backup.cairn.dev/team-example patched"))
		Expect(kubectlOK("get", "backup", "team-example", "-n", "default", "-o", "jsonpath={.spec.cancel}")).To(Equal("true"))

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

// waitBackupPhase waits with kubectl for a backup's phase; on failure it shows the backup and
// the manager's log.
func waitBackupPhase(namespace, name, phase string) {
	GinkgoHelper()
	_, stderr, err := kubectl("wait", "backup/"+name, "-n", namespace, "--for=jsonpath={.status.phase}="+phase, "--timeout=60s")
	if err != nil {
		yaml, _, _ := kubectl("get", "backup", name, "-n", namespace, "-o", "yaml")
		Fail(fmt.Sprintf("backup %s/%s did not reach %s: %s\n%s\nmanager log:\n%s", namespace, name, phase, stderr, yaml, manager.log.String()))
	}
}
