package blobproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kopia/kopia/repo/blob"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestParseRoute(t *testing.T) {
	tests := []struct {
		path    string
		want    route
		wantErr string
	}{
		{path: "/repositories/default/shop/blobs/p0123-s1-c1", want: route{location: "default", namespace: "shop", kind: kindBlob, id: "p0123-s1-c1"}},
		{path: "/repositories/my.loc/shop/blobs", want: route{location: "my.loc", namespace: "shop", kind: kindBlobs}},
		{path: "/repositories/default/shop/metadata/kopia.repository", want: route{location: "default", namespace: "shop", kind: kindMetadata, id: "kopia.repository"}},
		{path: "/repositories/default/shop/sessions", want: route{location: "default", namespace: "shop", kind: kindSessions}},
		{path: "/repositories/default/shop/sessions/" + strings.Repeat("ab", 16), want: route{location: "default", namespace: "shop", kind: kindSession, id: strings.Repeat("ab", 16)}},
		{path: "/repositories/default/shop/blobs/..", wantErr: "'..'"},
		{path: "/repositories/default/shop/blobs/.shards", wantErr: "starts with '.'"},
		{path: "/repositories/default/shop/blobs/..%2F..%2Fetc", wantErr: "blob ID"},
		{path: "/repositories/default/shop/blobs/a%2Fb", wantErr: `has '/'`},
		{path: "/repositories/default/shop/blobs/a%5Cb", wantErr: `has '\\'`},
		{path: "/repositories/default/shop/blobs/a%00", wantErr: "blob ID"},
		{path: "/repositories/default/shop/blobs/", wantErr: "empty blob ID"},
		{path: "/repositories/default/../blobs/x", wantErr: `namespace ".."`},
		{path: "/repositories/default/sh%2Fop/blobs/x", wantErr: `namespace "sh/op"`},
		{path: "/repositories/default/Shop/blobs/x", wantErr: `namespace "Shop"`},
		{path: "/repositories/../shop/blobs/x", wantErr: `storage location ".."`},
		{path: "/repositories/Default/shop/blobs/x", wantErr: `storage location "Default"`},
		{path: "/repositories/default/shop/blobs/a/b", wantErr: "no such path"},
		{path: "/repositories/default/shop/other/x", wantErr: "no such path"},
		{path: "/other/default/shop/blobs/x", wantErr: "no such path"},
		{path: "/repositories/default/shop/sessions/nothex", wantErr: "session ID"},
		{path: "/repositories/default/shop/metadata", wantErr: "no such path"},
		{path: "/repositories/default/shop/blobs/%zz", wantErr: "path segment"},
	}
	for _, tt := range tests {
		got, err := parseRoute(tt.path)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseRoute(%s) = %+v, %v; want an error with %q", tt.path, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseRoute(%s) = %+v, %v; want %+v", tt.path, got, err, tt.want)
		}
	}
}

