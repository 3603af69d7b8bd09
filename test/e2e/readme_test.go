package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cairn-backup/cairn/internal/testenv"
)

// The README and docs/tour.md promise that their tours run as written. This spec runs every
// ```sh block of docs/tour.md's section tourHeading, in order, each in its own bash, against a
// fresh local control plane and manager of its own, and checks the output shown for it. The
// README's shorter tour is blocks of that one, word for word and in the same order
// (TestReadmeTourIsPartOfTheTour), so this run runs them as written too.
//
// How "as written" is bent, all of it:
//   - The first block, `make run-local`, is replaced by what it does (hack/local-up.sh up,
//     then bin/manager as the Makefile runs it) with free ports, see startTourControlPlane.
//   - The blocks run in a temporary directory laid out like the repository (config/ and hack/
//     link to the repository's, bin/manager and bin/cairn to the built binaries), so that
//     bin/local, bin/local-b and the files the tour downloads are the test's own, never a
//     developer's: no path in the tour is rewritten.
//   - Each block runs in a fresh bash, so what a reader's terminal keeps from one block to
//     the next comes from the environment: KUBECONFIG as the tour exports it, and PATH with
//     bin/ first (as the tour's CLI section exports it), then the envtest binaries (kubectl).
//   - The fixed ports of the disaster-recovery block become free ports: tourPortRewrites.
const tourHeading = "## The tour"

// tourFile is the file of the tour this spec runs; readmeHeading is the README's tour section.
const (
	tourFile      = "docs/tour.md"
	readmeHeading = "## A five-minute tour"
)

// tourPortRewrites are the ports the tour's blocks name; each becomes a free port, so that a
// developer's second control plane, or another test's, is never touched.
var tourPortRewrites = []string{"26443", "22379", "22380", "26257", "28086", "28080", "28081"}

// tourShows is one piece of output the README shows for a block: Shown is the text as the
// README has it (in a `# ...` comment or the output block after the commands), Output the
// regular expression the block's output must match, when Shown cannot be matched literally
// (a table with an AGE column, a message the README wraps over two comment lines).
type tourShows struct {
	Shown  string
	Output string
}

// tourStep is what the spec checks for the block whose script contains Marker.
type tourStep struct {
	Marker string
	// Fails says the block's last command fails, as the README shows: the block runs without
	// `-e` and must exit non-zero. Every other block runs with `bash -euo pipefail` and must
	// exit 0.
	Fails bool
	// Settles says the output shows what the manager does in the background (an event it
	// records), which a reader typing the block sees but a script may run ahead of: the block,
	// idempotent, runs again for up to tourSettleTimeout until its output shows it.
	Settles bool
	Shows   []tourShows
}

// tourSettleTimeout bounds how long a Settles block is run again.
const tourSettleTimeout = 30 * time.Second

// pattern is the regular expression the output must match.
func (s tourShows) pattern() string {
	if s.Output != "" {
		return s.Output
	}
	return regexp.QuoteMeta(s.Shown)
}

// shows says whether a block's output shows everything the README shows for it.
func (step tourStep) shows(run tourRun) bool {
	for _, shows := range step.Shows {
		if !regexp.MustCompile(shows.pattern()).MatchString(run.stdout + "\n" + run.stderr) {
			return false
		}
	}
	return true
}

// literal is a tourShows matched as it is written.
func literal(texts ...string) []tourShows {
	shows := make([]tourShows, len(texts))
	for i, text := range texts {
		shows[i] = tourShows{Shown: text}
	}
	return shows
}

