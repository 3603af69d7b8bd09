package blobproxy

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kopia/kopia/repo/blob"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/cairn-backup/cairn/internal/testenv"
)

var tlsNow = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)

func generated(t *testing.T, names ...string) map[string][]byte {
	t.Helper()
	data, err := generateServing(names, tlsNow)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestCheckServing(t *testing.T) {
	names := ServingNames("cairn-repository", "cairn-system")
	good := generated(t, names...)
	other := generated(t, names...)
	with := func(k string, v []byte) map[string][]byte {
		d := map[string][]byte{TLSCAKey: good[TLSCAKey], tlsCertKey: good[tlsCertKey], tlsKeyKey: good[tlsKeyKey]}
		d[k] = v
		return d
	}
	tests := []struct {
		name    string
		data    map[string][]byte
		names   []string
		now     time.Time
		wantErr string // "": it fits
	}{
		{name: "generated for the names", data: good, names: names, now: tlsNow},
		{name: "one name of them", data: good, names: names[2:3], now: tlsNow},
		{name: "another service", data: good, names: ServingNames("other", "cairn-system"), now: tlsNow, wantErr: "does not serve other"},
		{name: "another namespace", data: good, names: []string{"cairn-repository.backups.svc"}, now: tlsNow, wantErr: "does not serve cairn-repository.backups.svc"},
		{name: "another CA", data: with(TLSCAKey, other[TLSCAKey]), names: names, now: tlsNow, wantErr: "unknown authority"},
		{name: "another key", data: with(tlsKeyKey, other[tlsKeyKey]), names: names, now: tlsNow, wantErr: "tls.crt and tls.key"},
		{name: "no CA", data: with(TLSCAKey, nil), names: names, now: tlsNow, wantErr: "it has no ca.crt"},
		{name: "no certificate", data: with(tlsCertKey, nil), names: names, now: tlsNow, wantErr: "it has no tls.crt"},
		{name: "a CA that is not PEM", data: with(TLSCAKey, []byte("junk")), names: names, now: tlsNow, wantErr: "no PEM certificate"},
		{name: "close to its end", data: good, names: names, now: tlsNow.Add(certificateValidity - renewBefore + time.Hour), wantErr: "expires at"},
		{name: "expired", data: good, names: names, now: tlsNow.Add(certificateValidity + time.Hour), wantErr: "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkServing(tt.data, tt.names, tt.now)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("checkServing = %v, want it to fit", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("checkServing = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

func tlsSecret(t *testing.T, c client.Client) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "cairn-system", Name: "repository-tls"}, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// TestServingTLSSecret: the manager makes the Secret when there is none, keeps it while it
// fits, makes it again when the Service's names change, and never replaces one it did not make.
func TestServingTLSSecret(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).Build()
	names := ServingNames("cairn-repository", "cairn-system")
	if _, err := ServingTLS(ctx, c, c, "cairn-system", "repository-tls", names, tlsNow); err != nil {
		t.Fatalf("making the Secret: %v", err)
	}
	first := tlsSecret(t, c)
	if first.Type != corev1.SecretTypeTLS || first.Annotations[GeneratedAnnotation] != generatedBy || checkServing(first.Data, names, tlsNow) != nil {
		t.Fatalf("the Secret made: type %s, annotations %v, fits: %v", first.Type, first.Annotations, checkServing(first.Data, names, tlsNow))
	}
	if _, err := ServingTLS(ctx, c, c, "cairn-system", "repository-tls", names, tlsNow.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if again := tlsSecret(t, c); string(again.Data[TLSCAKey]) != string(first.Data[TLSCAKey]) {
		t.Error("a Secret that fits was made again: the agents' CA changed")
	}
	renamed := ServingNames("backup-repository", "cairn-system")
	if _, err := ServingTLS(ctx, c, c, "cairn-system", "repository-tls", renamed, tlsNow); err != nil {
		t.Fatal(err)
	}
	if s := tlsSecret(t, c); checkServing(s.Data, renamed, tlsNow) != nil {
		t.Errorf("after the Service's rename the certificate does not serve it: %v", checkServing(s.Data, renamed, tlsNow))
	}

	// A Secret of the user's is used as it is when it fits, and never replaced.
	users := generated(t, names...)
	user := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "repository-tls", Namespace: "cairn-system"}, Type: corev1.SecretTypeTLS, Data: users}
	c = fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(user).Build()
	if _, err := ServingTLS(ctx, c, c, "cairn-system", "repository-tls", names, tlsNow); err != nil {
		t.Errorf("a user's Secret that fits: %v", err)
	}
	_, err := ServingTLS(ctx, c, c, "cairn-system", "repository-tls", renamed, tlsNow)
	if err == nil || !strings.Contains(err.Error(), "not made by Cairn") {
		t.Errorf("a user's Secret that does not fit: %v, want an error saying Cairn did not make it", err)
	}
	if s := tlsSecret(t, c); string(s.Data[tlsKeyKey]) != string(users[tlsKeyKey]) {
		t.Error("a user's Secret was replaced")
	}
}

// tlsEnv serves the proxy over TLS with a certificate ServingTLS made for 127.0.0.1's name,
// and writes its CA to a file.
func tlsEnv(t *testing.T) (e *env, caFile string) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).Build()
	cfg, err := ServingTLS(context.Background(), c, c, "cairn-system", "repository-tls", []string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st, _ := fsStorage(t)
	srv := newServer(staticBackend(st, false), staticAuth{goodToken: agentUser}, NewLocks(0, nil), DefaultBackendTTL, clock.RealClock{})
	hs := httptest.NewUnstartedServer(srv)
	hs.TLS = cfg
	hs.StartTLS()
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(tokenFile, []byte(goodToken), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, tlsSecret(t, c).Data[TLSCAKey], 0o600); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, server: srv, http: hs, tokenFile: tokenFile}, caFile
}