func TestCheckBlobIDPrefix(t *testing.T) {
	for _, ok := range []string{"", "p", "xn0_", "kopia."} {
		if err := checkBlobID(ok, true); err != nil {
			t.Errorf("prefix %q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"..", "../", "/", "a/b", ".", strings.Repeat("a", 300)} {
		if err := checkBlobID(bad, true); err == nil {
			t.Errorf("prefix %q accepted", bad)
		}
	}
}

// TestRequestsOutsideTheRepositoryAreRefused sends what a confused or hostile client could:
// none reaches the storage.
func TestRequestsOutsideTheRepositoryAreRefused(t *testing.T) {
	st, dir := fsStorage(t)
	b := staticBackend(st, false)
	e := newEnv(t, b, nil)
	sess, err := e.locks.Open(RepositoryKey("default", "shop"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"/repositories/default/shop/blobs/..%2F..%2Fescaped",
		"/repositories/default/shop/blobs/%2Ftmp%2Fescaped",
		"/repositories/default/shop/blobs/..",
		"/repositories/default/shop/blobs/.shards",
		"/repositories/default/shop/../other/blobs/escaped",
		"/repositories/default/sh%2F..%2Fop/blobs/escaped",
		"/repositories/default/..%2Fshop/blobs/escaped",
		"/repositories/default/shop/blobs/a/escaped",
		"/repositories/default/shop/blobs?prefix=..%2F",
	} {
		for _, method := range []string{http.MethodPut, http.MethodGet} {
			resp := e.request(method, p, sess.ID, "payload")
			if resp.status != http.StatusBadRequest && resp.status != http.StatusMethodNotAllowed {
				t.Errorf("%s %s = %d %s, want 400", method, p, resp.status, resp.body)
			}
		}
	}
	if n := b.opens.Load(); n != 0 {
		t.Errorf("the storage was opened %d times for refused requests", n)
	}
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if en.Name() != ".shards" {
			t.Errorf("a refused request wrote %s", en.Name())
		}
	}
}

func TestAuthentication(t *testing.T) {
	reviews := 0
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		st := authenticationv1.TokenReviewStatus{Audiences: tr.Spec.Audiences, Authenticated: true}
		switch tr.Spec.Token {
		case "agent":
			st.User.Username = agentUser
		case "other":
			st.User.Username = "system:serviceaccount:shop:default"
		default:
			st = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, &authenticationv1.TokenReview{Status: st}, nil
	})
	st, dir := fsStorage(t)
	b := staticBackend(st, false)
	e := newEnv(t, b, nil)
	e.server.auth = NewTokenReviewAuthenticator(cs, Audience, agentUser)
	path := "/repositories/default/shop/sessions"

	if resp := e.requestWithToken(http.MethodPost, path, "", "", ""); resp.status != http.StatusUnauthorized {
		t.Errorf("no token: %d", resp.status)
	}
	for _, tok := range []string{"forged", "other"} {
		resp := e.requestWithToken(http.MethodPost, path, tok, "", "")
		if resp.status != http.StatusForbidden {
			t.Errorf("token %s: %d %s", tok, resp.status, resp.body)
		}
		resp = e.requestWithToken(http.MethodPut, "/repositories/default/shop/blobs/p1", tok, strings.Repeat("ab", 16), "data")
		if resp.status != http.StatusForbidden {
			t.Errorf("token %s PUT: %d", tok, resp.status)
		}
	}
	if n := b.opens.Load(); n != 0 {
		t.Errorf("the storage was opened for refused tokens")
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("refused requests wrote %v", entries)
	}

	// The node agent's token works, and a session is needed for blobs.
	if err := os.WriteFile(e.tokenFile, []byte("agent"), 0o600); err != nil {
		t.Fatal(err)
	}
	if resp := e.requestWithToken(http.MethodPut, "/repositories/default/shop/blobs/p1", "agent", "", "data"); resp.status != http.StatusConflict {
		t.Errorf("PUT without a session: %d", resp.status)
	}
	c := e.client("default", "shop")
	if err := c.PutBlob(context.Background(), "p1", sliceBytes("data"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := blobOf(t, st, "p1"); err != nil || got != "data" {
		t.Errorf("stored %q, %v", got, err)
	}
}

func TestTokenReviewAuthenticator(t *testing.T) {
	var reviews atomic.Int32
	var apiDown atomic.Bool
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		if apiDown.Load() {
			return true, nil, errors.New("connection refused")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		st := authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences}
		switch tr.Spec.Token {
		case "agent", "agent-rotated":
			st.User.Username = agentUser
		case "wrong-audience":
			st.User.Username, st.Audiences = agentUser, nil
		case "other":
			st.User.Username = "system:serviceaccount:shop:default"
		default:
			st = authenticationv1.TokenReviewStatus{Error: "token expired"}
		}
		return true, &authenticationv1.TokenReview{Status: st}, nil
	})
	fc := clocktesting(time.Now())
	a := NewTokenReviewAuthenticator(cs, Audience, agentUser).WithClock(fc)
	ctx := context.Background()

	for range 3 {
		if u, err := a.Authenticate(ctx, "agent"); err != nil || u != agentUser {
			t.Fatalf("agent: %q, %v", u, err)
		}
	}
	if n := reviews.Load(); n != 1 {
		t.Errorf("%d reviews for one token, want 1 (cached)", n)
	}
	// Another token (the rotated one) is its own entry.
	if _, err := a.Authenticate(ctx, "agent-rotated"); err != nil || reviews.Load() != 2 {
		t.Errorf("rotated token: %v, %d reviews", err, reviews.Load())
	}
	// After the cache's minute, the token is reviewed again; a failing API is not a refusal.
	fc.Step(maxTokenCacheTTL)
	apiDown.Store(true)
	if _, err := a.Authenticate(ctx, "agent"); err == nil || errors.Is(err, ErrRefused) {
		t.Errorf("API down: %v, want an error that is not ErrRefused", err)
	}
	apiDown.Store(false)
	for tok, want := range map[string]string{
		"forged": "token expired", "other": "user system:serviceaccount:shop:default may not use",
		"wrong-audience": "audience cairn-repository", "": "no token",
	} {
		before := reviews.Load()
		for range 2 {
			if _, err := a.Authenticate(ctx, tok); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), want) {
				t.Errorf("token %q: %v, want ErrRefused with %q", tok, err, want)
			}
		}
		if tok != "" && reviews.Load()-before != 2 {
			t.Errorf("token %q: a refusal was cached", tok)
		}
	}
	// The cache holds hashes, never tokens.
	for k := range a.cache {
		if strings.Contains(string(k[:]), "agent") {
			t.Error("a token is kept in clear")
		}
	}
}

