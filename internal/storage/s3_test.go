package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

func newS3(t *testing.T, server *testenv.S3Server, bucket string, creds storage.S3Credentials) *storage.S3 {
	t.Helper()
	s, err := storage.NewS3(storage.S3Config{
		Bucket: bucket, Endpoint: server.Endpoint(), Region: "us-east-1", ForcePathStyle: true,
		Credentials: creds, PartSize: 5 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rootCreds(server *testenv.S3Server) storage.S3Credentials {
	return storage.S3Credentials{AccessKeyID: server.AccessKey, SecretAccessKey: server.SecretKey}
}

func TestS3Conformance(t *testing.T) {
	server := testenv.StartS3Server(t)
	n := 0
	runConformance(t, func(t *testing.T) storage.ObjectStore {
		n++
		bucket := "conformance-" + string(rune('a'+n%26)) + strings.Repeat("x", n/26)
		server.CreateBucket(bucket)
		return newS3(t, server, bucket, rootCreds(server))
	})
}

func TestS3Validate(t *testing.T) {
	server := testenv.StartS3Server(t)
	server.CreateBucket("backups")
	ctx := context.Background()
	tests := []struct {
		name    string
		store   func() *storage.S3
		wantErr string
	}{
		{name: "good", store: func() *storage.S3 { return newS3(t, server, "backups", rootCreds(server)) }},
		{name: "missing bucket", store: func() *storage.S3 { return newS3(t, server, "nope", rootCreds(server)) },
			wantErr: `bucket "nope" does not exist at ` + server.Endpoint()},
		{name: "wrong secret", store: func() *storage.S3 {
			return newS3(t, server, "backups", storage.S3Credentials{AccessKeyID: server.AccessKey, SecretAccessKey: "wrong-secret-value"})
		}, wantErr: `access denied to bucket "backups"`},
		{name: "unknown key id", store: func() *storage.S3 {
			return newS3(t, server, "backups", storage.S3Credentials{AccessKeyID: "nobody", SecretAccessKey: "wrong-secret-value"})
		}, wantErr: `access denied to bucket "backups"`},
		{name: "unreachable endpoint", store: func() *storage.S3 {
			s, err := storage.NewS3(storage.S3Config{Bucket: "backups", Endpoint: "http://127.0.0.1:1", ForcePathStyle: true, Credentials: rootCreds(server)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, wantErr: "cannot reach the s3 endpoint http://127.0.0.1:1: connect: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.store().Validate(ctx, "prefix/")
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "wrong-secret-value") || strings.Contains(err.Error(), server.SecretKey) {
				t.Fatalf("the message quotes a secret: %v", err)
			}
		})
	}
}

// TestS3ServerKilledMidUpload kills the server while an archive streams into it: the Put fails,
// and once the server is back no archive and no metadata exist.
func TestS3ServerKilledMidUpload(t *testing.T) {
	server := testenv.StartS3Server(t)
	server.CreateBucket("backups")
	s := newS3(t, server, "backups", rootCreds(server))
	keys := storage.Layout{}.Backup("ns", "killed")

	r := &killingReader{r: bytes.NewReader(randomBytes(t, 40<<20)), after: 12 << 20, kill: server.Stop}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := storage.PutArchive(ctx, s, keys.Archive, r)
	if err == nil {
		t.Fatal("the upload succeeded although the server was killed")
	}
	if !r.killed() {
		t.Fatal("the server was never killed: the test proves nothing")
	}

	server.Start()
	if ok, err := s.Exists(context.Background(), keys.Archive); ok || err != nil {
		t.Errorf("archive exists after a failed upload: %v, %v", ok, err)
	}
	if _, err := storage.ReadMetadata(context.Background(), s, keys); !errors.Is(err, storage.ErrNotCommitted) {
		t.Errorf("ReadMetadata = %v, want ErrNotCommitted", err)
	}
}

type killingReader struct {
	r     io.Reader
	n     int
	after int
	kill  func()
	once  sync.Once
	done  bool
	mu    sync.Mutex
}

func (k *killingReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	k.n += n
	if k.n >= k.after {
		k.once.Do(func() {
			k.kill()
			k.mu.Lock()
			k.done = true
			k.mu.Unlock()
		})
	}
	return n, err
}

func (k *killingReader) killed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.done
}

// TestEncryptedConformance: an encrypted store behaves as a store, over every provider.
func TestEncryptedConformance(t *testing.T) {
	keys := storage.Keyring{Keys: map[string][]byte{"k1": bytes.Repeat([]byte{7}, storage.KeySize)}, WriteKey: "k1"}
	encrypt := func(t *testing.T, s storage.ObjectStore) storage.ObjectStore {
		t.Helper()
		e, err := storage.Encrypted(s, keys, "")
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	t.Run("filesystem", func(t *testing.T) {
		runConformance(t, func(t *testing.T) storage.ObjectStore { return encrypt(t, newFilesystem(t)) })
	})
	t.Run("s3", func(t *testing.T) {
		server := testenv.StartS3Server(t)
		n := 0
		runConformance(t, func(t *testing.T) storage.ObjectStore {
			n++
			bucket := "encrypted-" + string(rune('a'+n%26)) + strings.Repeat("x", n/26)
			server.CreateBucket(bucket)
			return encrypt(t, newS3(t, server, bucket, rootCreds(server)))
		})
	})
	t.Run("azure", func(t *testing.T) {
		stores := azureStores(emulator.StartAzurite(t), "encrypted")
		runConformance(t, func(t *testing.T) storage.ObjectStore { return encrypt(t, stores(t)) })
	})
	t.Run("gcs", func(t *testing.T) {
		stores := gcsStores(startGCS(t), "encrypted")
		runConformance(t, func(t *testing.T) storage.ObjectStore { return encrypt(t, stores(t)) })
	})
}

// TestEncryptedMovedObjectS3: on S3 too, an encrypted archive copied in the bucket over
// another backup's fails to decrypt, naming the object it was read as, and the bucket's
// objects copied under another prefix still read through a location of that prefix.
func TestEncryptedMovedObjectS3(t *testing.T) {
	server := testenv.StartS3Server(t)
	server.CreateBucket("moved")
	raw := newS3(t, server, "moved", rootCreds(server))
	keys := storage.Keyring{Keys: map[string][]byte{"k1": bytes.Repeat([]byte{9}, storage.KeySize)}, WriteKey: "k1"}
	s, err := storage.Encrypted(raw, keys, "cluster-1")
	if err != nil {
		t.Fatal(err)
	}
	layout := storage.Layout{Prefix: "cluster-1"}
	teamA, teamB := layout.Backup("team-a", "nightly").Archive, layout.Backup("team-b", "nightly").Archive
	for _, key := range []string{teamA, teamB} {
		if err := s.Put(t.Context(), key, strings.NewReader("the archive of "+key)); err != nil {
			t.Fatal(err)
		}
	}
	stored := readObject(t, raw, teamB)
	if err := raw.Put(t.Context(), teamA, bytes.NewReader(stored)); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Get(t.Context(), teamA)
	if err == nil {
		var got []byte
		got, err = io.ReadAll(rc)
		_ = rc.Close()
		if len(got) != 0 {
			t.Fatalf("the moved archive handed out %q", got)
		}
	}
	if !errors.Is(err, storage.ErrDamaged) || !strings.Contains(err.Error(), "decrypting "+strings.TrimPrefix(teamA, "cluster-1/")+":") {
		t.Fatalf("reading team-b's archive copied over team-a's: %v, want %v naming %s", err, storage.ErrDamaged, teamA)
	}

	copied := "copy/" + teamB
	if err := raw.Put(t.Context(), copied, bytes.NewReader(stored)); err != nil {
		t.Fatal(err)
	}
	other, err := storage.Encrypted(raw, keys, "copy/cluster-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := readObject(t, other, copied); string(got) != "the archive of "+teamB {
		t.Fatalf("the copy under another prefix read %q", got)
	}
}

func readObject(t *testing.T, s storage.ObjectStore, key string) []byte {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
