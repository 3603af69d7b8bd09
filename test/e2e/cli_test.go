package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cairn-backup/cairn/internal/testenv"
)

// The cairn CLI as a user runs it: the real bin/cairn against the suite's manager, beside
// kubectl. Each spec has its own namespaces and names.

func cairnBinary() string { return filepath.Join(binDir(), "cairn") }

// cairnResult is what one run of bin/cairn did.
type cairnResult struct {
	stdout, stderr string
	code           int
}

// cairn runs bin/cairn with the suite's kubeconfig; its output is not a terminal.
func cairn(args ...string) cairnResult {
	GinkgoHelper()
	return cairnWith(kubeconfig, args...)
}

// cairnWith runs bin/cairn with a kubeconfig.
func cairnWith(config string, args ...string) cairnResult {
	GinkgoHelper()
	Expect(cairnBinary()).To(BeAnExistingFile(), "run 'make build' first")
	cmd := exec.Command(cairnBinary(), append([]string{"--kubeconfig", config}, args...)...)
	cmd.Dir = GinkgoT().TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cairnResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		Fail(fmt.Sprintf("running cairn: %v", err))
	}
	fmt.Fprintf(GinkgoWriter, "$ cairn %s (exit %d)\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// cairnOK runs bin/cairn and fails the spec unless it exits 0.
func cairnOK(args ...string) string {
	GinkgoHelper()
	r := cairn(args...)
	Expect(r.code).To(Equal(0), "cairn %v: %s%s\nmanager log:\n%s", args, r.stdout, r.stderr, manager.log.String())
	return r.stdout
}

// tarEntries lists the names in a tar.gz file.
func tarEntries(path string) []string {
	GinkgoHelper()
	f, err := os.Open(path)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	gz, err := gzip.NewReader(f)
	Expect(err).NotTo(HaveOccurred())
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		Expect(err).NotTo(HaveOccurred())
		names = append(names, h.Name)
	}
}

