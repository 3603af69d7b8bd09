package storage_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// putTeams stores an archive of team-a and one of team-b in s; it returns team-a's key.
func putTeams(t *testing.T, s storage.ObjectStore) string {
	t.Helper()
	const key = "backups/team-a/b1/b1.tar.gz"
	for k, v := range map[string]string{key: "archive bytes", "backups/team-b/b1/b1.tar.gz": "team b's archive"} {
		if err := s.Put(context.Background(), k, bytes.NewReader([]byte(v))); err != nil {
			t.Fatal(err)
		}
	}
	return key
}

// An azure location's download URL is a service SAS of one blob, read only, which Azurite
// checks: it reads that blob, for its time, and nothing else.
func TestAzurePresignGet(t *testing.T) {
	a := emulator.StartAzurite(t)
	a.CreateContainer("backups")
	s := newAzure(t, a, "backups", storage.AzureCredentials{SharedKey: a.Key})
	key := putTeams(t, s)
	public := strings.Replace(a.Endpoint(), "127.0.0.1", "localhost", 1)
	for _, tt := range []struct {
		name, endpoint, wantHost string
		store                    storage.ObjectStore
	}{
		{name: "the store's endpoint", store: s, wantHost: strings.TrimPrefix(strings.TrimSuffix(a.Endpoint(), "/"+a.Account), "http://")},
		{name: "a public URL", store: storage.ReadOnly(s), endpoint: public, wantHost: strings.TrimPrefix(strings.TrimSuffix(public, "/"+a.Account), "http://")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u, err := storage.PresignGet(context.Background(), tt.store, key, 10*time.Minute, tt.endpoint)
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			if parsed.Host != tt.wantHost || parsed.Query().Get("sp") != "r" || parsed.Query().Get("sr") != "b" {
				t.Errorf("URL %s: want host %s and a read-only SAS of one blob", u, tt.wantHost)
			}
			if status, body := get(t, u); status != http.StatusOK || body != "archive bytes" {
				t.Errorf("GET = %d %q, want 200 with the archive", status, body)
			}
			other := *parsed
			other.Path = strings.Replace(other.Path, "team-a", "team-b", 1)
			if status, _ := get(t, other.String()); status != http.StatusForbidden {
				t.Errorf("GET of another blob with the same SAS = %d, want 403", status)
			}
			unsigned := *parsed
			unsigned.RawQuery = ""
			if status, _ := get(t, unsigned.String()); status == http.StatusOK {
				t.Error("the blob is served without the SAS: the test proves nothing")
			}
		})
	}
	// Without the account key there is nothing to sign with: the download server serves it.
	sas := newAzure(t, a, "backups", storage.AzureCredentials{SASToken: "sv=2021-08-06&sig=x"})
	if _, err := storage.PresignGet(context.Background(), sas, key, time.Minute, ""); !errors.Is(err, storage.ErrCannotPresign) {
		t.Errorf("a SAS-token store: err = %v, want ErrCannotPresign", err)
	}
}

// A gcs location's download URL is a V4 signed URL of the service account. fake-gcs-server
// does not check signatures: the test checks what the URL signs and that it reads the object.
func TestGCSPresignGet(t *testing.T) {
	server := startGCS(t)
	server.CreateBucket("backups")
	s := newGCS(t, server, "backups")
	key := putTeams(t, s)
	public := strings.Replace(server.Endpoint(), "127.0.0.1", "localhost", 1)
	for _, tt := range []struct{ name, endpoint, wantHost string }{
		{name: "the store's endpoint", wantHost: strings.TrimPrefix(server.Endpoint(), "http://")},
		{name: "a public URL", endpoint: public, wantHost: strings.TrimPrefix(public, "http://")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u, err := storage.PresignGet(context.Background(), s, key, 10*time.Minute, tt.endpoint)
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			q := parsed.Query()
			if parsed.Host != tt.wantHost || parsed.Path != "/backups/"+key || q.Get("X-Goog-Algorithm") != "GOOG4-RSA-SHA256" ||
				q.Get("X-Goog-Expires") != "600" || !strings.HasPrefix(q.Get("X-Goog-Credential"), "cairn@cairn-test.iam.gserviceaccount.com/") ||
				q.Get("X-Goog-SignedHeaders") != "host" || len(q.Get("X-Goog-Signature")) != 512 {
				t.Errorf("URL %s: want a V4 signature of GET %s on %s for 600 s", u, key, tt.wantHost)
			}
			if tt.endpoint != "" {
				return // fake-gcs-server answers only under its own host name
			}
			if status, body := get(t, u); status != http.StatusOK || body != "archive bytes" {
				t.Errorf("GET = %d %q, want 200 with the archive", status, body)
			}
		})
	}
}
