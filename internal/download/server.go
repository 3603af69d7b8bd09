package download

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// ErrNotFound is what an Opener returns (wrapped) for an object or location that is not there.
var ErrNotFound = errors.New("not found")

// Opener opens one object of a named location for reading.
type Opener func(ctx context.Context, location, key string) (io.ReadCloser, error)

// Server is the manager's download server. It streams each object from its location to the
// client as it reads it (never holding a file in memory) and verifies nothing of the content:
// the CLI checks an archive's checksum.
type Server struct {
	Signer *Signer
	Open   Opener
	Clock  clock.PassiveClock
	Log    logr.Logger

	listener net.Listener
	base     string
}

// Listen binds the server to addr (host:port; port 0 picks a free one). base is the URL
// clients reach the server by; empty means http://<the bound address>, with localhost for a
// wildcard host (what `kubectl port-forward` gives).
func Listen(addr, base string) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("binding the download server to %s: %w", addr, err)
	}
	if base == "" {
		base = defaultBase(l.Addr())
	}
	return &Server{listener: l, base: base}, nil
}

func defaultBase(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || tcp.IP.IsUnspecified() {
		port := ""
		if ok {
			port = strconv.Itoa(tcp.Port)
		}
		return "http://" + net.JoinHostPort("localhost", port)
	}
	return "http://" + tcp.String()
}

// Base is the URL clients reach the server by.
func (s *Server) Base() string { return s.base }

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// NeedLeaderElection is false: every replica serves the files of its own filesystem
// locations, leader or not.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends (a controller-runtime Runnable).
func (s *Server) Start(ctx context.Context) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errs := make(chan error, 1)
	go func() { errs <- srv.Serve(s.listener) }()
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		return nil
	}
}

// ServeHTTP answers GET and HEAD of Path with the object a valid signature names: 403 for a
// missing, wrong or expired signature, 404 when the object is gone.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	obj, err := s.Signer.Verify(r.URL.Query(), s.Clock.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	rc, err := s.Open(r.Context(), obj.Location, obj.Key)
	if errors.Is(err, ErrNotFound) {
		http.Error(w, "the file does not exist", http.StatusNotFound)
		return
	}
	if err != nil {
		s.Log.Error(err, "Could not open a file to download", "location", obj.Location, "key", obj.Key)
		http.Error(w, "the file cannot be read now", http.StatusBadGateway)
		return
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", path.Base(obj.Key)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	// A file streams with its length and range support; anything else is copied through.
	if f, ok := rc.(interface {
		io.ReadSeeker
		Stat() (fs.FileInfo, error)
	}); ok {
		if info, err := f.Stat(); err == nil {
			http.ServeContent(w, r, "", info.ModTime(), f)
			return
		}
	}
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, rc); err != nil {
		s.Log.Info("A download ended early", "location", obj.Location, "key", obj.Key, "error", err.Error())
	}
}
