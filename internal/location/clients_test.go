package location

import (
	"testing"

	"github.com/cairn-backup/cairn/internal/storage"
)

func TestS3ClientCache(t *testing.T) {
	c := &s3ClientCache{clients: newLRU(2)}
	cfg := storage.S3Config{Bucket: "b", Region: "us-east-1", Endpoint: "http://127.0.0.1:9000",
		Credentials: storage.S3Credentials{AccessKeyID: "id", SecretAccessKey: "old"}}
	first, err := c.get(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := c.get(cfg)
	if again != first {
		t.Error("two opens of one location made two clients")
	}
	rotated := cfg
	rotated.Credentials.SecretAccessKey = "new"
	if r, _ := c.get(rotated); r == first {
		t.Error("a rotated Secret kept the old client")
	}
	edited := cfg
	edited.Bucket = "other"
	if e, _ := c.get(edited); e == first {
		t.Error("an edited location kept the old client")
	}
	// Bounded: the least recently used client went.
	if c.clients.Len() != 2 {
		t.Errorf("clients kept = %d, want 2", c.clients.Len())
	}
}
