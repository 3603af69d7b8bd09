package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestWithCredentials: a download carries the kubeconfig's bearer token (given, or read from a
// token file) and nothing else of the kubeconfig's credentials.
func TestWithCredentials(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  *rest.Config
		want string
	}{
		{"a token", &rest.Config{BearerToken: "lead-token"}, "Bearer lead-token"},
		{"a token file", &rest.Config{BearerTokenFile: tokenFile}, "Bearer from-a-file"},
		{"a token, impersonating and with a password", &rest.Config{BearerToken: "lead-token",
			Impersonate: rest.ImpersonationConfig{UserName: "someone-else"}, Username: "u", Password: "p"}, "Bearer lead-token"},
		{"a client certificate only", &rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: []byte("cert"), KeyData: []byte("key")}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got http.Header
			srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
			defer srv.Close()
			rt, err := withCredentials(tc.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
			resp, err := (&http.Client{Transport: rt}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if got.Get("Authorization") != tc.want || got.Get("Impersonate-User") != "" {
				t.Fatalf("Authorization %q, Impersonate-User %q; want %q and none", got.Get("Authorization"), got.Get("Impersonate-User"), tc.want)
			}
		})
	}
}

// TestRefusalHint: a refused download of a user whose kubeconfig gives no token says why, and
// that --as is not sent; a user with a token, or another status, gets no hint.
func TestRefusalHint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		cfg    rest.Config
		want   string
	}{
		{"a certificate", http.StatusForbidden, rest.Config{}, "no token to send: a client certificate cannot be checked"},
		{"a certificate with --as", http.StatusForbidden, rest.Config{Impersonate: rest.ImpersonationConfig{UserName: "alice"}}, "--as is not sent to it"},
		{"a token", http.StatusForbidden, rest.Config{BearerToken: "t"}, ""},
		{"a token file", http.StatusForbidden, rest.Config{BearerTokenFile: "/t"}, ""},
		{"not refused", http.StatusNotFound, rest.Config{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := refusalHint(tc.status, &tc.cfg)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("refusalHint = %q, want %q", got, tc.want)
			}
		})
	}
}
