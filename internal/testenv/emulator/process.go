// Package emulator runs the cloud storage emulators the tests use — Azurite for Azure Blob
// Storage, fake-gcs-server for Google Cloud Storage — as processes on 127.0.0.1, started by
// the test and stopped by their pid. It imports nothing of Cairn's, so that the storage
// package's own tests can use it too.
package emulator

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// TB is the part of testing.TB the emulators use; Ginkgo's GinkgoT() satisfies it too.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// emulator is a storage emulator's process (Azurite, fake-gcs-server) listening on
// 127.0.0.1 for a test: Start runs it and waits until it accepts connections, Stop kills it
// by its pid (as a crash would), Pause and Resume stop and continue it (SIGSTOP, SIGCONT),
// as a server that takes requests and never answers them.
type emulator struct {
	name   string
	addr   string
	binary string
	args   []string
	env    []string
	// startTimeout is how long it may take to listen (Azurite's Node start is slow on a busy
	// machine).
	startTimeout time.Duration
	cmd          *exec.Cmd
	exited       chan struct{}
	t            TB
}

// start runs the emulator and waits until it accepts connections.
func (e *emulator) start() {
	e.t.Helper()
	if e.cmd != nil {
		return
	}
	if _, err := os.Stat(e.binary); err != nil {
		e.t.Fatalf("no %s at %s: run 'make azurite fake-gcs-server' first", e.name, e.binary)
	}
	cmd := exec.Command(e.binary, e.args...)
	cmd.Env = append(os.Environ(), e.env...)
	logFile, err := os.Create(filepath.Join(e.t.TempDir(), e.name+".log"))
	if err != nil {
		e.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("starting %s: %v", e.name, err)
	}
	e.cmd = cmd
	e.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(e.exited)
	}()
	deadline := time.Now().Add(e.startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-e.exited:
			log, _ := os.ReadFile(logFile.Name())
			e.cmd = nil
			e.t.Fatalf("%s exited at start:\n%s", e.name, log)
		default:
		}
		if conn, err := net.DialTimeout("tcp", e.addr, 200*time.Millisecond); err == nil {
			_ = conn.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.stop()
	e.t.Fatalf("%s did not listen on %s within %s", e.name, e.addr, e.startTimeout)
}

// stop kills the emulator (SIGKILL, like a crash) and waits for it to exit.
func (e *emulator) stop() {
	if e.cmd == nil {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGCONT) // a paused process must still end
	_ = e.cmd.Process.Kill()
	<-e.exited
	e.cmd = nil
}

// Addr is where the emulator listens, host:port.
func (e *emulator) Addr() string { return e.addr }

// pause stops the emulator's process (SIGSTOP): connections stay open, nothing answers.
func (e *emulator) pause() {
	if e.cmd != nil {
		_ = e.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// resume continues a paused emulator (SIGCONT).
func (e *emulator) resume() {
	if e.cmd != nil {
		_ = e.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// binaryFrom is $env when set, else bin/<name> in the repository.
func binaryFrom(env string, name ...string) string {
	if b := os.Getenv(env); b != "" {
		return b
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	return filepath.Join(append([]string{root, "bin"}, name...)...)
}

// freePortOn returns a port on host that nothing listens on right now.
func freePortOn(t TB, host string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
