package download_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cairn-backup/cairn/internal/download"
	"github.com/cairn-backup/cairn/internal/storage"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func newSigner(t *testing.T) *download.Signer {
	t.Helper()
	s, err := download.NewRandomSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func query(t *testing.T, u string) url.Values {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return parsed.Query()
}

func TestVerify(t *testing.T) {
	signer, other := newSigner(t), newSigner(t)
	obj := download.Object{Location: "default", Key: "backups/team-a/b1/b1.tar.gz", Expires: now.Add(10 * time.Minute)}
	good := query(t, signer.URL("http://cairn:8086", obj))
	with := func(param, value string) url.Values {
		q := url.Values{}
		for k, v := range good {
			q[k] = append([]string(nil), v...)
		}
		q.Set(param, value)
		return q
	}
	tests := []struct {
		name    string
		query   url.Values
		now     time.Time
		wantErr error
	}{
		{name: "valid", query: good, now: now},
		{name: "one second before expiry", query: good, now: obj.Expires.Add(-time.Second)},
		{name: "at expiry", query: good, now: obj.Expires, wantErr: download.ErrExpired},
		{name: "after expiry", query: good, now: now.Add(time.Hour), wantErr: download.ErrExpired},
		{name: "another key", query: with("key", "backups/team-b/b1/b1.tar.gz"), now: now, wantErr: download.ErrBadSignature},
		{name: "a climbing key", query: with("key", "backups/team-a/b1/../../team-b/b1/b1.tar.gz"), now: now, wantErr: download.ErrBadSignature},
		{name: "another location", query: with("location", "other"), now: now, wantErr: download.ErrBadSignature},
		{name: "the expiry pushed back", query: with("expires", "99999999999"), now: now, wantErr: download.ErrBadSignature},
		{name: "a signature one hex digit off", query: with("signature", flipLast(good.Get("signature"))), now: now, wantErr: download.ErrBadSignature},
		{name: "a signature that is not hex", query: with("signature", "zz"), now: now, wantErr: download.ErrBadSignature},
		{name: "an empty signature", query: with("signature", ""), now: now, wantErr: download.ErrBadSignature},
		{name: "no signature", query: url.Values{"location": good["location"], "key": good["key"], "expires": good["expires"]}, now: now, wantErr: download.ErrBadSignature},
		{name: "a second key", query: func() url.Values { q := with("key", good.Get("key")); q.Add("key", "x"); return q }(), now: now, wantErr: download.ErrBadSignature},
		{name: "an expiry that is not a number", query: with("expires", "soon"), now: now, wantErr: download.ErrBadSignature},
		{name: "signed by another manager", query: query(t, other.URL("http://cairn:8086", obj)), now: now, wantErr: download.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := signer.Verify(tt.query, tt.now)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && (got.Location != obj.Location || got.Key != obj.Key || !got.Expires.Equal(obj.Expires)) {
				t.Errorf("object = %+v, want %+v", got, obj)
			}
		})
	}
}

func flipLast(s string) string {
	if strings.HasSuffix(s, "0") {
		return s[:len(s)-1] + "1"
	}
	return s[:len(s)-1] + "0"
}

func TestNewSignerRefusesShortKeys(t *testing.T) {
	if _, err := download.NewSigner(make([]byte, 16)); err == nil {
		t.Fatal("a 16-byte key was accepted")
	}
}

