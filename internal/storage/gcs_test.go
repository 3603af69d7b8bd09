package storage_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// gcsServer is fake-gcs-server and the token endpoint its service account keys name.
type gcsServer struct {
	*emulator.FakeGCS
	tokens *emulator.TokenServer
	key    []byte
}

func startGCS(t *testing.T) gcsServer {
	t.Helper()
	tokens := emulator.StartTokenServer(t)
	return gcsServer{FakeGCS: emulator.StartFakeGCS(t), tokens: tokens, key: tokens.ServiceAccountKey(t)}
}

func newGCS(t *testing.T, server gcsServer, bucket string) *storage.GCS {
	t.Helper()
	s, err := storage.NewGCS(storage.GCSConfig{
		Bucket: bucket, Endpoint: server.Endpoint(), Credentials: storage.GCSCredentials{JSON: server.key}, PartSize: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// gcsStores is a new bucket of server for each call: the stores the shared suites run on.
func gcsStores(server gcsServer, name string) func(t *testing.T) storage.ObjectStore {
	n := 0
	return func(t *testing.T) storage.ObjectStore {
		n++
		bucket := fmt.Sprintf("%s-%d", name, n)
		server.CreateBucket(bucket)
		return newGCS(t, server, bucket)
	}
}

func TestGCSConformance(t *testing.T) {
	server := startGCS(t)
	runConformance(t, gcsStores(server, "conformance"))
	if server.tokens.Issued() == 0 {
		t.Error("no access token was fetched: the service account key was not used")
	}
}

func TestGCSValidate(t *testing.T) {
	server := startGCS(t)
	server.CreateBucket("backups")
	refusing := emulator.StartTokenServer(t)
	refusing.Refuse()
	refusedKey := refusing.ServiceAccountKey(t)
	tests := []struct {
		name    string
		cfg     storage.GCSConfig
		wantErr string
	}{
		{name: "good", cfg: storage.GCSConfig{Bucket: "backups", Endpoint: server.Endpoint(), Credentials: storage.GCSCredentials{JSON: server.key}}},
		{name: "missing bucket", cfg: storage.GCSConfig{Bucket: "nope", Endpoint: server.Endpoint(), Credentials: storage.GCSCredentials{JSON: server.key}},
			wantErr: `bucket "nope" does not exist at ` + server.Endpoint()},
		{name: "key refused", cfg: storage.GCSConfig{Bucket: "backups", Endpoint: server.Endpoint(), Credentials: storage.GCSCredentials{JSON: refusedKey}},
			wantErr: "the service account key in the location's credential secret was refused (invalid_grant)"},
		{name: "unreachable endpoint", cfg: storage.GCSConfig{Bucket: "backups", Endpoint: "http://127.0.0.1:1", Credentials: storage.GCSCredentials{JSON: server.key}},
			wantErr: "cannot reach the gcs endpoint http://127.0.0.1:1: connect: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := storage.NewGCS(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Validate(context.Background(), "prefix/")
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("the message quotes the key: %v", err)
			}
		})
	}
}

// A credential that is not a service account key is refused when the store is made, saying so
// and quoting none of it.
func TestGCSRefusesWhatIsNotAServiceAccountKey(t *testing.T) {
	for name, data := range map[string]string{
		"not JSON":            "secret-value: not json",
		"another kind of key": `{"type":"authorized_user","client_secret":"secret-value"}`,
		"a key that does not parse": `{"type":"service_account","client_email":"a@b","token_uri":"http://127.0.0.1:1/token",` +
			`"private_key":"-----BEGIN PRIVATE KEY-----\nsecret-value\n-----END PRIVATE KEY-----\n"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := storage.NewGCS(storage.GCSConfig{Bucket: "b", Endpoint: "http://127.0.0.1:1", Credentials: storage.GCSCredentials{JSON: []byte(data)}})
			if err == nil || !strings.Contains(err.Error(), "service account key") || strings.Contains(err.Error(), "secret-value") {
				t.Fatalf("NewGCS = %v, want an error about the service account key that quotes none of it", err)
			}
		})
	}
}