// tourSteps are the checks of the tour's blocks; a block no step names must exit 0.
var tourSteps = []tourStep{
	{Marker: "kubectl get backupstoragelocations", Shows: []tourShows{
		{Shown: "default   filesystem   Available   true      ReadWrite", Output: `default\s+filesystem\s+Available\s+true\s+ReadWrite`},
	}},
	{Marker: "name: first", Shows: []tourShows{
		// How many objects the default namespace holds depends on what the control plane's
		// controllers have written by then (the ServiceAccount, the kubernetes Endpoints: CI
		// once found 4), so any count of items stands for the README's 3/3.
		{Shown: "cairn-system   first   Completed           3/3        default", Output: `cairn-system\s+first\s+Completed\s+(\d+)/(\d+)\s+default`},
	}},
	{Marker: `conditions[?(@.type=="Queued")]`, Shows: literal("Dequeued without waiting")},
	{Marker: "tar tzf bin/local/storage/backups/cairn-system/first/first.tar.gz", Shows: []tourShows{
		{Shown: "metadata/version"},
		{Shown: "resources/namespaces/cluster/default.json"},
		{Shown: "resources/services/namespaces/default/kubernetes.json"},
		{Shown: "cairn-backup.json  first-logs.gz  first-resource-list.json.gz  first-results.json.gz  first.tar.gz",
			Output: `cairn-backup\.json\s+first-logs\.gz\s+first-resource-list\.json\.gz\s+first-results\.json\.gz\s+first\.tar\.gz`},
	}},
	{Marker: "backup/sneaky", Shows: []tourShows{
		{Shown: `FailedValidation: ["spec.includedNamespaces: a backup in namespace team-a may only back up`},
		{Shown: `its own namespace, not \"kube-system\" (only backups in cairn-system may select other namespaces)"]`},
	}},
	{Marker: `{"spec":{"ttl":"1h"}}`, Fails: true, Shows: literal(
		`The Backup "first" is invalid: spec: Invalid value: spec is immutable after the backup is`,
		"created: only spec.cancel may be changed, from false to true",
	)},
	{Marker: "backup/never", Shows: literal("Backup cancelled by user")},
	{Marker: "reason=CancelIgnored", Settles: true, Shows: []tourShows{
		{Shown: "Warning   CancelIgnored   backup/first   The backup had already ended in phase Completed; the cancel changes nothing.",
			Output: `Warning\s+CancelIgnored\s+backup/first\s+The backup had already ended in phase Completed; the cancel changes nothing\.`},
	}},
	{Marker: "kubectl delete backup first", Shows: []tourShows{
		{Shown: "never   Failed", Output: `(?m)^never\s+Failed\s`},
	}},
	{Marker: "s3-example", Shows: literal("invalid storage location: credential secret cairn-system/s3-example-credentials does not exist")},
	{Marker: "kubectl get namespace shop", Fails: true, Shows: literal(`Error from server (NotFound): namespaces "shop" not found`)},
	{Marker: "backupName: shop\nEOF", Shows: []tourShows{
		{Shown: "shop   shop     Completed           6/6", Output: `shop\s+shop\s+Completed\s+6/6`},
	}},
	{Marker: "base64 -d", Shows: literal("blue", "s3cret")},
	{Marker: "zcat bin/local/storage/restores", Shows: literal(`{"created":{"configmaps":["shop/settings"],"deployments.apps":["shop/web"],"namespaces":["shop"],`)},
	{Marker: "name: shop-staging", Shows: literal("blue")},
	{Marker: "kubectl delete restore shop", Shows: literal("blue")},
	{Marker: "kind: Schedule", Shows: []tourShows{
		{Shown: "shop-often-<yyyyMMddHHmmss>", Output: `(?m)^shop-often-\d{14}\s`},
	}},
	{Marker: "name: short-lived", Shows: literal("EXPIRES")},
	{Marker: "cairn backup create second", Shows: []tourShows{
		{Shown: "Backup second created in namespace cairn-system; waiting for it to finish (Ctrl-C stops waiting, not the backup)."},
		{Shown: "Completed"},
		{Shown: "NAME     PHASE       QUEUE   PROGRESS   ERRORS   WARNINGS   LOCATION   EXPIRES   AGE   ORIGIN",
			Output: `NAME\s+PHASE\s+QUEUE\s+PROGRESS\s+ERRORS\s+WARNINGS\s+LOCATION\s+EXPIRES\s+AGE\s+ORIGIN`},
		{Shown: "second.tar.gz"},
	}},
	{Marker: "LOCAL_DIR=bin/local-b", Shows: []tourShows{
		{Shown: "the first cluster's, Completed", Output: `(?m)^shop\s+Completed\s`},
		{Shown: "blue", Output: `(?m)blue$`},
	}},
}