// TestClientVerifiesTheProxy: an agent's client with the proxy's CA works; with no CA, or
// another one, it fails on the certificate; and the TLS port refuses plain HTTP.
func TestClientVerifiesTheProxy(t *testing.T) {
	e, caFile := tlsEnv(t)
	httpsURL := strings.Replace(e.http.URL, "127.0.0.1", "localhost", 1)
	wrongCA := filepath.Join(t.TempDir(), "wrong-ca.crt")
	if err := os.WriteFile(wrongCA, generated(t, "localhost")[TLSCAKey], 0o600); err != nil {
		t.Fatal(err)
	}
	opt := func(url, ca string) *Options {
		return &Options{URL: url, Location: "default", Namespace: "shop", TokenFile: e.tokenFile, CAFile: ca}
	}
	ctx := context.Background()
	c, err := newClient(ctx, opt(httpsURL, caFile), fastRetry)
	if err != nil {
		t.Fatalf("with the proxy's CA: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	if err := c.PutBlob(ctx, "p1", sliceBytes("over TLS"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := blobOf(t, c, "p1"); err != nil || got != "over TLS" {
		t.Errorf("read back %q, %v", got, err)
	}

	for name, tt := range map[string]struct{ url, ca, wantErr string }{
		"no CA":          {url: httpsURL, wantErr: "certificate signed by unknown authority"},
		"another CA":     {url: httpsURL, ca: wrongCA, wantErr: "certificate signed by unknown authority"},
		"another name":   {url: e.http.URL, ca: caFile, wantErr: "127.0.0.1"},
		"plain HTTP":     {url: strings.Replace(httpsURL, "https://", "http://", 1), ca: caFile, wantErr: "HTTP request to an HTTPS server"},
		"a CA not a PEM": {url: httpsURL, ca: e.tokenFile, wantErr: "holds no PEM certificate"},
	} {
		if c, err := newClient(ctx, opt(tt.url, tt.ca), fastRetry); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			if c != nil {
				_ = c.Close(ctx)
			}
			t.Errorf("%s: %v, want an error with %q", name, err, tt.wantErr)
		}
	}
}
