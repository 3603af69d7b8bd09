package emulator

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// FakeGCSServerVersion is the Google Cloud Storage emulator the tests run; the Makefile
// installs the same (github.com/fsouza/fake-gcs-server) into bin/.
const FakeGCSServerVersion = "v1.56.1"

// FakeGCSServerBinary is $FAKE_GCS_SERVER, else bin/fake-gcs-server-<version>.
func FakeGCSServerBinary() string {
	return binaryFrom("FAKE_GCS_SERVER", "fake-gcs-server-"+FakeGCSServerVersion)
}

// FakeGCS is fake-gcs-server on 127.0.0.1 (plain http, its filesystem backend), for tests.
// It does not check credentials or signatures: a request with any token, or none, is served
// (TokenServer stands in for Google's token endpoint, which does check keys).
type FakeGCS struct {
	emulator
}

// StartFakeGCS starts fake-gcs-server on 127.0.0.1 for the test and stops it when the test
// ends.
func StartFakeGCS(t TB) *FakeGCS {
	t.Helper()
	return StartFakeGCSOn(t, "127.0.0.1")
}

// StartFakeGCSOn is StartFakeGCS on another address of the machine, host: the node suite's
// pods reach the node's address, on the loopback of the suite's own network namespace.
func StartFakeGCSOn(t TB, host string) *FakeGCS {
	t.Helper()
	port := freePortOn(t, host)
	f := &FakeGCS{emulator{
		name: "fake-gcs-server", addr: net.JoinHostPort(host, strconv.Itoa(port)), binary: FakeGCSServerBinary(), t: t,
		startTimeout: 30 * time.Second,
	}}
	f.args = []string{"-scheme", "http", "-host", host, "-port", strconv.Itoa(port),
		"-backend", "filesystem", "-filesystem-root", t.TempDir(), "-log-level", "error",
		"-external-url", "http://" + f.addr, "-public-host", f.addr}
	f.start()
	t.Cleanup(f.stop)
	return f
}

// Endpoint is the server's URL, for config.endpoint.
func (f *FakeGCS) Endpoint() string { return "http://" + f.addr }

// Start starts a stopped server again, with its data.
func (f *FakeGCS) Start() { f.start() }

// Stop kills the server.
func (f *FakeGCS) Stop() { f.stop() }

// Pause stops the server's process (SIGSTOP); Resume continues it.
func (f *FakeGCS) Pause() { f.pause() }

// Resume continues a paused server.
func (f *FakeGCS) Resume() { f.resume() }

// CreateBucket makes an empty bucket.
func (f *FakeGCS) CreateBucket(name string) {
	f.t.Helper()
	body, _ := json.Marshal(map[string]string{"name": name})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.Endpoint()+"/storage/v1/b?project=cairn", bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("creating bucket %s: %v", name, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		f.t.Fatalf("creating bucket %s: %s", name, resp.Status)
	}
}

// Objects lists the names of every object of a bucket, straight through Google's SDK: what
// the bucket holds, whoever wrote it.
func (f *FakeGCS) Objects(bucket string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := storage.NewClient(ctx, option.WithEndpoint(f.Endpoint()+"/storage/v1/"), option.WithoutAuthentication())
	if err != nil {
		return nil, err
	}
	defer client.Close()
	names := []string{}
	it := client.Bucket(bucket).Objects(ctx, nil)
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return names, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listing bucket %s: %w", bucket, err)
		}
		names = append(names, attrs.Name)
	}
}

// TokenServer is an OAuth 2.0 token endpoint on 127.0.0.1 for service account keys whose
// token_uri names it: it hands out an access token for any signed assertion, or, once
// Refuse is called, answers as Google does for a deleted key (400 invalid_grant).
type TokenServer struct {
	*httptest.Server
	refuse atomic.Bool
	issued atomic.Int64
}

// StartTokenServer starts a token endpoint on 127.0.0.1 for the test.
func StartTokenServer(t TB) *TokenServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ServeTokenServer(t, l)
}

// ServeTokenServer is StartTokenServer on a listener the test opened, for an endpoint that
// must be reached at another address than 127.0.0.1 (the node suite's pods reach the node's).
func ServeTokenServer(t TB, l net.Listener) *TokenServer {
	t.Helper()
	ts := &TokenServer{}
	ts.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.PostForm.Get("assertion") == "" {
			http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if ts.refuse.Load() {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`))
			return
		}
		ts.issued.Add(1)
		_, _ = w.Write([]byte(`{"access_token":"token-` + randomHex(8) + `","token_type":"Bearer","expires_in":3600}`))
	}))
	_ = ts.Listener.Close()
	ts.Listener = l
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

// Refuse makes the endpoint refuse every key from now on.
func (ts *TokenServer) Refuse() { ts.refuse.Store(true) }

// Issued is how many tokens were handed out.
func (ts *TokenServer) Issued() int64 { return ts.issued.Load() }

// ServiceAccountKey is a service account's JSON key with a new RSA key, whose token_uri is the
// token endpoint: what a gcs location's credential Secret holds.
func (ts *TokenServer) ServiceAccountKey(t TB) []byte {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(map[string]string{
		"type":           "service_account",
		"project_id":     "cairn-test",
		"private_key_id": randomHex(8),
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   "cairn@cairn-test.iam.gserviceaccount.com",
		"client_id":      "1" + randomHex(8),
		"token_uri":      ts.URL + "/token",
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}
