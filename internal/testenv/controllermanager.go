package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ControllerManagerControllers are the kube-controller-manager controllers the test control
// planes run, the ones a test of deleting and restoring namespaces relies on: the namespace
// controller finalizes a deleted namespace (without it the namespace stays Terminating), the
// garbage collector deletes the dependents of a deleted owner, the serviceaccount controller
// gives each namespace its "default" ServiceAccount, and the token controller fills
// service-account token Secrets. Controllers that would add objects to every namespace (the
// kube-root-ca.crt publisher) or that need nodes are left out.
var ControllerManagerControllers = []string{
	"namespace-controller",
	"garbage-collector-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
}

// envtestServiceAccountKey is the private key envtest gives kube-apiserver as
// --service-account-signing-key-file, in the API server's CertDir; the token controller signs
// with it too.
const envtestServiceAccountKey = "sa-signer.key"

// controllerManagerStartTimeout bounds how long StartControllerManager waits for every
// controller to report healthy.
const controllerManagerStartTimeout = time.Minute

// controllerManagerStopTimeout is how long Stop waits after SIGTERM before it kills.
const controllerManagerStopTimeout = 10 * time.Second

// ControllerManager is a kube-controller-manager running ControllerManagerControllers against
// an envtest control plane, which otherwise runs only etcd and kube-apiserver. It serves
// HTTPS on 127.0.0.1 only and logs to LogPath.
type ControllerManager struct {
	// LogPath is the file the process writes its log to, in the test's temp dir.
	LogPath string
	// Addr is the host:port of its /healthz.
	Addr string

	cmd      *exec.Cmd
	exited   chan struct{}
	stopOnce sync.Once
}

// ControllerManagerBinary is kube-controller-manager in AssetsDir (hack/envtest.sh builds it).
func ControllerManagerBinary() string { return filepath.Join(AssetsDir(), "kube-controller-manager") }

// StartControllerManager starts kube-controller-manager against env, which must be started,
// and stops it when the test ends (Stop stops it earlier). It returns once /healthz reports
// every controller of ControllerManagerControllers healthy, and an error without waiting when
// the binary is missing, or when the process exits or is not healthy within a minute. The
// process authenticates as system:kube-controller-manager in system:masters and acts with its
// own credentials (--use-service-account-credentials=false), as the namespace controller and
// the garbage collector must be able to delete anything.
func StartControllerManager(t TB, env *envtest.Environment) (*ControllerManager, error) {
	t.Helper()
	binary := ControllerManagerBinary()
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("no kube-controller-manager in %s: run 'make envtest' first", AssetsDir())
	}
	apiServer := env.ControlPlane.GetAPIServer()
	if env.Config == nil || apiServer.CertDir == "" {
		return nil, errors.New("starting kube-controller-manager: the envtest environment is not started")
	}
	saKey := filepath.Join(apiServer.CertDir, envtestServiceAccountKey)
	if _, err := os.Stat(saKey); err != nil {
		return nil, fmt.Errorf("starting kube-controller-manager: envtest's service-account key: %w", err)
	}

	dir := t.TempDir()
	user, err := env.AddUser(envtest.User{Name: "system:kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding the kube-controller-manager user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("writing the kube-controller-manager kubeconfig: %w", err)
	}
	// A serving certificate of our own, so that the health check verifies whom it talks to.
	cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return nil, fmt.Errorf("generating the kube-controller-manager serving certificate: %w", err)
	}
	files := map[string][]byte{"kubeconfig": kubeconfig, "serving.crt": cert, "serving.key": key}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}

	port := strconv.Itoa(FreePort(t))
	cm := &ControllerManager{
		LogPath: filepath.Join(dir, "kube-controller-manager.log"),
		Addr:    net.JoinHostPort("127.0.0.1", port),
		exited:  make(chan struct{}),
	}
	cm.cmd = exec.Command(binary,
		"--kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--bind-address", "127.0.0.1",
		"--secure-port", port,
		"--tls-cert-file", filepath.Join(dir, "serving.crt"),
		"--tls-private-key-file", filepath.Join(dir, "serving.key"),
		"--controllers", strings.Join(ControllerManagerControllers, ","),
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file", saKey,
		// Tests delete many namespaces; the default 20 QPS would make each deletion wait.
		"--kube-api-qps", "200",
		"--kube-api-burst", "400",
	)
	logFile, err := os.Create(cm.LogPath)
	if err != nil {
		return nil, err
	}
	cm.cmd.Stdout, cm.cmd.Stderr = logFile, logFile
	if err := cm.cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	go func() {
		_ = cm.cmd.Wait()
		_ = logFile.Close()
		close(cm.exited)
	}()
	t.Cleanup(cm.Stop)

	if err := cm.waitHealthy(cert); err != nil {
		cm.Stop()
		return nil, err
	}
	return cm, nil
}

// waitHealthy polls /healthz?verbose until it answers 200 with a check for every controller,
// which it does once the controllers are built and about to start.
func (cm *ControllerManager) waitHealthy(servingCert []byte) error {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(servingCert)
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}},
	}
	defer client.CloseIdleConnections()
	url := "https://" + cm.Addr + "/healthz?verbose"
	var last string
	ctx, cancel := context.WithTimeout(context.Background(), controllerManagerStartTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-cm.exited:
			return false, fmt.Errorf("kube-controller-manager exited at start:\n%s", cm.logTail())
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		last = fmt.Sprintf("%s: %s", resp.Status, body)
		return resp.StatusCode == http.StatusOK && reportsControllers(string(body), ControllerManagerControllers), nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("kube-controller-manager not healthy within %s (last answer: %s); log:\n%s",
			controllerManagerStartTimeout, last, cm.logTail())
	}
	return err
}

// reportsControllers reports whether a verbose /healthz body has a passing check for each
// controller.
func reportsControllers(body string, controllers []string) bool {
	for _, c := range controllers {
		if !strings.Contains(body, "[+]"+c+" ok") {
			return false
		}
	}
	return true
}

// logTail is the end of the log, for errors.
func (cm *ControllerManager) logTail() string {
	data, _ := os.ReadFile(cm.LogPath)
	const tail = 4 << 10
	if len(data) > tail {
		data = data[len(data)-tail:]
	}
	return string(data)
}

// Stop stops the process (SIGTERM, SIGKILL after 10s) and waits for it to exit. It may be
// called more than once.
func (cm *ControllerManager) Stop() {
	cm.stopOnce.Do(func() {
		_ = cm.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-cm.exited:
		case <-time.After(controllerManagerStopTimeout):
			_ = cm.cmd.Process.Kill()
			<-cm.exited
		}
	})
}