// fixture is a download server over a filesystem store with two teams' archives.
type fixture struct {
	signer *download.Signer
	server *httptest.Server
	clock  *clocktesting.FakeClock
	opened []string
	fs     *storage.Filesystem
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	fs, err := storage.NewFilesystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 3<<20)
	_, _ = rand.Read(big)
	for key, data := range map[string][]byte{
		"backups/team-a/b1/b1.tar.gz":   []byte("team a's archive"),
		"backups/team-b/b1/b1.tar.gz":   []byte("team b's archive"),
		"backups/team-a/big/big.tar.gz": big,
	} {
		if err := fs.Put(context.Background(), key, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{signer: newSigner(t), clock: clocktesting.NewFakeClock(now)}
	srv := &download.Server{Signer: f.signer, Clock: f.clock, Log: logr.Discard(), Authenticate: authenticateTestTokens,
		Open: func(ctx context.Context, location, key string) (io.ReadCloser, error) {
			f.opened = append(f.opened, location+":"+key)
			if location != "default" {
				return nil, download.ErrNotFound
			}
			rc, err := fs.Get(ctx, key)
			if errors.Is(err, storage.ErrNotFound) {
				return nil, download.ErrNotFound
			}
			return rc, err
		}}
	f.server = httptest.NewServer(srv)
	t.Cleanup(f.server.Close)
	f.fs = fs
	return f
}

// put stores data under key in the fixture's location.
func (f *fixture) put(t *testing.T, key string, data []byte) {
	t.Helper()
	if err := f.fs.Put(context.Background(), key, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) url(key string, expires time.Time) string {
	return f.signer.URL(f.server.URL, download.Object{Location: "default", Key: key, Expires: expires})
}

// response is what a fetch got.
type response struct {
	StatusCode    int
	ContentLength int64
	Header        http.Header
}

func fetch(t *testing.T, method, u string) (response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil) //nolint:noctx // a test request
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return response{StatusCode: resp.StatusCode, ContentLength: resp.ContentLength, Header: resp.Header}, string(body)
}

func TestServer(t *testing.T) {
	f := newFixture(t)
	valid := f.url("backups/team-a/b1/b1.tar.gz", now.Add(10*time.Minute))
	tampered := strings.Replace(valid, "team-a", "team-b", 1)
	traversal := strings.Replace(valid, "team-a%2Fb1", "team-a%2Fb1%2F..%2F..%2Fteam-b%2Fb1", 1)
	tests := []struct {
		name       string
		method     string
		url        string
		wantStatus int
		wantBody   string
	}{
		{name: "a valid URL", method: http.MethodGet, url: valid, wantStatus: http.StatusOK, wantBody: "team a's archive"},
		{name: "HEAD", method: http.MethodHead, url: valid, wantStatus: http.StatusOK},
		{name: "another team's key under team a's signature", method: http.MethodGet, url: tampered, wantStatus: http.StatusForbidden},
		{name: "a climbing key under team a's signature", method: http.MethodGet, url: traversal, wantStatus: http.StatusForbidden},
		{name: "expired", method: http.MethodGet, url: f.url("backups/team-a/b1/b1.tar.gz", now.Add(-time.Second)), wantStatus: http.StatusForbidden},
		{name: "unsigned", method: http.MethodGet, url: f.server.URL + download.Path + "?location=default&key=backups/team-a/b1/b1.tar.gz", wantStatus: http.StatusForbidden},
		{name: "a signed file that is gone", method: http.MethodGet, url: f.url("backups/team-a/gone/gone.tar.gz", now.Add(time.Minute)), wantStatus: http.StatusNotFound},
		{name: "POST", method: http.MethodPost, url: valid, wantStatus: http.StatusMethodNotAllowed},
		{name: "another path", method: http.MethodGet, url: strings.Replace(valid, download.Path, "/download/../etc", 1), wantStatus: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.opened = nil
			resp, body := fetch(t, tt.method, tt.url)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d (%s), want %d", resp.StatusCode, body, tt.wantStatus)
			}
			if tt.wantBody != "" && body != tt.wantBody {
				t.Errorf("body = %q, want %q", body, tt.wantBody)
			}
			// Nothing is opened for a request whose signature fails.
			if tt.wantStatus == http.StatusForbidden && len(f.opened) > 0 {
				t.Errorf("opened %v for a refused request", f.opened)
			}
		})
	}
}