var _ = Describe("The cairn CLI", func() {
	It("backs up with --wait, shows, logs and downloads the backup, and restores it under another name with --wait", func() {
		const ns, copyNS, name = "e2e-cli-shop", "e2e-cli-shop-copy", "e2e-cli-shop"
		DeferCleanup(func() {
			for _, n := range []string{ns, copyNS} {
				_, _, _ = kubectl("delete", "namespace", n, "--wait=false", "--ignore-not-found")
			}
			_, _, _ = kubectl("delete", "restore", name, "-n", "cairn-system", "--wait=false", "--ignore-not-found")
			_, _, _ = kubectl("delete", "backup", name, "-n", "cairn-system", "--wait=false", "--ignore-not-found")
		})
		namespaceWithConfigMap(ns)

		out := cairnOK("backup", "create", name, "-n", "cairn-system", "--include-namespaces", ns, "--ttl", "24h", "--wait")
		// Not a terminal: plain lines, one for each phase and the items as they are done.
		Expect(out).To(ContainSubstring("Backup e2e-cli-shop created in namespace cairn-system; waiting"))
		Expect(out).To(MatchRegexp(`(?m)^InProgress$`))
		Expect(out).To(MatchRegexp(`(?m)^(\d+)/(\d+) items`))
		Expect(out).To(MatchRegexp(`(?m)^Completed$`))
		Expect(out).NotTo(ContainSubstring("\r"), "no bar when the output is not a terminal")
		Expect(kubectlOK("get", "backup", name, "-n", "cairn-system", "-o", "jsonpath={.status.phase}")).To(Equal("Completed"))

		By("listing it beside kubectl")
		header, rows := table(cairnOK("backup", "get", "-n", "cairn-system"))
		Expect(header).To(Equal([]string{"NAME", "PHASE", "QUEUE", "PROGRESS", "ERRORS", "WARNINGS", "LOCATION", "EXPIRES", "AGE", "ORIGIN"}))
		row := rowNamed(rows, name)
		Expect(row).To(And(HaveKeyWithValue("PHASE", "Completed"), HaveKeyWithValue("LOCATION", "default"), HaveKeyWithValue("ERRORS", "0")))
		Expect(row["EXPIRES"]).To(MatchRegexp(`^in (23|24)h$`))
		// One name is the object, as kubectl prints it; no name is the list.
		var one struct {
			Kind   string `json:"kind"`
			Status struct {
				Phase string `json:"phase"`
			} `json:"status"`
		}
		Expect(json.Unmarshal([]byte(cairnOK("backup", "get", name, "-n", "cairn-system", "-o", "json")), &one)).To(Succeed())
		Expect(one.Kind).To(Equal("Backup"))
		Expect(one.Status.Phase).To(Equal("Completed"))
		Expect(cairnOK("backup", "get", "-n", "cairn-system", "-o", "yaml")).To(ContainSubstring("kind: BackupList\n"))

		describe := cairnOK("backup", "describe", name, "-n", "cairn-system", "--details")
		Expect(describe).To(MatchRegexp(`Phase:\s+Completed`))
		Expect(describe).To(MatchRegexp(`Storage location:\s+default`))
		Expect(describe).To(MatchRegexp(`Archive:\s+.*SHA-256 [0-9a-f]{64}`))
		Expect(describe).To(ContainSubstring("Errors: none"))
		Expect(describe).To(ContainSubstring("- "+ns+"/settings"), "the resource list, read through a DownloadRequest")

		By("reading its log")
		Expect(cairnOK("backup", "logs", name, "-n", "cairn-system")).To(ContainSubstring("Backup started"))

		By("downloading the archive, checked against its checksum")
		dir := GinkgoT().TempDir()
		archive := filepath.Join(dir, "shop.tar.gz")
		out = cairnOK("backup", "download", name, "-n", "cairn-system", "-o", archive)
		sum := kubectlOK("get", "backup", name, "-n", "cairn-system", "-o", "jsonpath={.status.archiveSHA256}")
		Expect(out).To(ContainSubstring("its SHA-256 " + sum + " matches the backup's"))
		Expect(tarEntries(archive)).To(ContainElement("resources/configmaps/namespaces/" + ns + "/settings.json"))
		Expect(cairn("backup", "download", name, "-n", "cairn-system", "-o", archive).stderr).To(ContainSubstring("already exists"))
		Expect(kubectlOK("get", "downloadrequests", "-n", "cairn-system", "-o", "name")).To(BeEmpty(), "the CLI deletes its requests")

		By("restoring it under another name")
		out = cairnOK("restore", "create", name, "-n", "cairn-system", "--from-backup", name,
			"--namespace-mappings", ns+":"+copyNS, "--wait")
		Expect(out).To(MatchRegexp(`(?m)^Completed$`))
		Expect(kubectlOK("get", "configmap", "settings", "-n", copyNS, "-o", "jsonpath={.data.a}")).To(Equal("b"))
		header, rows = table(cairnOK("restore", "get", "-n", "cairn-system"))
		Expect(header).To(Equal([]string{"NAME", "BACKUP", "PHASE", "QUEUE", "PROGRESS", "ERRORS", "WARNINGS", "AGE"}))
		Expect(rowNamed(rows, name)).To(And(HaveKeyWithValue("BACKUP", name), HaveKeyWithValue("PHASE", "Completed")))
		Expect(cairnOK("restore", "describe", name, "-n", "cairn-system")).To(MatchRegexp(`Namespace mappings:\s+` + ns + ` → ` + copyNS))
		Expect(cairnOK("restore", "logs", name, "-n", "cairn-system")).NotTo(BeEmpty())

		By("deleting the backup and waiting until its data is gone")
		Expect(cairn("backup", "delete", name, "-n", "cairn-system").code).To(Equal(2), "no terminal, no --confirm: refused")
		Expect(cairnOK("backup", "delete", name, "-n", "cairn-system", "--confirm", "--wait")).To(ContainSubstring("Backup " + name + " deleted."))
		_, stderr, err := kubectl("get", "backup", name, "-n", "cairn-system")
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring("not found"))
		Expect(filepath.Join(storageDir, "backups", "cairn-system", name)).NotTo(BeADirectory())
	})

	It("explains a queued backup, cancels it, and reads a cancelled backup's log from s3 through the download server", func() {
		const ns = "e2e-cli-queue"
		server := testenv.StartS3Server(GinkgoT())
		server.CreateBucket("cli-queue")
		proxy := testenv.StartStallingProxy(GinkgoT(), server.Endpoint())
		createS3Location("e2e-cli-stall", "cli-queue", server, proxy.URL)
		namespaceWithConfigMap(ns)
		DeferCleanup(func() {
			proxy.Unstall()
			_, _, _ = kubectl("delete", "backup", "e2e-cli-hold", "e2e-cli-queued", "-n", "cairn-system", "--timeout=60s", "--ignore-not-found")
			_, _, _ = kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")
		})

		// Writes hang: the first backup cannot finish its upload; the second waits behind it.
		proxy.Stall()
		cairnOK("backup", "create", "e2e-cli-hold", "-n", "cairn-system", "--include-namespaces", ns, "--storage-location", "e2e-cli-stall")
		waitBackupPhase("cairn-system", "e2e-cli-hold", "InProgress")
		cairnOK("backup", "create", "e2e-cli-queued", "-n", "cairn-system", "--include-namespaces", ns, "--storage-location", "e2e-cli-stall")
		waitBackupPhase("cairn-system", "e2e-cli-queued", "Queued")
		var why string
		Eventually(func() string {
			why = kubectlOK("get", "backup", "e2e-cli-queued", "-n", "cairn-system", "-o", `jsonpath={.status.conditions[?(@.type=="Queued")].message}`)
			return why
		}).WithTimeout(30 * time.Second).ShouldNot(BeEmpty())

		describe := cairnOK("backup", "describe", "e2e-cli-queued", "-n", "cairn-system")
		Expect(describe).To(ContainSubstring("Queued (position 1 in the queue): " + why))
		_, rows := table(cairnOK("backup", "get", "-n", "cairn-system"))
		Expect(rowNamed(rows, "e2e-cli-queued")).To(And(HaveKeyWithValue("PHASE", "Queued"), HaveKeyWithValue("QUEUE", "1")))

		By("cancelling both")
		out := cairnOK("backup", "cancel", "e2e-cli-queued", "e2e-cli-hold", "-n", "cairn-system")
		Expect(out).To(ContainSubstring("Backup e2e-cli-queued is being cancelled."))
		waitBackupPhase("cairn-system", "e2e-cli-queued", "Failed")
		proxy.Unstall()
		waitBackupPhase("cairn-system", "e2e-cli-hold", "Failed")
		Expect(cairnOK("backup", "cancel", "e2e-cli-queued", "-n", "cairn-system")).To(ContainSubstring("already ended Failed: nothing to cancel"))

		By("reading the cancelled backup's log, which storage kept")
		Expect(cairnOK("backup", "logs", "e2e-cli-hold", "-n", "cairn-system")).To(ContainSubstring("Backup cancelled by user"))
		r := cairn("backup", "logs", "e2e-cli-queued", "-n", "cairn-system")
		Expect(r.code).To(Equal(1))
		// Cancelled while queued, it never ran: no file under its name is its own.
		Expect(r.stderr).To(ContainSubstring("Error: backup e2e-cli-queued has stored no files of its own (phase Failed)"))
	})

	It("creates, pauses, unpauses and deletes a schedule", func() {
		const name = "e2e-cli-nightly"
		DeferCleanup(func() { _, _, _ = kubectl("delete", "schedule", name, "-n", "cairn-system", "--ignore-not-found") })
		cairnOK("schedule", "create", name, "-n", "cairn-system", "--schedule", "0 3 * * *", "--include-namespaces", "e2e-cli-none", "--ttl", "168h")
		Expect(kubectlOK("get", "schedule", name, "-n", "cairn-system", "-o", "jsonpath={.spec.template.ttl}")).To(Equal("168h0m0s"))
		Eventually(func() string {
			return kubectlOK("get", "schedule", name, "-n", "cairn-system", "-o", "jsonpath={.status.nextBackup}")
		}).WithTimeout(30 * time.Second).ShouldNot(BeEmpty())
		Expect(cairnOK("schedule", "describe", name, "-n", "cairn-system")).To(MatchRegexp(`Next backup:\s+\d{4}-\d\d-\d\dT03:00:00Z \(in `))
		Expect(cairnOK("schedule", "get", "-n", "cairn-system")).To(MatchRegexp(name + `\s+0 3 \* \* \*\s+Enabled\s+false`))

		By("labelling a schedule's backups with --backup-labels")
		const labelled = "e2e-cli-labelled"
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "schedule", labelled, "-n", "cairn-system", "--ignore-not-found")
			_, _, _ = kubectl("delete", "backups", "-n", "cairn-system", "-l", "cairn.dev/schedule-name="+labelled, "--wait=false")
		})
		cairnOK("schedule", "create", labelled, "-n", "cairn-system", "--schedule", "@every 2s", "--include-namespaces", "e2e-cli-none", "--backup-labels", "tier=gold")
		Eventually(func() string {
			return kubectlOK("get", "backups", "-n", "cairn-system", "-l", "cairn.dev/schedule-name="+labelled+",tier=gold", "-o", "name")
		}).WithTimeout(30*time.Second).ShouldNot(BeEmpty(), "a run of the schedule carries the template's label")
		cairnOK("schedule", "pause", labelled, "-n", "cairn-system")

		Expect(cairnOK("schedule", "pause", name, "-n", "cairn-system")).To(ContainSubstring("Schedule " + name + " paused."))
		Expect(kubectlOK("get", "schedule", name, "-n", "cairn-system", "-o", "jsonpath={.spec.paused}")).To(Equal("true"))
		Expect(cairnOK("schedule", "describe", name, "-n", "cairn-system")).To(MatchRegexp(`Next backup:\s+<paused>`))
		cairnOK("schedule", "unpause", name, "-n", "cairn-system", "--skip-immediately")
		Expect(kubectlOK("get", "schedule", name, "-n", "cairn-system", "-o", "jsonpath={.spec.paused}/{.spec.skipImmediately}")).To(Equal("false/true"))
		cairnOK("schedule", "delete", name, "-n", "cairn-system", "--confirm")
		_, _, err := kubectl("get", "schedule", name, "-n", "cairn-system")
		Expect(err).To(HaveOccurred())
	})

	It("lets a user with only a namespaced Role work in that namespace (--as), and refuses the rest, her downloads included", func() {
		const ns, user = "e2e-cli-team", "e2e-cli-alice"
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "backup", "mine", "-n", ns, "--timeout=60s", "--ignore-not-found")
			_, _, _ = kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")
		})
		namespaceWithConfigMap(ns)
		kubectlOK("apply", "-f", filepath.Join(testenv.RepoRoot(), "config", "rbac", "backup_user_roles.yaml"))
		kubectlOK("create", "rolebinding", "alice-backups", "-n", ns, "--clusterrole=cairn-backup-editor", "--user="+user)
		// Her backup holds what she may read there (DESIGN.md section 15): ConfigMaps.
		kubectlOK("create", "role", "configmap-reader", "-n", ns, "--verb=get,list", "--resource=configmaps")
		kubectlOK("create", "rolebinding", "alice-configmaps", "-n", ns, "--role=configmap-reader", "--user="+user)

		out := cairnOK("--as", user, "-n", ns, "backup", "create", "mine", "--wait")
		Expect(out).To(MatchRegexp(`(?m)^Completed$`))
		Expect(cairnOK("--as", user, "-n", ns, "backup", "describe", "mine")).To(MatchRegexp(`Phase:\s+Completed`))

		By("being refused her team's download URLs: the admin's certificate impersonating her is no token of hers")
		// A download URL in a team's namespace serves only its requester's own token (DESIGN.md
		// section 21; docs/cli.md, "The limit"); test/e2e/download_test.go downloads with one.
		for _, args := range [][]string{{"backup", "logs", "mine"}, {"backup", "download", "mine", "-o", filepath.Join(GinkgoT().TempDir(), "mine.tar.gz")}} {
			r := cairn(append([]string{"--as", user, "-n", ns}, args...)...)
			Expect(r.code).To(Equal(1), "%v", args)
			Expect(r.stderr).To(ContainSubstring("403 Forbidden: this download URL serves only "+user), "%v", args)
			Expect(r.stderr).To(ContainSubstring("--as is not sent to it"), "%v", args)
		}

		By("being refused elsewhere, with the verb and resource named")
		r := cairn("--as", user, "-n", "cairn-system", "backup", "get")
		Expect(r.code).To(Equal(1))
		Expect(r.stderr).To(ContainSubstring(`Error: permission denied: backups.cairn.dev is forbidden: User "` + user + `" cannot list resource "backups" in API group "cairn.dev" in the namespace "cairn-system"`))
		r = cairn("--as", user, "-n", "cairn-system", "backup", "create", "theirs")
		Expect(r.code).To(Equal(1))
		Expect(r.stderr).To(ContainSubstring(`cannot create resource "backups"`))

		By("being told when a name does not exist")
		r = cairn("--as", user, "-n", ns, "backup", "describe", "nope")
		Expect(r.code).To(Equal(1))
		Expect(r.stderr).To(Equal("Error: backup \"nope\" not found in namespace " + ns + "\n"))
	})

	It("says Cairn is not installed on a cluster without its CRDs", func() {
		bare := &envtest.Environment{BinaryAssetsDirectory: testenv.AssetsDir()}
		_, err := bare.Start()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(bare.Stop()).To(Succeed()) })
		user, err := bare.AddUser(envtest.User{Name: "e2e-cli-bare", Groups: []string{"system:masters"}}, nil)
		Expect(err).NotTo(HaveOccurred())
		data, err := user.KubeConfig()
		Expect(err).NotTo(HaveOccurred())
		config := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
		Expect(os.WriteFile(config, data, 0o600)).To(Succeed())

		for _, args := range [][]string{{"backup", "get"}, {"backup", "create", "b1", "--wait"}, {"schedule", "describe", "s"}} {
			r := cairnWith(config, append([]string{"-n", "default"}, args...)...)
			Expect(r.code).To(Equal(1), "%v", args)
			Expect(r.stderr).To(Equal("Error: the cluster does not know Cairn's resources (cairn.dev/v1alpha1): is Cairn installed?\n"), "%v", args)
		}
		r := cairnWith(config, "version")
		Expect(r.code).To(Equal(0))
		Expect(r.stdout).To(ContainSubstring("Cairn API: not installed"))
	})

	It("says what is wrong without a kubeconfig, and reports the versions", func() {
		cmd := exec.Command(cairnBinary(), "backup", "get")
		cmd.Env = []string{"HOME=" + GinkgoT().TempDir(), "KUBECONFIG=" + filepath.Join(GinkgoT().TempDir(), "none")}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		Expect(errors.As(err, &exit)).To(BeTrue())
		Expect(exit.ExitCode()).To(Equal(1))
		Expect(stderr.String()).To(Equal("Error: no cluster configuration: set KUBECONFIG, pass --kubeconfig, or run inside a cluster\n"))

		out := cairnOK("version")
		Expect(out).To(MatchRegexp(`Client: \S+`))
		Expect(out).To(ContainSubstring("Kubernetes: v" + testenv.KubeVersion))
		Expect(out).To(ContainSubstring("Cairn API: cairn.dev/v1alpha1"))

		By("running as the kubectl plugin kubectl-cairn")
		plugins := GinkgoT().TempDir()
		Expect(os.Symlink(cairnBinary(), filepath.Join(plugins, "kubectl-cairn"))).To(Succeed())
		cmd = exec.Command(kubectlBinary(), "cairn", "version", "--kubeconfig", kubeconfig)
		cmd.Env = []string{"HOME=" + GinkgoT().TempDir(), "PATH=" + plugins}
		plugin, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(plugin))
		Expect(string(plugin)).To(ContainSubstring("Cairn API: cairn.dev/v1alpha1"))
		cmd = exec.Command(kubectlBinary(), "cairn", "--help")
		cmd.Env = []string{"HOME=" + GinkgoT().TempDir(), "PATH=" + plugins}
		plugin, err = cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(plugin))
		Expect(string(plugin)).To(ContainSubstring("kubectl cairn [command]"))
	})
})