func TestReadOnlyLocation(t *testing.T) {
	st, _ := fsStorage(t)
	if err := st.PutBlob(context.Background(), "p1", sliceBytes("old"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, staticBackend(st, true), nil)
	c := e.client("archive", "shop")
	ctx := context.Background()
	if !c.IsReadOnly() {
		t.Error("IsReadOnly = false")
	}
	const msg = "storage location archive is ReadOnly: volume data cannot be written to it"
	if err := c.PutBlob(ctx, "p2", sliceBytes("new"), blob.PutOptions{}); !errors.Is(err, ErrReadOnly) || err.Error() != msg {
		t.Errorf("PutBlob = %v, want %q", err, msg)
	}
	if err := c.DeleteBlob(ctx, "p1"); !errors.Is(err, ErrReadOnly) || err.Error() != msg {
		t.Errorf("DeleteBlob = %v", err)
	}
	if got, err := blobOf(t, c, "p1"); err != nil || got != "old" {
		t.Errorf("GetBlob = %q, %v", got, err)
	}
	if ids := sortedIDs(t, c); strings.Join(ids, ",") != "p1" {
		t.Errorf("ListBlobs = %v", ids)
	}
	if _, err := blobOf(t, st, "p2"); !errors.Is(err, blob.ErrBlobNotFound) {
		t.Errorf("p2 was written: %v", err)
	}
}

func TestBlobErrorsMapToKopias(t *testing.T) {
	st, _ := fsStorage(t)
	e := newEnv(t, staticBackend(st, false), nil)
	c := e.client("default", "shop")
	ctx := context.Background()

	if _, err := blobOf(t, c, "pmissing"); !errors.Is(err, blob.ErrBlobNotFound) {
		t.Errorf("GetBlob of a missing blob = %v", err)
	}
	if _, err := c.GetMetadata(ctx, "pmissing"); !errors.Is(err, blob.ErrBlobNotFound) {
		t.Errorf("GetMetadata of a missing blob = %v", err)
	}

	var modTime time.Time
	if err := c.PutBlob(ctx, "p1", sliceBytes("0123456789"), blob.PutOptions{GetModTime: &modTime}); err != nil {
		t.Fatal(err)
	}
	md, err := c.GetMetadata(ctx, "p1")
	if err != nil || md.Length != 10 || md.BlobID != "p1" || !md.Timestamp.Equal(modTime) || modTime.IsZero() {
		t.Errorf("GetMetadata = %+v, %v; PutBlob's mod time %v", md, err, modTime)
	}
	var out outputBuffer
	if err := c.GetBlob(ctx, "p1", 2, 5, &out); err != nil || out.String() != "23456" {
		t.Errorf("GetBlob(2, 5) = %q, %v", out.String(), err)
	}
	out.Reset()
	if err := c.GetBlob(ctx, "p1", 7, -1, &out); err != nil || out.String() != "789" {
		t.Errorf("GetBlob(7, -1) = %q, %v", out.String(), err)
	}
	for _, r := range [][2]int64{{5, 100}, {20, 1}, {11, -1}} {
		out.Reset()
		if err := c.GetBlob(ctx, "p1", r[0], r[1], &out); !errors.Is(err, blob.ErrInvalidRange) {
			t.Errorf("GetBlob(%d, %d) = %v, want ErrInvalidRange", r[0], r[1], err)
		}
	}

	// DoNotRecreate: the first write wins, the second is refused and changes nothing.
	if err := c.PutBlob(ctx, "kopia.lock", sliceBytes("first"), blob.PutOptions{DoNotRecreate: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.PutBlob(ctx, "kopia.lock", sliceBytes("second"), blob.PutOptions{DoNotRecreate: true}); !errors.Is(err, blob.ErrBlobAlreadyExists) {
		t.Errorf("second DoNotRecreate PutBlob = %v", err)
	}
	if got, _ := blobOf(t, st, "kopia.lock"); got != "first" {
		t.Errorf("the blob became %q", got)
	}
	// Options the proxy cannot honour are refused, not ignored.
	if err := c.PutBlob(ctx, "p2", sliceBytes("x"), blob.PutOptions{SetModTime: time.Unix(1, 0)}); !errors.Is(err, blob.ErrSetTimeUnsupported) {
		t.Errorf("SetModTime: %v", err)
	}
	if err := c.PutBlob(ctx, "p2", sliceBytes("x"), blob.PutOptions{RetentionMode: blob.Governance, RetentionPeriod: time.Hour}); !errors.Is(err, blob.ErrUnsupportedPutBlobOption) {
		t.Errorf("retention: %v", err)
	}
	if err := c.DeleteBlob(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if ids := sortedIDs(t, c); strings.Join(ids, ",") != "kopia.lock" {
		t.Errorf("after delete: %v", ids)
	}
}

func TestBackendErrorsReachTheClient(t *testing.T) {
	// The storage location cannot be opened: New fails at once with the reason.
	missing := &backendFunc{open: func(context.Context, string, string) (blob.Storage, bool, error) {
		return nil, false, errors.New("storage location gone does not exist in namespace cairn-system")
	}}
	e := newEnv(t, missing, nil)
	start := time.Now()
	_, err := newClient(context.Background(), e.options("gone", "shop"), defaultRetry)
	if err == nil || !strings.Contains(err.Error(), "storage location gone does not exist in namespace cairn-system") {
		t.Errorf("New = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("New took %s: a configuration error was retried", d)
	}

	// A storage call fails: its message comes back.
	st, _ := fsStorage(t)
	e2 := newEnv(t, staticBackend(&failing{Storage: st, err: errors.New("disk on fire")}, false), nil)
	c := e2.client("default", "shop")
	if err := c.PutBlob(context.Background(), "p1", sliceBytes("x"), blob.PutOptions{}); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("PutBlob = %v", err)
	}
}

type failing struct {
	blob.Storage
	err error
}

func (f *failing) PutBlob(context.Context, blob.ID, blob.Bytes, blob.PutOptions) error { return f.err }

// TestCancelEndsInFlightRequests: a cancelled caller is never held by a stalled storage, and
// the storage call is cancelled too.
func TestCancelEndsInFlightRequests(t *testing.T) {
	for _, op := range []string{"get", "put"} {
		t.Run(op, func(t *testing.T) {
			st, _ := fsStorage(t)
			stall := newStalling(st, false)
			e := newEnv(t, staticBackend(stall, false), nil)
			c := e.client("default", "shop")
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				<-stall.entered
				cancel()
			}()
			start := time.Now()
			var err error
			if op == "get" {
				_, err = blobOf(t, &ctxStorage{c, ctx}, "p1")
			} else {
				err = c.PutBlob(ctx, "p1", sliceBytes("data"), blob.PutOptions{})
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want context.Canceled", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %s after the cancel", d)
			}
			select {
			case <-stall.stopped:
			case <-time.After(2 * time.Second):
				t.Error("the storage call went on after the client went away")
			}
		})
	}
}

// ctxStorage reads with a fixed context.
type ctxStorage struct {
	*proxyStorage
	ctx context.Context
}

func (s *ctxStorage) GetBlob(_ context.Context, id blob.ID, offset, length int64, out blob.OutputBuffer) error {
	return s.proxyStorage.GetBlob(s.ctx, id, offset, length, out)
}

// TestStalledStorageStaysInFlight: a storage that ignores its context does not hold the
// request, but maintenance waits until the call really returns.
func TestStalledStorageStaysInFlight(t *testing.T) {
	st, _ := fsStorage(t)
	stall := newStalling(st, true)
	locks := NewLocks(0, nil)
	e := newEnv(t, staticBackend(stall, false), locks)
	c := e.client("default", "shop")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-stall.entered
		cancel()
	}()
	if err := c.PutBlob(ctx, "p1", sliceBytes("x"), blob.PutOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("PutBlob = %v", err)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		release, err := locks.Maintain(context.Background(), RepositoryKey("default", "shop"))
		if err == nil {
			release()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("maintenance started while a write was still running: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(stall.release)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("maintenance did not start once the write ended")
	}
}

func TestMaintenanceRefusesSessionsOverHTTP(t *testing.T) {
	st, _ := fsStorage(t)
	locks := NewLocks(0, nil)
	e := newEnv(t, staticBackend(st, false), locks)
	release, err := locks.Maintain(context.Background(), RepositoryKey("default", "shop"))
	if err != nil {
		t.Fatal(err)
	}
	resp := e.request(http.MethodPost, "/repositories/default/shop/sessions", "", "")
	if resp.status != http.StatusServiceUnavailable || resp.header.Get("Retry-After") == "" || resp.header.Get(headerError) != codeMaintenance {
		t.Errorf("session during maintenance: %d, Retry-After %q", resp.status, resp.header.Get("Retry-After"))
	}
	if _, err := newClient(context.Background(), e.options("default", "shop"), fastRetry); !errors.Is(err, ErrMaintenanceRunning) {
		t.Errorf("New during maintenance = %v", err)
	}
	// Another repository is not held.
	e.client("default", "other")
	release()
	e.client("default", "shop")
}

func TestLostSessionIsNotRenewed(t *testing.T) {
	st, _ := fsStorage(t)
	locks := NewLocks(300*time.Millisecond, nil)
	e := newEnv(t, staticBackend(st, false), locks)
	c := e.client("default", "shop")
	ctx := context.Background()

	// Refreshed every TTL/3, the session outlives its TTL many times over.
	time.Sleep(time.Second)
	if err := c.PutBlob(ctx, "p1", sliceBytes("x"), blob.PutOptions{}); err != nil {
		t.Fatalf("PutBlob after several TTLs: %v", err)
	}

	// The proxy forgets it (expiry, or a new leader): every call fails from then on.
	locks.Close(RepositoryKey("default", "shop"), c.session)
	eventually(t, "the client notices", func() bool { return c.check() != nil })
	for range 2 {
		if _, err := blobOf(t, c, "p1"); !errors.Is(err, ErrNoSession) {
			t.Errorf("GetBlob after the session was lost = %v", err)
		}
	}
	// No new session was taken behind the caller's back: maintenance can start.
	mctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	release, err := locks.Maintain(mctx, RepositoryKey("default", "shop"))
	if err != nil {
		t.Fatalf("Maintain: %v", err)
	}
	release()
}

func TestNotTheLeader(t *testing.T) {
	st, _ := fsStorage(t)
	e := newEnv(t, staticBackend(st, false), nil)
	var leading atomic.Bool
	e.server.Leader = leading.Load
	resp := e.request(http.MethodPost, "/repositories/default/shop/sessions", "", "")
	if resp.status != http.StatusServiceUnavailable || !strings.Contains(resp.body, "not the leader") {
		t.Errorf("not the leader: %d %s", resp.status, resp.body)
	}
	// A client rides out a leader change.
	go func() {
		time.Sleep(100 * time.Millisecond)
		leading.Store(true)
	}()
	e.client("default", "shop")
}

func TestClientRetries(t *testing.T) {
	st, _ := fsStorage(t)
	var failures, calls atomic.Int32
	var status atomic.Int32
	flaky := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "/blobs/") {
				calls.Add(1)
				if failures.Add(-1) >= 0 {
					http.Error(w, "upstream went away", int(status.Load()))
					return
				}
			}
			h.ServeHTTP(w, r)
		})
	}
	e := newEnv(t, staticBackend(st, false), nil, flaky)
	c := e.client("default", "shop")
	ctx := context.Background()

	// 502/503/504 are retried; the PUT body is sent again whole.
	for _, code := range []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		status.Store(int32(code))
		failures.Store(2)
		calls.Store(0)
		if err := c.PutBlob(ctx, "p1", sliceBytes("payload"), blob.PutOptions{}); err != nil {
			t.Fatalf("PutBlob through %d: %v", code, err)
		}
		if calls.Load() != 3 {
			t.Errorf("%d: %d calls, want 3", code, calls.Load())
		}
	}
	if got, _ := blobOf(t, st, "p1"); got != "payload" {
		t.Errorf("stored %q", got)
	}
	// A 4xx is never retried.
	status.Store(http.StatusBadRequest)
	failures.Store(5)
	calls.Store(0)
	if _, err := blobOf(t, c, "p1"); err == nil || !strings.Contains(err.Error(), "upstream went away") {
		t.Errorf("GetBlob through a 400 = %v", err)
	}
	if calls.Load() != 1 {
		t.Errorf("a 400 was tried %d times", calls.Load())
	}
	// The budget ends the retries.
	status.Store(http.StatusServiceUnavailable)
	failures.Store(1 << 20)
	start := time.Now()
	if _, err := blobOf(t, c, "p1"); err == nil || !strings.Contains(err.Error(), "gave up") {
		t.Errorf("GetBlob through endless 503s = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("retried for %s", d)
	}
	// A cancelled context ends the waiting at once.
	patient, err := newClient(ctx, e.options("default", "shop"), retryPolicy{initial: 10 * time.Second, maxDelay: 10 * time.Second, budget: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer patient.Close(ctx)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := blobOf(t, &ctxStorage{patient, cctx}, "p1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("GetBlob with a context ending during the backoff = %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the backoff outlived the context by %s", d-200*time.Millisecond)
	}
}

func TestConnectionRefusedIsRetriedThenReported(t *testing.T) {
	e := newEnv(t, staticBackend(nil, false), nil)
	opt := e.options("default", "shop")
	e.http.Close()
	start := time.Now()
	_, err := newClient(context.Background(), opt, fastRetry)
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "gave up") {
		t.Errorf("New with no proxy = %v", err)
	}
	if d := time.Since(start); d < fastRetry.budget/2 || d > 3*time.Second {
		t.Errorf("gave up after %s", d)
	}
}

func TestRetryDecisions(t *testing.T) {
	p := retryPolicy{initial: 100 * time.Millisecond, maxDelay: 5 * time.Second, budget: time.Minute}
	for _, tt := range []struct {
		attempt    int
		retryAfter time.Duration
		want       time.Duration
	}{
		{0, 0, 100 * time.Millisecond}, {1, 0, 200 * time.Millisecond}, {3, 0, 800 * time.Millisecond},
		{10, 0, 5 * time.Second}, {60, 0, 5 * time.Second}, {0, time.Second, time.Second}, {0, 30 * time.Second, 5 * time.Second},
	} {
		if got := p.delay(tt.attempt, tt.retryAfter); got != tt.want {
			t.Errorf("delay(%d, %s) = %s, want %s", tt.attempt, tt.retryAfter, got, tt.want)
		}
	}
	for code, want := range map[int]bool{400: false, 401: false, 403: false, 404: false, 409: false, 416: false, 500: false, 502: true, 503: true, 504: true} {
		if retryableStatus(code) != want {
			t.Errorf("retryableStatus(%d) = %v", code, !want)
		}
	}
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{errors.New("x509: certificate signed by unknown authority"), false},
		{context.Canceled, false},
		{io.ErrUnexpectedEOF, true},
		{&os.SyscallError{Syscall: "connect", Err: errConnRefused}, true},
	} {
		if got := transient(tt.err); got != tt.want {
			t.Errorf("transient(%v) = %v", tt.err, got)
		}
	}
}

