package download_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairn-backup/cairn/internal/download"
)

// testTokens are the bearer tokens authenticateTestTokens accepts, and whose they are.
var testTokens = map[string]download.Requester{
	"lead-token":   {Username: "system:serviceaccount:team-a:lead", UID: "uid-lead"},
	"junior-token": {Username: "system:serviceaccount:team-a:junior", UID: "uid-junior"},
	"old-lead":     {Username: "system:serviceaccount:team-a:lead", UID: "uid-of-a-deleted-lead"},
}

// authenticateTestTokens is a TokenReview of testTokens; "broken" is a failure to ask.
func authenticateTestTokens(_ context.Context, token string) (download.Requester, bool, error) {
	if token == "broken" {
		return download.Requester{}, false, errors.New("the API server is unreachable")
	}
	u, ok := testTokens[token]
	return u, ok, nil
}

func get(t *testing.T, u, token string) (status int, body []byte, err error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil) //nolint:noctx // a test request
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// TestServerServesOnlyItsRequester: a URL made for a requester is served to their token only.
func TestServerServesOnlyItsRequester(t *testing.T) {
	f := newFixture(t)
	lead := &download.Requester{Username: "system:serviceaccount:team-a:lead", UID: "uid-lead"}
	obj := download.Object{Location: "default", Key: "backups/team-a/b1/b1.tar.gz", Expires: now.Add(time.Minute), Requester: lead}
	leads := f.signer.URL(f.server.URL, obj)
	noUID := f.signer.URL(f.server.URL, download.Object{Location: obj.Location, Key: obj.Key, Expires: obj.Expires,
		Requester: &download.Requester{Username: lead.Username}})
	unbound := f.url(obj.Key, obj.Expires)
	for _, tc := range []struct {
		name, url, token string
		want             int
		says             string
	}{
		{"the requester", leads, "lead-token", http.StatusOK, "team a's archive"},
		{"no token", leads, "", http.StatusForbidden, "serves only system:serviceaccount:team-a:lead"},
		{"another member's token", leads, "junior-token", http.StatusForbidden, "not system:serviceaccount:team-a:junior"},
		{"a token the API server does not accept", leads, "forged", http.StatusForbidden, "not accepted"},
		{"the requester's name with another UID", leads, "old-lead", http.StatusForbidden, "serves only"},
		{"a request that recorded no UID", noUID, "old-lead", http.StatusOK, "team a's archive"},
		{"the requester removed from the URL", strings.Replace(leads, "&user=", "&x=", 1), "junior-token", http.StatusForbidden, "signature"},
		{"another requester put in the URL", strings.Replace(leads, "team-a%3Alead", "team-a%3Ajunior", 1), "junior-token", http.StatusForbidden, "signature"},
		{"tokens that cannot be checked now", leads, "broken", http.StatusServiceUnavailable, "cannot be checked"},
		{"a URL made for no requester", unbound, "", http.StatusOK, "team a's archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := get(t, tc.url, tc.token)
			if err != nil {
				t.Fatal(err)
			}
			if status != tc.want || !strings.Contains(string(body), tc.says) {
				t.Fatalf("status %d, body %q; want %d saying %q", status, body, tc.want, tc.says)
			}
		})
	}
}

// TestServerCutsADownloadThatDoesNotMatch: a download whose object differs from its URL's
// digest by one byte ends with an error before its last bytes: the client gets fewer bytes
// than the object and a broken response, or, when nothing was sent yet, an error status.
func TestServerCutsADownloadThatDoesNotMatch(t *testing.T) {
	f := newFixture(t)
	big := make([]byte, 3<<20)
	_, _ = rand.Read(big)
	sum := sha256.Sum256(big)
	digest := &download.Digest{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(big))}
	// The fixture's big archive is other random bytes of the same size: make it big, then change one byte.
	f.put(t, "backups/team-a/big/big.tar.gz", big)
	bigURL := func() string {
		return f.signer.URL(f.server.URL, download.Object{Location: "default", Key: "backups/team-a/big/big.tar.gz", Expires: now.Add(time.Minute), Digest: digest})
	}
	status, body, err := get(t, bigURL(), "")
	if err != nil || status != http.StatusOK || len(body) != len(big) {
		t.Fatalf("the unchanged archive: status %d, %d bytes, %v", status, len(body), err)
	}

	changed := append([]byte(nil), big...)
	changed[len(changed)/2] ^= 1
	f.put(t, "backups/team-a/big/big.tar.gz", changed)
	status, body, err = get(t, bigURL(), "")
	if status != 0 && status != http.StatusOK {
		t.Fatalf("status %d, want 200 and a cut body", status)
	}
	if err == nil || len(body) >= len(big) {
		t.Fatalf("read %d of %d bytes, err %v; want fewer and an error", len(body), len(big), err)
	}

	// Cut short by one byte, or one byte longer: the same.
	for name, data := range map[string][]byte{"shorter": big[:len(big)-1], "longer": append(append([]byte(nil), big...), 0)} {
		f.put(t, "backups/team-a/big/big.tar.gz", data)
		_, body, err := get(t, bigURL(), "")
		if err == nil || len(body) >= len(big) {
			t.Fatalf("%s: read %d of %d bytes, err %v; want fewer and an error", name, len(body), len(big), err)
		}
	}

	// A small file is read at once: nothing was sent when the mismatch shows, so it is an error.
	small := download.Object{Location: "default", Key: "backups/team-a/b1/b1.tar.gz", Expires: now.Add(time.Minute),
		Digest: &download.Digest{SHA256: strings.Repeat("0", 64), Size: int64(len("team a's archive"))}}
	status, body, err = get(t, f.signer.URL(f.server.URL, small), "")
	if err != nil || status != http.StatusBadGateway || !strings.Contains(string(body), "does not match the digest") {
		t.Fatalf("a small file that does not match: status %d, %q, %v", status, body, err)
	}
}
