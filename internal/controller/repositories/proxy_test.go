package repositories

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/cairn-backup/cairn/internal/blobproxy"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// TestProxyServesTLSOnly: with TLS set, the proxy answers HTTPS verified by the CA of the
// Secret it made, and a plain HTTP request never reaches its handler.
func TestProxyServesTLSOnly(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).Build()
	var reached atomic.Int32
	p := &Proxy{
		Addr:  "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		Ready: make(chan struct{}),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			reached.Add(1)
			_, _ = io.WriteString(w, "ok")
		}),
		TLS: func(ctx context.Context) (*tls.Config, error) {
			return blobproxy.ServingTLS(ctx, c, c, "cairn-system", "repository-tls", []string{"localhost"}, time.Now())
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	select {
	case <-p.Ready:
	case err := <-errc:
		t.Fatalf("Start: %v", err)
	}
	port := strings.TrimPrefix(p.Addr, "127.0.0.1:")

	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: "cairn-system", Name: "repository-tls"}, &s); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.Data[blobproxy.TLSCAKey])
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	resp, err := hc.Get("https://localhost:" + port + "/")
	if err != nil {
		t.Fatalf("HTTPS with the Secret's CA: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || reached.Load() != 1 {
		t.Errorf("HTTPS: %s, handler reached %d times", resp.Status, reached.Load())
	}

	resp, err = http.Get("http://localhost:" + port + "/")
	if err == nil {
		_ = resp.Body.Close()
	}
	if err == nil && resp.StatusCode != http.StatusBadRequest || reached.Load() != 1 {
		t.Errorf("plain HTTP: %v %v, handler reached %d times; want it refused", resp, err, reached.Load())
	}
}
