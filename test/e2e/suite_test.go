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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cairn-backup/cairn/internal/testenv"
)

var (
	env        *envtest.Environment
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
	admin, err := env.AddUser(envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	data, err := admin.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = filepath.Join(workDir, "kubeconfig")
	Expect(os.WriteFile(kubeconfig, data, 0o600)).To(Succeed())

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
	// Short backoff, so that retries after a storage outage are seen within a test.
	// A short storage timeout, so that a hung S3 server is noticed within a test.
	manager = startManager("--retry-backoff-min=500ms", "--retry-backoff-max=2s", "--storage-timeout=3s")
})

var _ = AfterSuite(func() {
	if manager != nil {
		manager.stop()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

func managerBinary() string { return filepath.Join(testenv.RepoRoot(), "bin", "manager") }

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
	exited      chan struct{}
}

// startManager runs bin/manager against the test cluster and waits until /readyz answers.
func startManager(extraArgs ...string) *managerProcess {
	GinkgoHelper()
	m := &managerProcess{
		log:         &syncBuffer{},
		probeAddr:   fmt.Sprintf("127.0.0.1:%d", freePort()),
		metricsAddr: fmt.Sprintf("127.0.0.1:%d", freePort()),
		exited:      make(chan struct{}),
	}
	args := append([]string{"--kubeconfig", kubeconfig, "--health-probe-bind-address", m.probeAddr,
		"--metrics-bind-address", m.metricsAddr}, extraArgs...)
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
