package location_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/testenv"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// cloudLocation is a location of provider on bucket with config, whose credential is the key
// "cloud" of the Secret creds.
func cloudLocation(provider cairnv1.StorageProvider, bucket string, config map[string]string) *cairnv1.BackupStorageLocation {
	l := loc(string(provider), false, 0)
	l.Spec.Provider = provider
	l.Spec.ObjectStorage = &cairnv1.ObjectStorage{Bucket: bucket, Prefix: "cluster-a"}
	l.Spec.Config = config
	l.Spec.Credential = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "cloud"}
	return &l
}

func credentialReader(value []byte) client.Client {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "cairn-system"}, Data: map[string][]byte{"cloud": value}}
	return fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(secret).Build()
}

// roundTrip writes an object through store under its layout's prefix and reads it back.
func roundTrip(t *testing.T, store *location.Store) {
	t.Helper()
	ctx := context.Background()
	keys := store.Layout.Backup("ns", "b")
	if err := store.Put(ctx, keys.Logs, strings.NewReader("log")); err != nil {
		t.Fatal(err)
	}
	if got, err := store.List(ctx, "cluster-a/backups/"); err != nil || strings.Join(got, ",") != "cluster-a/backups/ns/b/b-logs.gz" {
		t.Errorf("List = %v, %v", got, err)
	}
}

// An azure location opens from its Secret (NAME=value lines, as Velero's Azure plugin keeps
// them), is valid on Azurite, and names what is wrong when it is not.
func TestOpenAzure(t *testing.T) {
	a := emulator.StartAzurite(t)
	a.CreateContainer("backups")
	config := func() map[string]string {
		return map[string]string{"storageAccount": a.Account, "endpoint": a.Endpoint()}
	}
	good := credentialReader([]byte("AZURE_STORAGE_ACCOUNT_ACCESS_KEY=" + a.Key + "\nAZURE_CLOUD_NAME=AzurePublicCloud\n"))
	store, err := location.Open(context.Background(), good, cloudLocation(cairnv1.StorageProviderAzure, "backups", config()))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Validate(context.Background()); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	roundTrip(t, store)

	missing, err := location.Open(context.Background(), good, cloudLocation(cairnv1.StorageProviderAzure, "nope", config()))
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.Validate(context.Background()); err == nil || !strings.Contains(err.Error(), `container "nope" does not exist`) {
		t.Errorf("a missing container: %v", err)
	}
	wrong := credentialReader([]byte("AZURE_STORAGE_ACCOUNT_ACCESS_KEY=" + strings.Repeat("A", 86) + "==\n"))
	refused, err := location.Open(context.Background(), wrong, cloudLocation(cairnv1.StorageProviderAzure, "backups", config()))
	if err != nil {
		t.Fatal(err)
	}
	if err := refused.Validate(context.Background()); err == nil || !strings.Contains(err.Error(), `access denied to container "backups"`) {
		t.Errorf("a wrong key: %v", err)
	}
}

// A gcs location opens from its Secret (a service account's JSON key), is valid on
// fake-gcs-server, and names a missing bucket.
func TestOpenGCS(t *testing.T) {
	server := emulator.StartFakeGCS(t)
	tokens := emulator.StartTokenServer(t)
	server.CreateBucket("backups")
	reader := credentialReader(tokens.ServiceAccountKey(t))
	store, err := location.Open(context.Background(), reader, cloudLocation(cairnv1.StorageProviderGCS, "backups", map[string]string{"endpoint": server.Endpoint()}))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Validate(context.Background()); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	roundTrip(t, store)
	missing, err := location.Open(context.Background(), reader, cloudLocation(cairnv1.StorageProviderGCS, "nope", map[string]string{"endpoint": server.Endpoint()}))
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.Validate(context.Background()); err == nil || !strings.Contains(err.Error(), `bucket "nope" does not exist`) {
		t.Errorf("a missing bucket: %v", err)
	}
}

func TestOpenCloudConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		name    string
		secret  string
		bsl     *cairnv1.BackupStorageLocation
		wantErr string
	}{
		{name: "azure without a storage account", secret: "AZURE_STORAGE_ACCOUNT_ACCESS_KEY=a2V5",
			bsl: cloudLocation(cairnv1.StorageProviderAzure, "backups", nil), wantErr: "an azure location needs config.storageAccount"},
		{name: "azure without a container", secret: "AZURE_STORAGE_ACCOUNT_ACCESS_KEY=a2V5",
			bsl: cloudLocation(cairnv1.StorageProviderAzure, "", map[string]string{"storageAccount": "acct"}), wantErr: "an azure location needs objectStorage.bucket"},
		{name: "azure Secret without a key or token", secret: "AZURE_CLOUD_NAME=AzurePublicCloud",
			bsl: cloudLocation(cairnv1.StorageProviderAzure, "backups", map[string]string{"storageAccount": "acct"}), wantErr: "neither AZURE_STORAGE_ACCOUNT_ACCESS_KEY nor AZURE_STORAGE_SAS_TOKEN"},
		{name: "azure key that is not base64", secret: "AZURE_STORAGE_ACCOUNT_ACCESS_KEY=not base64!",
			bsl: cloudLocation(cairnv1.StorageProviderAzure, "backups", map[string]string{"storageAccount": "acct"}), wantErr: "the storage account key is not valid base64"},
		{name: "gcs without a bucket", secret: "{}", bsl: cloudLocation(cairnv1.StorageProviderGCS, "", nil), wantErr: "a gcs location needs objectStorage.bucket"},
		{name: "gcs Secret that is not a service account key", secret: `{"type":"authorized_user"}`,
			bsl: cloudLocation(cairnv1.StorageProviderGCS, "backups", nil), wantErr: "the credential is not a service account key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := location.Open(context.Background(), credentialReader([]byte(tt.secret)), tt.bsl)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, location.ErrConfig) {
				t.Fatalf("Open = %v, want an ErrConfig containing %q", err, tt.wantErr)
			}
		})
	}
}