func TestServerStreamsLargeFilesWithLength(t *testing.T) {
	f := newFixture(t)
	resp, body := fetch(t, http.MethodGet, f.url("backups/team-a/big/big.tar.gz", now.Add(time.Minute)))
	if resp.StatusCode != http.StatusOK || len(body) != 3<<20 {
		t.Fatalf("status %d, %d bytes; want 200 and %d bytes", resp.StatusCode, len(body), 3<<20)
	}
	if resp.ContentLength != 3<<20 {
		t.Errorf("Content-Length = %d, want %d", resp.ContentLength, 3<<20)
	}
	if got := resp.Header.Get("Content-Disposition"); got != `attachment; filename="big.tar.gz"` {
		t.Errorf("Content-Disposition = %q", got)
	}
}

func TestServerExpiresWithTheClock(t *testing.T) {
	f := newFixture(t)
	u := f.url("backups/team-a/b1/b1.tar.gz", now.Add(10*time.Minute))
	if resp, _ := fetch(t, http.MethodGet, u); resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d before expiry, want 200", resp.StatusCode)
	}
	f.clock.Step(10 * time.Minute)
	if resp, _ := fetch(t, http.MethodGet, u); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status = %d at expiry, want 403", resp.StatusCode)
	}
}

func TestListenBase(t *testing.T) {
	tests := []struct{ addr, base, wantPrefix string }{
		{addr: "127.0.0.1:0", wantPrefix: "http://127.0.0.1:"},
		{addr: "127.0.0.1:0", base: "https://downloads.example.com", wantPrefix: "https://downloads.example.com"},
	}
	for _, tt := range tests {
		s, err := download.Listen(tt.addr, tt.base)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(s.Base(), tt.wantPrefix) {
			t.Errorf("Listen(%q, %q).Base() = %q, want prefix %q", tt.addr, tt.base, s.Base(), tt.wantPrefix)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- s.Start(ctx) }()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}
}

func TestSignersWithOneKeyAgree(t *testing.T) {
	key := bytes.Repeat([]byte{7}, download.KeySize)
	a, err := download.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := download.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	obj := download.Object{Location: "default", Key: "backups/a/b/b.tar.gz", Expires: now.Add(time.Minute)}
	if _, err := b.Verify(query(t, a.URL("http://replica-a:8086", obj)), now); err != nil {
		t.Errorf("a replica with the same key refused the URL: %v", err)
	}
}

// failingReader fails its first read with err.
type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

// A download that fails before its first byte says why when it is the file's own fault (it does
// not decrypt as the object it is stored as), and no more than "cannot be read now" when it is
// the storage's: a storage error may name the endpoint and bucket, which a member is not told.
func TestServerFailureSaysOnlyTheFilesFault(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		want    string
		mustNot string
	}{
		{name: "storage down", err: errors.New(`Get "https://minio.internal:9000/secret-bucket/cluster-1/backups/x": dial tcp: connection refused`),
			want: "the file cannot be read now", mustNot: "secret-bucket"},
		{name: "damaged", err: fmt.Errorf("decrypting backups/team-a/b1/b1.tar.gz: %w: moved or copied here", storage.ErrDamaged),
			want: "the file cannot be read: decrypting backups/team-a/b1/b1.tar.gz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			signer := newSigner(t)
			srv := httptest.NewServer(&download.Server{Signer: signer, Clock: clocktesting.NewFakeClock(now), Log: logr.Discard(), Authenticate: authenticateTestTokens,
				Open: func(context.Context, string, string) (io.ReadCloser, error) {
					return io.NopCloser(failingReader{tt.err}), nil
				}})
			defer srv.Close()
			u := signer.URL(srv.URL, download.Object{Location: "default", Key: "backups/team-a/b1/b1.tar.gz", Expires: now.Add(time.Minute)})
			resp, body := fetch(t, http.MethodGet, u)
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, tt.want) {
				t.Fatalf("got %d %q, want 502 with %q", resp.StatusCode, body, tt.want)
			}
			if tt.mustNot != "" && strings.Contains(body, tt.mustNot) {
				t.Errorf("body %q names %q", body, tt.mustNot)
			}
		})
	}
}
