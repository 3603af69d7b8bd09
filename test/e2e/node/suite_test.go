//go:build e2enode

package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// The node's network namespace, as hack/node-lib.sh names it.
const netnsPath = "/run/netns/cairn-node"

var (
	// bin/node with its links resolved (bin/ may be a link to a shared one): the kubelet's
	// root is its real path, and a hostPath mounted with propagation (the node agent's pods
	// directory) must be named by it, or containerd finds it "mounted on /".
	nodeDir    = realPath(filepath.Join(testenv.RepoRoot(), "bin", "node"))
	kubeconfig = filepath.Join(nodeDir, "kubeconfig")
	// The images 'make image' builds (hack/node-lib.sh's names).
	managerImage = envOr("MANAGER_IMAGE", "cairn-manager:dev")
	httpdImage   = envOr("HTTPD_IMAGE", "cairn-e2e-httpd:dev")

	k8s client.Client
)

// realPath is path with its links resolved, or path when it does not exist (yet: the outer
// test process runs before node-up made it).
func realPath(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return path
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	if inNodeNamespace() {
		os.Exit(m.Run())
	}
	os.Exit(runInNodeNamespace())
}

// inNodeNamespace tells whether this process runs in the node's network namespace.
func inNodeNamespace() bool {
	var self, node syscall.Stat_t
	if syscall.Stat("/proc/self/ns/net", &self) != nil || syscall.Stat(netnsPath, &node) != nil {
		return false
	}
	return self.Dev == node.Dev && self.Ino == node.Ino
}

// runInNodeNamespace brings the node up, imports the images, runs this test binary again inside
// the node's namespace and returns its exit code; it stops the node afterwards if it started it.
func runInNodeNamespace() int {
	hack := func(script string, args ...string) error {
		cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", script), args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		return cmd.Run()
	}
	wasRunning := hack("node-up.sh", "--running") == nil
	if err := hack("node-up.sh"); err != nil {
		fmt.Fprintf(os.Stderr, "hack/node-up.sh: %v\n", err)
		return 1
	}
	if !wasRunning && os.Getenv("CAIRN_NODE_KEEP") == "" {
		defer func() {
			if err := hack("node-down.sh"); err != nil {
				fmt.Fprintf(os.Stderr, "hack/node-down.sh: %v\n", err)
			}
		}()
	}
	for _, tarball := range []string{"manager.tar", "httpd.tar", "voldata.tar"} {
		if _, err := os.Stat(filepath.Join(testenv.RepoRoot(), "bin", "images", tarball)); err != nil {
			fmt.Fprintf(os.Stderr, "bin/images/%s is missing: run 'make image' first\n", tarball)
			return 1
		}
	}
	if err := hack("node-images.sh", "import"); err != nil {
		fmt.Fprintf(os.Stderr, "hack/node-images.sh import: %v\n", err)
		return 1
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + netnsPath, "--", os.Args[0]}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The specs end with this process, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Run(); err != nil {
		if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "running the specs in the node's namespace: %v\n", err)
		return 1
	}
	return 0
}

func TestNode(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "One-node cluster suite")
}

var _ = BeforeSuite(func() {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(cairnv1.AddToScheme(scheme)).To(Succeed())
	k8s, err = client.New(config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
})

// Whatever a failed spec leaves is shown: the pods, the events, the managers' logs; before the
// clean-up of an ordered container's BeforeAll removes them.
var _ = AfterEach(func() {
	if !CurrentSpecReport().Failed() {
		return
	}
	for _, args := range [][]string{
		{"get", "nodes,pods,replicasets", "--all-namespaces", "-o", "wide", "--show-labels"},
		{"get", "events", "--all-namespaces", "--sort-by=.lastTimestamp"},
		{"get", "backups,restores,backupstoragelocations,leases", "-n", "cairn-system", "-o", "yaml"},
		{"logs", "-n", "cairn-system", "-l", managerSelector, "--prefix", "--tail=200"},
		{"logs", "-n", "cairn-system", "-l", nodeAgentSelector, "--prefix", "--tail=100"},
		{"get", "podvolumebackups", "-n", "cairn-system", "-o", "yaml"},
	} {
		_, _, _ = kubectl(args...)
	}
})

func kubectlBinary() string { return filepath.Join(testenv.AssetsDir(), "kubectl") }

// kubectl runs kubectl against the node with stdin, and returns its stdout and stderr.
func kubectlStdin(stdin string, args ...string) (string, string, error) {
	cmd := exec.Command(kubectlBinary(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	started := time.Now()
	err := cmd.Run()
	fmt.Fprintf(GinkgoWriter, "$ kubectl %s (%s)\n%s%s", strings.Join(args, " "), time.Since(started).Round(time.Millisecond), stdout.String(), stderr.String())
	return stdout.String(), stderr.String(), err
}

func kubectl(args ...string) (string, string, error) { return kubectlStdin("", args...) }

// kubectlOK runs kubectl and fails the spec if it fails.
func kubectlOK(args ...string) string {
	GinkgoHelper()
	stdout, stderr, err := kubectl(args...)
	Expect(err).NotTo(HaveOccurred(), "kubectl %v: %s", args, stderr)
	return stdout
}

// apply applies manifests with kubectl and fails the spec if it fails.
func apply(manifests string) {
	GinkgoHelper()
	_, stderr, err := kubectlStdin(manifests, "apply", "-f", "-")
	Expect(err).NotTo(HaveOccurred(), stderr)
}

// helmBinary is $HELM (the Makefile sets it), else the Makefile's pinned helm in bin/.
func helmBinary() string {
	if path := os.Getenv("HELM"); path != "" {
		return path
	}
	return filepath.Join(testenv.RepoRoot(), "bin", "helm-v4.3.1")
}

// helm runs helm against the node in the repository's root, with no user configuration,
// repositories or cache, and returns its stdout and stderr.
func helm(args ...string) (string, string, error) {
	cmd := exec.Command(helmBinary(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Dir = testenv.RepoRoot()
	home := filepath.Join(nodeDir, "helm")
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	fmt.Fprintf(GinkgoWriter, "$ helm %s\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String(), stderr.String(), err
}

// helmOK runs helm and fails the spec if it fails.
func helmOK(args ...string) string {
	GinkgoHelper()
	stdout, stderr, err := helm(args...)
	Expect(err).NotTo(HaveOccurred(), "helm %v: %s", args, stderr)
	return stdout
}

// httpGet returns the body of url, which must answer 200.
func httpGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	// Straight to the pod: no proxy from the environment.
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body), nil
}
