// Package e2e drives the real manager binary (bin/manager) with the real kubectl against a
// real kube-apiserver and etcd, as a user would.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

var (
	env        *envtest.Environment
	kcm        *testenv.ControllerManager
	workDir    string
	kubeconfig string
	storageDir string
	manager    *managerProcess
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "End-to-end suite")
}

var _ = BeforeSuite(func() {
	Expect(managerBinary()).To(BeAnExistingFile(), "run 'make build' first")
	workDir = GinkgoT().TempDir()

	var err error
	env, err = testenv.New()
	Expect(err).NotTo(HaveOccurred())
	_, err = env.Start()
	Expect(err).NotTo(HaveOccurred())
	// Namespaces are finalized and owner references garbage-collected, as in a cluster.
	kcm, err = testenv.StartControllerManager(GinkgoT(), env)
	Expect(err).NotTo(HaveOccurred())
	admin, err := env.AddUser(envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	data, err := admin.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = filepath.Join(workDir, "kubeconfig")
	Expect(os.WriteFile(kubeconfig, data, 0o600)).To(Succeed())
	// The requester admission policies, as the chart and hack/local-up.sh install them; the
	// manager runs as e2e-admin (kubeconfig), the operator's identity.
	Expect(testenv.InstallAdmissionPolicies(context.Background(), admin.Config(), admin.Config())).To(Succeed())

	kubectlOK("create", "namespace", "cairn-system")
	// The default location, as hack/local-up.sh makes it.
	storageDir = filepath.Join(workDir, "storage")
	stderr, err := kubectlStdin(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata:
  name: default
  namespace: cairn-system
spec:
  provider: filesystem
  default: true
  config:
    path: %s
`, storageDir), "apply", "-f", "-")
	Expect(err).NotTo(HaveOccurred(), stderr)
	manager = startManager(suiteManagerFlags...)
})

// suiteManagerFlags are the flags of the suite's manager: a short backoff, so that retries
// after a storage outage are seen within a test, and a short storage timeout, so that a hung
// S3 server is noticed within a test.
var suiteManagerFlags = []string{"--retry-backoff-min=500ms", "--retry-backoff-max=2s", "--storage-timeout=3s"}

var _ = AfterSuite(func() {
	if manager != nil {
		manager.stop()
	}
	if kcm != nil {
		kcm.Stop()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

func managerBinary() string { return filepath.Join(binDir(), "manager") }

// binDir holds the binaries under test: bin/ (make build), or $CAIRN_E2E_BIN_DIR, for a
// worktree whose bin/ is shared with others.
func binDir() string {
	if dir := os.Getenv("CAIRN_E2E_BIN_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(testenv.RepoRoot(), "bin")
}

func kubectlBinary() string { return filepath.Join(testenv.AssetsDir(), "kubectl") }

// kubectl runs kubectl against the test cluster and returns its stdout and stderr.
func kubectl(args ...string) (string, string, error) {
	return kubectlWith(kubeconfig, args...)
}

func kubectlWith(config string, args ...string) (string, string, error) {
	cmd := exec.Command(kubectlBinary(), append([]string{"--kubeconfig", config}, args...)...)
	cmd.Dir = testenv.RepoRoot()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	fmt.Fprintf(GinkgoWriter, "$ kubectl %s\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String(), stderr.String(), err
}

// kubectlOK runs kubectl and fails the test if it fails.
func kubectlOK(args ...string) string {
	GinkgoHelper()
	stdout, stderr, err := kubectl(args...)
	Expect(err).NotTo(HaveOccurred(), "kubectl %v: %s", args, stderr)
	return stdout
}

// freePort returns a port on 127.0.0.1 that nothing listens on right now.
func freePort() int {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type managerProcess struct {
	cmd         *exec.Cmd
	log         *syncBuffer
	probeAddr   string
	metricsAddr string
	// downloadAddr is where the download server listens; DownloadRequest URLs point there.
	downloadAddr string
	exited       chan struct{}
}

// startManager runs bin/manager against the test cluster and waits until /readyz answers.
func startManager(extraArgs ...string) *managerProcess {
	GinkgoHelper()
	m := &managerProcess{
		log:          &syncBuffer{},
		probeAddr:    fmt.Sprintf("127.0.0.1:%d", freePort()),
		metricsAddr:  fmt.Sprintf("127.0.0.1:%d", freePort()),
		downloadAddr: fmt.Sprintf("127.0.0.1:%d", freePort()),
		exited:       make(chan struct{}),
	}
	args := append([]string{"--kubeconfig", kubeconfig, "--health-probe-bind-address", m.probeAddr,
		"--metrics-bind-address", m.metricsAddr, "--download-bind-address", m.downloadAddr}, extraArgs...)
	m.cmd = exec.Command(managerBinary(), args...)
	m.cmd.Stdout = m.log
	m.cmd.Stderr = m.log
	Expect(m.cmd.Start()).To(Succeed())
	go func() {
		_ = m.cmd.Wait()
		close(m.exited)
	}()
	Eventually(func() (int, error) {
		select {
		case <-m.exited:
			return 0, StopTrying("the manager exited:\n" + m.log.String())
		default:
		}
		return httpStatus("http://" + m.probeAddr + "/readyz")
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(http.StatusOK))
	return m
}

func (m *managerProcess) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
	fmt.Fprintf(GinkgoWriter, "manager log:\n%s\n", m.log.String())
}

func httpStatus(url string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// syncBuffer is a bytes.Buffer that a process may write while a test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// killManager kills the suite's manager with SIGKILL, as the kernel's OOM killer or a lost
// node would: no shutdown code runs, nothing is flushed, in-flight requests are cut. It waits
// for the process to exit and writes its log to the GinkgoWriter. Should the spec end without
// starting another (restartManager), one with the suite's flags is started for the specs that
// follow.
func killManager() {
	GinkgoHelper()
	killed := manager
	Expect(killed.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	<-killed.exited
	fmt.Fprintf(GinkgoWriter, "manager log up to SIGKILL:\n%s\n", killed.log.String())
	DeferCleanup(func() {
		if manager == killed {
			manager = startManager(suiteManagerFlags...)
		}
	})
}

// restartManager starts the suite's manager again after killManager, with the suite's flags.
// It serves /readyz when this returns; its startup recovery may still be running.
func restartManager() {
	GinkgoHelper()
	manager = startManager(suiteManagerFlags...)
}

// backupWatch records every state of the Backups of one namespace that a watch delivers, from
// the state when it started. Phases that last only a moment (DeletionFailed for the length of
// a short backoff) are seen here where a poll would miss them.
type backupWatch struct {
	mu   sync.Mutex
	seen []cairnv1.Backup
	gone map[string]bool
}

// watchBackups starts recording the Backups of namespace until the spec ends.
func watchBackups(namespace string) *backupWatch {
	GinkgoHelper()
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	w := &backupWatch{gone: map[string]bool{}}
	DeferCleanup(cancel)
	started := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		resourceVersion := ""
		first := true
		for ctx.Err() == nil {
			list := &cairnv1.BackupList{}
			watcher, err := c.Watch(ctx, list, client.InNamespace(namespace), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion}})
			if first {
				first = false
				close(started)
			}
			if err != nil {
				select { // the API server is the test's own: try again soon
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			for ev := range watcher.ResultChan() {
				b, ok := ev.Object.(*cairnv1.Backup)
				if !ok {
					continue // a watch error: watch again from the last version seen
				}
				resourceVersion = b.ResourceVersion
				w.mu.Lock()
				if ev.Type == watch.Deleted {
					w.gone[b.Name] = true
				} else {
					w.seen = append(w.seen, *b)
				}
				w.mu.Unlock()
			}
			watcher.Stop()
		}
	}()
	<-started
	return w
}

// states returns every state of the named backup seen so far, oldest first.
func (w *backupWatch) states(name string) []cairnv1.Backup {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []cairnv1.Backup
	for _, b := range w.seen {
		if b.Name == name {
			out = append(out, b)
		}
	}
	return out
}

// phases returns the phases the named backup went through, each once per stay ("" stays "").
func (w *backupWatch) phases(name string) []string {
	var out []string
	for _, b := range w.states(name) {
		p := string(b.Status.Phase)
		if len(out) == 0 || out[len(out)-1] != p {
			out = append(out, p)
		}
	}
	return out
}

// order returns the names of the backups in the order in which each first reached phase.
func (w *backupWatch) order(phase cairnv1.BackupPhase) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, b := range w.seen {
		if b.Status.Phase == phase && !slices.Contains(out, b.Name) {
			out = append(out, b.Name)
		}
	}
	return out
}

// deleted reports whether the named backup's deletion was seen.
func (w *backupWatch) deleted(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone[name]
}
