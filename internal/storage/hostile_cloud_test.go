package storage

import (
	"testing"

	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// The hostile bucket writer's cases (TestEncryptedHostileBucketWriter) over an encrypted azure
// and gcs location: whatever the bucket's credentials write, a read fails naming the object
// and hands out nothing but a prefix of what was written.
func TestEncryptedHostileBucketWriterOnCloudStores(t *testing.T) {
	t.Run("azure", func(t *testing.T) {
		a := emulator.StartAzurite(t)
		a.CreateContainer("hostile")
		plain, err := NewAzure(AzureConfig{Account: a.Account, Container: "hostile", Endpoint: a.Endpoint(), Credentials: AzureCredentials{SharedKey: a.Key}})
		if err != nil {
			t.Fatal(err)
		}
		testHostileBucketWriter(t, plain)
	})
	t.Run("gcs", func(t *testing.T) {
		server := emulator.StartFakeGCS(t)
		server.CreateBucket("hostile")
		key := emulator.StartTokenServer(t).ServiceAccountKey(t)
		plain, err := NewGCS(GCSConfig{Bucket: "hostile", Endpoint: server.Endpoint(), Credentials: GCSCredentials{JSON: key}})
		if err != nil {
			t.Fatal(err)
		}
		testHostileBucketWriter(t, plain)
	})
}
