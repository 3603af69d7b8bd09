package blobproxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/blob/filesystem"
	"k8s.io/utils/clock"
)

// fastRetry keeps the tests' retries short.
var fastRetry = retryPolicy{initial: 5 * time.Millisecond, maxDelay: 50 * time.Millisecond, budget: 500 * time.Millisecond}

const (
	goodToken = "good-token"
	agentUser = DefaultNodeAgentUser
)

// staticAuth accepts the tokens it maps to a user.
type staticAuth map[string]string

func (a staticAuth) Authenticate(_ context.Context, token string) (string, error) {
	if u, ok := a[token]; ok {
		return u, nil
	}
	return "", ErrRefused
}

// backendFunc is a Backends made of a function; opens counts its calls.
type backendFunc struct {
	open  func(ctx context.Context, loc, ns string) (blob.Storage, bool, error)
	opens atomic.Int32
}

func (b *backendFunc) Open(ctx context.Context, loc, ns string) (blob.Storage, bool, error) {
	b.opens.Add(1)
	return b.open(ctx, loc, ns)
}

// staticBackend serves st (readOnly as told) for every repository.
func staticBackend(st blob.Storage, readOnly bool) *backendFunc {
	return &backendFunc{open: func(context.Context, string, string) (blob.Storage, bool, error) { return st, readOnly, nil }}
}

// fsStorage is kopia's filesystem storage in a new directory, which it returns too.
func fsStorage(t *testing.T) (blob.Storage, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := filesystem.New(context.Background(), &filesystem.Options{Path: dir}, true)
	if err != nil {
		t.Fatal(err)
	}
	return st, dir
}

// env is a proxy served on 127.0.0.1 and a token file for its clients.
type env struct {
	t         *testing.T
	server    *Server
	locks     *Locks
	http      *httptest.Server
	tokenFile string
}

func newEnv(t *testing.T, b Backends, locks *Locks, wrap ...func(http.Handler) http.Handler) *env {
	t.Helper()
	if locks == nil {
		locks = NewLocks(0, nil)
	}
	srv := newServer(b, staticAuth{goodToken: agentUser}, locks, DefaultBackendTTL, clock.RealClock{})
	var h http.Handler = srv
	for _, w := range wrap {
		h = w(h)
	}
	hs := httptest.NewServer(h) // listens on 127.0.0.1
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Close)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(goodToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, server: srv, locks: locks, http: hs, tokenFile: tokenFile}
}

func (e *env) options(loc, ns string) *Options {
	return &Options{URL: e.http.URL, Location: loc, Namespace: ns, TokenFile: e.tokenFile}
}

// client opens a client of loc/ns, closed when the test ends.
func (e *env) client(loc, ns string) *proxyStorage {
	e.t.Helper()
	c, err := newClient(context.Background(), e.options(loc, ns), fastRetry)
	if err != nil {
		e.t.Fatalf("newClient: %v", err)
	}
	e.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// reply is a raw request's answer.
type reply struct {
	status int
	header http.Header
	body   string
}

// request sends a raw request with the good token (and session, if not "").
func (e *env) request(method, path, session, body string) reply {
	e.t.Helper()
	return e.requestWithToken(method, path, goodToken, session, body)
}

func (e *env) requestWithToken(method, path, token, session, body string) reply {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set(headerSession, session)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// blobOf reads a blob whole.
func blobOf(t *testing.T, st blob.Storage, id blob.ID) (string, error) {
	t.Helper()
	var out outputBuffer
	err := st.GetBlob(context.Background(), id, 0, -1, &out)
	return out.String(), err
}

// eventually polls cond for up to 5 seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stalling is a storage whose reads and writes block until their context ends (or release
// is closed, for a storage that ignores its context) and record that they were stopped.
type stalling struct {
	blob.Storage
	ignoreContext bool
	release       chan struct{}
	entered       chan struct{}
	enterOnce     sync.Once
	stopped       chan struct{}
	stopOnce      sync.Once
}

func newStalling(st blob.Storage, ignoreContext bool) *stalling {
	return &stalling{Storage: st, ignoreContext: ignoreContext, release: make(chan struct{}),
		entered: make(chan struct{}), stopped: make(chan struct{})}
}

func (s *stalling) stall(ctx context.Context) error {
	s.enterOnce.Do(func() { close(s.entered) })
	defer s.stopOnce.Do(func() { close(s.stopped) })
	if s.ignoreContext {
		<-s.release
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *stalling) GetBlob(ctx context.Context, _ blob.ID, _, _ int64, _ blob.OutputBuffer) error {
	return s.stall(ctx)
}

func (s *stalling) PutBlob(ctx context.Context, _ blob.ID, _ blob.Bytes, _ blob.PutOptions) error {
	return s.stall(ctx)
}