var _ = Describe("The README tour", Ordered, func() {
	tour, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), tourFile))
	var blocks []tourBlock
	if err == nil {
		blocks, err = tourBlocks(string(tour), tourHeading)
	}

	var dir string          // the reader's working directory
	var tourEnv []string    // the reader's terminal
	var mgr *managerProcess // what `make run-local` runs

	BeforeAll(func() {
		Expect(err).NotTo(HaveOccurred())
		Expect(blocks).NotTo(BeEmpty())
		for _, step := range tourSteps {
			block := stepBlock(blocks, step.Marker)
			for _, shows := range step.Shows {
				Expect(block.Script+"\n"+block.Output).To(ContainSubstring(shows.Shown),
					"docs/tour.md no longer shows this for the block with %q; update tourSteps", step.Marker)
			}
		}
		dir = GinkgoT().TempDir()
		Expect(os.Mkdir(filepath.Join(dir, "bin"), 0o755)).To(Succeed())
		for _, link := range []string{"config", "hack", "bin/manager", "bin/cairn"} {
			Expect(os.Symlink(filepath.Join(testenv.RepoRoot(), link), filepath.Join(dir, link))).To(Succeed())
		}
		tourEnv = append(withoutEnv(os.Environ(), "KUBECONFIG", "PATH", "KUBEBUILDER_ASSETS", "LOCAL_DIR",
			"LOCAL_API_PORT", "LOCAL_ETCD_PORT", "LOCAL_ETCD_PEER_PORT", "LOCAL_CONTROLLER_MANAGER_PORT"),
			"KUBECONFIG="+filepath.Join(dir, "bin", "local", "kubeconfig"),
			"PATH="+filepath.Join(dir, "bin")+":"+testenv.AssetsDir()+":"+os.Getenv("PATH"),
			"KUBEBUILDER_ASSETS="+testenv.AssetsDir(),
		)
		Expect(blocks[0].Script).To(Equal("make run-local"), "the tour no longer starts with make run-local; update startTourControlPlane")
		mgr = startTourControlPlane(dir)
	})

	for i, block := range blocks {
		if i == 0 {
			// make run-local: started by BeforeAll, to run until the container ends.
			continue
		}
		It(fmt.Sprintf("block %d: %s", i+1, strings.SplitN(block.Script, "\n", 2)[0]), func() {
			step := tourStep{}
			for _, s := range tourSteps {
				if strings.Contains(block.Script, s.Marker) {
					step = s
				}
			}
			script := block.Script
			for _, port := range tourPortRewrites {
				script = regexp.MustCompile(`\b`+port+`\b`).ReplaceAllString(script, fmt.Sprint(freePort()))
			}
			for _, localDir := range tourLocalDirs(script) {
				// The block starts a control plane of its own (the second cluster of disaster
				// recovery); it stops when the spec ends, however it ends. A manager the block
				// started with `&` is stopped by runTourBlock.
				DeferCleanup(func() {
					cmd := exec.Command(filepath.Join(dir, "hack", "local-up.sh"), "down")
					cmd.Dir = dir
					cmd.Env = append(tourEnv, "LOCAL_DIR="+localDir)
					out, _ := cmd.CombinedOutput()
					fmt.Fprintf(GinkgoWriter, "$ LOCAL_DIR=%s hack/local-up.sh down\n%s", localDir, out)
				})
			}
			run := runTourBlock(dir, tourEnv, script, !step.Fails)
			for deadline := time.Now().Add(tourSettleTimeout); step.Settles && !step.shows(run) && time.Now().Before(deadline); {
				time.Sleep(time.Second)
				run = runTourBlock(dir, tourEnv, script, !step.Fails)
			}
			failure := func(what string) string {
				return fmt.Sprintf("%s\n--- the block (as run):\n%s\n--- its stdout:\n%s\n--- its stderr:\n%s\n--- the manager's log:\n%s",
					what, script, run.stdout, run.stderr, mgr.log.String())
			}
			if step.Fails {
				Expect(run.exit).NotTo(Equal(0), failure("the block's last command succeeded; the README shows it failing"))
			} else {
				Expect(run.exit).To(Equal(0), failure(fmt.Sprintf("the block exited %d", run.exit)))
			}
			for _, shows := range step.Shows {
				Expect(run.stdout+"\n"+run.stderr).To(MatchRegexp(shows.pattern()), failure(fmt.Sprintf("the README shows %q", shows.Shown)))
			}
			if strings.Contains(script, "cairn backup download second") {
				Expect(filepath.Join(dir, "second.tar.gz")).To(BeAnExistingFile(), failure("no second.tar.gz in the working directory"))
			}
		})
	}
})

