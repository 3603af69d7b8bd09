package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// VersityGWVersion is the S3 server the tests run; the Makefile installs the same into bin/.
const VersityGWVersion = "v1.8.0"

// S3Server is a real S3 server (versitygw with its posix backend) listening on 127.0.0.1,
// for tests. Its buckets are the directories under Dir. Stop kills it, as a crash would;
// Start brings it back on the same address with the same data.
type S3Server struct {
	Dir       string
	Addr      string
	AccessKey string
	SecretKey string
	metaDir   string
	// versionDir, when set, keeps the versions of versioned buckets (StartVersionedS3Server).
	versionDir string
	binary     string
	cmd        *exec.Cmd
	exited     chan struct{}
	t          TB
}

// TB is the part of testing.TB the helpers use; Ginkgo's GinkgoT() satisfies it too.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// S3ServerBinary is the versitygw binary: $VERSITYGW, else bin/versitygw-<version>.
func S3ServerBinary() string {
	if b := os.Getenv("VERSITYGW"); b != "" {
		return b
	}
	return filepath.Join(RepoRoot(), "bin", "versitygw-"+VersityGWVersion)
}

// StartS3Server starts a server for the test and stops it when the test ends.
func StartS3Server(t TB) *S3Server {
	t.Helper()
	return startS3Server(t, &S3Server{t: t}, t.TempDir())
}

// startS3Server starts s with its data under root.
func startS3Server(t TB, s *S3Server, root string) *S3Server {
	t.Helper()
	binary := S3ServerBinary()
	if _, err := os.Stat(binary); err != nil {
		t.Fatalf("no S3 server at %s: run 'make versitygw' first", binary)
	}
	s.Dir = filepath.Join(root, "data")
	s.metaDir = filepath.Join(root, "meta")
	s.AccessKey = "cairn" + randomHex(4)
	s.SecretKey = randomHex(20)
	s.binary = binary
	s.Addr = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Endpoint is the server's URL, for config.endpoint.
func (s *S3Server) Endpoint() string { return "http://" + s.Addr }

// CredentialsFile is an AWS shared-credentials file with the server's root credentials, as a
// credential Secret holds it.
func (s *S3Server) CredentialsFile() string {
	return fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", s.AccessKey, s.SecretKey)
}

// CreateBucket makes an empty bucket.
func (s *S3Server) CreateBucket(name string) {
	s.t.Helper()
	if err := os.MkdirAll(filepath.Join(s.Dir, name), 0o750); err != nil {
		s.t.Fatal(err)
	}
}

// Start runs the server and waits until it accepts connections.
func (s *S3Server) Start() {
	s.t.Helper()
	if s.cmd != nil {
		return
	}
	args := []string{"--port", s.Addr, "--access", s.AccessKey, "--secret", s.SecretKey, "--quiet", "posix", "--sidecar", s.metaDir}
	if s.versionDir != "" {
		args = append(args, "--versioning-dir", s.versionDir)
	}
	cmd := exec.Command(s.binary, append(args, s.Dir)...)
	for _, dir := range []string{s.Dir, s.metaDir, s.versionDir} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o750); err != nil {
			s.t.Fatal(err)
		}
	}
	logFile, err := os.Create(filepath.Join(s.t.TempDir(), "versitygw.log"))
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting the S3 server: %v", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(s.exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			log, _ := os.ReadFile(logFile.Name())
			s.cmd = nil
			s.t.Fatalf("the S3 server exited at start:\n%s", log)
		default:
		}
		if conn, err := net.DialTimeout("tcp", s.Addr, 200*time.Millisecond); err == nil {
			_ = conn.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("the S3 server did not listen on %s within 30s", s.Addr)
}

// Stop kills the server (SIGKILL, like a crash) and waits for it to exit.
func (s *S3Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// FreePort returns a port on 127.0.0.1 that nothing listens on right now.
func FreePort(t TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
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
