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
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/cairn-backup/cairn/internal/storage"
)

// ErrNotFound is what an Opener returns (wrapped) for an object or location that is not there.
var ErrNotFound = errors.New("not found")

// Opener opens one object of a named location for reading.
type Opener func(ctx context.Context, location, key string) (io.ReadCloser, error)

// Authenticator says whose a Kubernetes bearer token is (a TokenReview); ok is false for a
// token the API server does not accept, err a failure to ask.
type Authenticator func(ctx context.Context, token string) (user Requester, ok bool, err error)

// Server is the manager's download server. It streams each object from its location to the
// client as it reads it (never holding a file in memory), verifying it against the digest its
// URL names (copyVerified): a download that does not match ends with an error before its last
// bytes (the connection is cut, so no client takes it for complete). A URL that names a
// requester serves only a caller whose bearer token Authenticate says is theirs.
type Server struct {
	Signer       *Signer
	Open         Opener
	Authenticate Authenticator
	Clock        clock.PassiveClock
	Log          logr.Logger

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
// missing, wrong or expired signature, or a caller who is not the URL's requester; 404 when the
// object is gone.
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
	if status, msg := s.authorize(r, obj.Requester); status != http.StatusOK {
		http.Error(w, msg, status)
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
	s.serve(w, r, obj, rc)
}

// authorize says whether the request's caller is the URL's requester (http.StatusOK), or why
// not. Without a requester, whoever holds the URL is served.
func (s *Server) authorize(r *http.Request, want *Requester) (int, string) {
	if want == nil {
		return http.StatusOK, ""
	}
	token, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		return http.StatusForbidden, callerRefusal(*want, nil)
	}
	if s.Authenticate == nil {
		return http.StatusForbidden, "this download server cannot check tokens"
	}
	got, accepted, err := s.Authenticate(r.Context(), token)
	if err != nil {
		s.Log.Error(err, "Could not check a download's token")
		return http.StatusServiceUnavailable, "the token cannot be checked now"
	}
	if !accepted {
		return http.StatusForbidden, "the bearer token was not accepted by the Kubernetes API server"
	}
	if why := callerRefusal(*want, &got); why != "" {
		return http.StatusForbidden, why
	}
	return http.StatusOK, ""
}

// callerRefusal says why caller (nil: no token was sent) may not fetch a URL made for want, ""
// when they may: the same username, and the same UID when the request recorded one.
func callerRefusal(want Requester, caller *Requester) string {
	switch {
	case caller == nil:
		return fmt.Sprintf("this download URL serves only %s: send their Kubernetes token (Authorization: Bearer), as cairn backup download does", want.Username)
	case caller.Username != want.Username || (want.UID != "" && caller.UID != want.UID):
		return fmt.Sprintf("this download URL serves only %s, who asked for it, not %s", want.Username, caller.Username)
	}
	return ""
}

// bearerToken is the token of an Authorization header "Bearer <token>".
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// serve streams rc, the object obj names. A download that fails before any byte is sent is
// answered with an error; one that fails after is cut (http.ErrAbortHandler), so that neither
// a length nor a chunked stream's end tells the client it is complete.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, obj Object, rc io.ReadCloser) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", path.Base(obj.Key)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if size, ok := contentLength(obj, rc); ok {
		h.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	if r.Method == http.MethodHead {
		return
	}
	cw := &countingWriter{w: w}
	err := copyVerified(cw, rc, obj.Digest)
	if err == nil {
		return
	}
	s.Log.Error(err, "A download ended early", "location", obj.Location, "key", obj.Key, "sent", cw.n)
	if cw.n == 0 {
		h.Del("Content-Length")
		http.Error(w, failureBody(err), http.StatusBadGateway)
		return
	}
	panic(http.ErrAbortHandler)
}

// failureBody is what the client of a download that failed before its first byte is told: why,
// when it is the file's own fault (its bytes are not the committed ones, or it does not decrypt
// as the object it is stored as; those errors name only the object), and otherwise only that it
// cannot be read now: a storage failure's error may name the location's endpoint, bucket or
// credentials, which the manager's log keeps and a team's member is not told (DESIGN.md 15).
func failureBody(err error) string {
	if errors.Is(err, ErrMismatch) || errors.Is(err, storage.ErrDamaged) || errors.Is(err, storage.ErrNotEncrypted) {
		return "the file cannot be read: " + err.Error()
	}
	return "the file cannot be read now"
}

// contentLength is the size a download of obj will have: its digest's, or the size of a file
// the store hands out as one.
func contentLength(obj Object, rc io.ReadCloser) (int64, bool) {
	if obj.Digest != nil {
		return obj.Digest.Size, true
	}
	if f, ok := rc.(interface{ Stat() (fs.FileInfo, error) }); ok {
		if info, err := f.Stat(); err == nil && info.Mode().IsRegular() {
			return info.Size(), true
		}
	}
	return 0, false
}

// countingWriter counts what was written to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
