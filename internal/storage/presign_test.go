package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// get fetches u with a plain GET, as a client given the URL would.
func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u) //nolint:gosec,noctx // the URL is the test's own
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestS3PresignGet(t *testing.T) {
	server := testenv.StartS3Server(t)
	server.CreateBucket("backups")
	ctx := context.Background()
	s := newS3(t, server, "backups", rootCreds(server))
	const key = "backups/team-a/b1/b1.tar.gz"
	if err := s.Put(ctx, key, bytes.NewReader([]byte("archive bytes"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "backups/team-b/b1/b1.tar.gz", bytes.NewReader([]byte("team b's archive"))); err != nil {
		t.Fatal(err)
	}
	// The public address reaches the same server under another host name.
	public := strings.Replace(server.Endpoint(), "127.0.0.1", "localhost", 1)

	tests := []struct {
		name     string
		store    storage.ObjectStore
		endpoint string
		wantHost string
	}{
		{name: "the store's endpoint", store: s, wantHost: strings.TrimPrefix(server.Endpoint(), "http://")},
		{name: "a public URL", store: s, endpoint: public, wantHost: strings.TrimPrefix(public, "http://")},
		{name: "a read-only location", store: storage.ReadOnly(s), wantHost: strings.TrimPrefix(server.Endpoint(), "http://")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := storage.PresignGet(ctx, tt.store, key, 10*time.Minute, tt.endpoint)
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			if parsed.Host != tt.wantHost {
				t.Errorf("host = %s, want %s", parsed.Host, tt.wantHost)
			}
			if got := parsed.Query().Get("X-Amz-Expires"); got != "600" {
				t.Errorf("X-Amz-Expires = %q, want 600", got)
			}
			if status, body := get(t, u); status != http.StatusOK || body != "archive bytes" {
				t.Errorf("GET = %d %q, want 200 with the archive", status, body)
			}
			// The signature covers the key: the same query on another team's key is refused.
			other := *parsed
			other.Path = strings.Replace(other.Path, "team-a", "team-b", 1)
			if status, _ := get(t, other.String()); status != http.StatusForbidden {
				t.Errorf("GET of another key with the same signature = %d, want 403", status)
			}
		})
	}
}

func TestPresignGetRefusals(t *testing.T) {
	fs, err := storage.NewFilesystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storage.PresignGet(context.Background(), fs, "backups/a/b/b.tar.gz", time.Minute, ""); !errors.Is(err, storage.ErrCannotPresign) {
		t.Errorf("filesystem: err = %v, want ErrCannotPresign", err)
	}
	if _, err := storage.PresignGet(context.Background(), storage.ReadOnly(fs), "backups/a/b/b.tar.gz", time.Minute, ""); !errors.Is(err, storage.ErrCannotPresign) {
		t.Errorf("read-only filesystem: err = %v, want ErrCannotPresign", err)
	}
	if _, err := storage.PresignGet(context.Background(), fs, "backups/../../etc/passwd", time.Minute, ""); !errors.Is(err, storage.ErrInvalidKey) {
		t.Errorf("climbing key: err = %v, want ErrInvalidKey", err)
	}
}