func TestTokenFileIsReadAgainEveryMinute(t *testing.T) {
	fc := clocktesting(time.Now())
	file := t.TempDir() + "/token"
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ts := &tokenSource{file: file, clock: fc}
	write("one\n")
	if tok, err := ts.get(); tok != "one" || err != nil {
		t.Fatalf("get = %q, %v", tok, err)
	}
	write("two")
	if tok, _ := ts.get(); tok != "one" {
		t.Errorf("read again within the minute: %q", tok)
	}
	fc.Step(tokenRereadInterval)
	if tok, _ := ts.get(); tok != "two" {
		t.Errorf("not read again after a minute: %q", tok)
	}
	write("")
	fc.Step(tokenRereadInterval)
	if _, err := ts.get(); err == nil {
		t.Error("an empty token file was accepted")
	}
}

func TestBackendCacheReopensAndCloses(t *testing.T) {
	fc := clocktesting(time.Now())
	var opened []*closeCounter
	fail := false
	b := &backendFunc{open: func(context.Context, string, string) (blob.Storage, bool, error) {
		if fail {
			return nil, false, errors.New("unreachable")
		}
		s := &closeCounter{}
		opened = append(opened, s)
		return s, false, nil
	}}
	c := newBackendCache(b, DefaultBackendTTL, fc)
	ctx := context.Background()
	acquire := func() (blob.Storage, func()) {
		t.Helper()
		st, _, release, err := c.acquire(ctx, "default", "shop")
		if err != nil {
			t.Fatal(err)
		}
		return st, release
	}
	s1, r1 := acquire()
	s2, r2 := acquire()
	if s1 != s2 || b.opens.Load() != 1 {
		t.Fatalf("reopened within the TTL: %d opens", b.opens.Load())
	}
	r2()
	fc.Step(DefaultBackendTTL)
	s3, r3 := acquire()
	if s3 == s1 || b.opens.Load() != 2 {
		t.Fatal("not reopened after the TTL")
	}
	if opened[0].closed.Load() != 0 {
		t.Error("a storage in use was closed")
	}
	r1()
	eventually(t, "the stale storage is closed once unused", func() bool { return opened[0].closed.Load() == 1 })
	r3()

	// Failures are not kept.
	fc.Step(DefaultBackendTTL)
	fail = true
	for range 2 {
		if _, _, _, err := c.acquire(ctx, "default", "shop"); err == nil {
			t.Fatal("a failed open succeeded")
		}
	}
	if b.opens.Load() != 4 {
		t.Errorf("%d opens, want 4 (a failure is tried again)", b.opens.Load())
	}
	eventually(t, "the expired storage is closed", func() bool { return opened[1].closed.Load() == 1 })
	c.closeAll()
}

type closeCounter struct {
	blob.Storage
	closed atomic.Int32
}

func (c *closeCounter) Close(context.Context) error { c.closed.Add(1); return nil }