// stepBlock is the one block whose script contains marker.
func stepBlock(blocks []tourBlock, marker string) tourBlock {
	GinkgoHelper()
	var found []tourBlock
	for _, block := range blocks {
		if strings.Contains(block.Script, marker) {
			found = append(found, block)
		}
	}
	Expect(found).To(HaveLen(1), "tourSteps: %q must name exactly one block of the tour", marker)
	return found[0]
}

// startTourControlPlane does what `make run-local` does, in dir and on free ports: a local
// control plane in dir/bin/local, and bin/manager with the Makefile's flags against it. Both
// stop when the calling node's cleanup runs: call it from BeforeAll to keep them for the
// whole Ordered container.
func startTourControlPlane(dir string) *managerProcess {
	GinkgoHelper()
	localDir := filepath.Join(dir, "bin", "local")
	upEnv := append(os.Environ(),
		"LOCAL_DIR="+localDir,
		"KUBEBUILDER_ASSETS="+testenv.AssetsDir(),
		fmt.Sprintf("LOCAL_API_PORT=%d", freePort()),
		fmt.Sprintf("LOCAL_ETCD_PORT=%d", freePort()),
		fmt.Sprintf("LOCAL_ETCD_PEER_PORT=%d", freePort()),
		fmt.Sprintf("LOCAL_CONTROLLER_MANAGER_PORT=%d", freePort()),
	)
	localUp := func(arg string) {
		GinkgoHelper()
		cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "local-up.sh"), arg)
		cmd.Env = upEnv
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(GinkgoWriter, "$ hack/local-up.sh %s\n%s", arg, out)
		Expect(err).NotTo(HaveOccurred(), string(out))
	}
	DeferCleanup(localUp, "down")
	localUp("up")
	kc := filepath.Join(localDir, "kubeconfig")
	// The later --kubeconfig wins over the suite's.
	m := startManager("--kubeconfig", kc, "--namespace", "cairn-system")
	DeferCleanup(m.stop)
	// A reader looks at the location once the manager says it runs; the README shows it
	// Available by then.
	_, stderr, err := kubectlWith(kc, "wait", "bsl/default", "-n", "cairn-system", "--for=jsonpath={.status.phase}=Available", "--timeout=60s")
	Expect(err).NotTo(HaveOccurred(), "%s\nthe manager's log:\n%s", stderr, m.log.String())
	return m
}

// tourRun is what one block did.
type tourRun struct {
	stdout, stderr string
	exit           int
}

// runTourBlock runs script with bash in dir, with `-euo pipefail` when strict. The block runs
// in a process group of its own, which is stopped when the spec ends: a process the block
// started with `&` outlives its bash and must not outlive the test. Its output goes to files,
// not pipes, so that such a process does not hold the block open.
func runTourBlock(dir string, env []string, script string, strict bool) tourRun {
	GinkgoHelper()
	out := GinkgoT().TempDir()
	file := filepath.Join(out, "block.sh")
	Expect(os.WriteFile(file, []byte(script+"\n"), 0o600)).To(Succeed())
	stdout, err := os.Create(filepath.Join(out, "stdout"))
	Expect(err).NotTo(HaveOccurred())
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(out, "stderr"))
	Expect(err).NotTo(HaveOccurred())
	defer stderr.Close()

	args := []string{file}
	if strict {
		args = []string{"-euo", "pipefail", file}
	}
	// Every block of the tour ends well within this; it only bounds a hung block.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	Expect(cmd.Start()).To(Succeed())
	err = cmd.Wait()
	if pgid := cmd.Process.Pid; syscall.Kill(-pgid, 0) == nil {
		DeferCleanup(func() {
			fmt.Fprintf(GinkgoWriter, "stopping what the block left running (process group %d)\n", pgid)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
		})
	}
	exit := 0
	if exitErr := (&exec.ExitError{}); errors.As(err, &exitErr) {
		exit = exitErr.ExitCode()
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(out, name))
		Expect(err).NotTo(HaveOccurred())
		return string(data)
	}
	run := tourRun{stdout: read("stdout"), stderr: read("stderr"), exit: exit}
	fmt.Fprintf(GinkgoWriter, "$ bash %s <<'BLOCK'\n%s\nBLOCK\nexit %d\n%s%s", strings.Join(args[:len(args)-1], " "), script, exit, run.stdout, run.stderr)
	return run
}

// withoutEnv is environ without the variables names.
func withoutEnv(environ []string, names ...string) []string {
	var kept []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			kept = append(kept, kv)
		}
	}
	return kept
}
