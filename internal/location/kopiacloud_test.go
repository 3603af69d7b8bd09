package location_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// A gcs location's volume data goes through kopia's own GCS storage, under
// <prefix>/kopia/<namespace>/ of the location's bucket, every read capped. Kopia's storage has
// no endpoint option: it reaches fake-gcs-server through STORAGE_EMULATOR_HOST (and, there,
// sends no credentials).
func TestKopiaStorageGCS(t *testing.T) {
	server := emulator.StartFakeGCS(t)
	tokens := emulator.StartTokenServer(t)
	server.CreateBucket("volumes")
	key := tokens.ServiceAccountKey(t)
	t.Setenv("STORAGE_EMULATOR_HOST", server.Endpoint())
	l := cloudLocation(cairnv1.StorageProviderGCS, "volumes", nil)
	ctx := context.Background()

	st, ro, err := location.KopiaStorage(ctx, credentialReader(key), l, "shop")
	if err != nil || ro {
		t.Fatalf("KopiaStorage = %v, %v", err, ro)
	}
	defer st.Close(ctx)
	putGet(t, st, "p0123456789abcdef", "pack")
	plain, err := storage.NewGCS(storage.GCSConfig{Bucket: "volumes", Endpoint: server.Endpoint(), Credentials: storage.GCSCredentials{JSON: key}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := plain.List(ctx, ""); err != nil || strings.Join(got, ",") != "cluster-a/kopia/shop/p0123456789abcdef" {
		t.Errorf("objects in the bucket: %v, %v", got, err)
	}
	// A blob over the cap, put there by a bucket writer, is refused before it is read.
	if err := plain.Put(ctx, "cluster-a/kopia/shop/phuge", strings.NewReader(strings.Repeat("x", location.MaxBlobSize+1))); err != nil {
		t.Fatal(err)
	}
	var out buffer
	if err := st.GetBlob(ctx, "phuge", 0, -1, &out); !errors.Is(err, location.ErrBlobTooLarge) || out.Len() != 0 {
		t.Errorf("GetBlob of a blob over the cap = %v after %d bytes, want ErrBlobTooLarge before any", err, out.Len())
	}

	missing, _, err := location.KopiaStorage(ctx, credentialReader(key), cloudLocation(cairnv1.StorageProviderGCS, "nope", nil), "shop")
	if err == nil {
		missing.Close(ctx)
		t.Error("a missing bucket was accepted")
	}
	withEndpoint := cloudLocation(cairnv1.StorageProviderGCS, "volumes", map[string]string{"endpoint": server.Endpoint()})
	if _, _, err := location.KopiaStorage(ctx, credentialReader(key), withEndpoint, "shop"); !errors.Is(err, location.ErrConfig) ||
		!strings.Contains(err.Error(), "volume data on a gcs location with config.endpoint is not supported") {
		t.Errorf("a gcs location with an endpoint: %v", err)
	}
}

// An azure location's volume data goes through kopia's own Azure storage, which names the
// account in the host: Azurite is reached as http://<account>.blob.localhost:<port>, the name
// answered by a DNS server on 127.0.0.1.
func TestKopiaStorageAzure(t *testing.T) {
	a := emulator.StartAzurite(t)
	a.CreateContainer("volumes")
	emulator.ResolveToLoopback(t)
	reader := credentialReader([]byte("AZURE_STORAGE_ACCOUNT_ACCESS_KEY=" + a.Key + "\n"))
	l := cloudLocation(cairnv1.StorageProviderAzure, "volumes", map[string]string{"storageAccount": a.Account, "endpoint": a.HostEndpoint()})
	ctx := context.Background()

	st, ro, err := location.KopiaStorage(ctx, reader, l, "shop")
	if err != nil || ro {
		t.Fatalf("KopiaStorage = %v, %v", err, ro)
	}
	defer st.Close(ctx)
	putGet(t, st, "p0123456789abcdef", "pack")
	plain, err := storage.NewAzure(storage.AzureConfig{Account: a.Account, Container: "volumes", Endpoint: a.Endpoint(), Credentials: storage.AzureCredentials{SharedKey: a.Key}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := plain.List(ctx, ""); err != nil || strings.Join(got, ",") != "cluster-a/kopia/shop/p0123456789abcdef" {
		t.Errorf("objects in the container: %v, %v", got, err)
	}

	wrong := credentialReader([]byte("AZURE_STORAGE_ACCOUNT_ACCESS_KEY=" + strings.Repeat("A", 86) + "==\n"))
	if bad, _, err := location.KopiaStorage(ctx, wrong, l, "shop"); err == nil {
		bad.Close(ctx)
		t.Error("a wrong key was accepted")
	}
	pathStyle := cloudLocation(cairnv1.StorageProviderAzure, "volumes", map[string]string{"storageAccount": a.Account, "endpoint": a.Endpoint()})
	if _, _, err := location.KopiaStorage(ctx, reader, pathStyle, "shop"); !errors.Is(err, location.ErrConfig) {
		t.Errorf("a path-style endpoint: %v, want ErrConfig", err)
	}
}
