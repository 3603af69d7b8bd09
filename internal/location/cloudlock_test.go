package location_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// An azure or gcs location with spec.objectLock opens with a lock in its mode, and is
// Unavailable on an emulator's container or bucket, which cannot lock, saying what is missing;
// without objectLock it has no lock and is valid.
func TestOpenCloudObjectLock(t *testing.T) {
	a := emulator.StartAzurite(t)
	a.CreateContainer("backups")
	gcsServer := emulator.StartFakeGCS(t)
	gcsServer.CreateBucket("backups")
	tokens := emulator.StartTokenServer(t)
	azureSecret := []byte("AZURE_STORAGE_ACCOUNT_ACCESS_KEY=" + a.Key + "\n")
	for _, tt := range []struct {
		name    string
		bsl     func() *cairnv1.BackupStorageLocation
		secret  []byte
		mode    cairnv1.ObjectLockMode
		want    storage.LockMode
		wantErr string
	}{
		{name: "azure, Governance", secret: azureSecret, mode: cairnv1.ObjectLockModeGovernance, want: storage.LockGovernance,
			bsl: func() *cairnv1.BackupStorageLocation {
				return cloudLocation(cairnv1.StorageProviderAzure, "backups", map[string]string{"storageAccount": a.Account, "endpoint": a.Endpoint()})
			}, wantErr: `container "backups" at ` + a.Endpoint() + ` does not have version-level immutability support`},
		{name: "gcs, Compliance", secret: tokens.ServiceAccountKey(t), mode: cairnv1.ObjectLockModeCompliance, want: storage.LockCompliance,
			bsl: func() *cairnv1.BackupStorageLocation {
				return cloudLocation(cairnv1.StorageProviderGCS, "backups", map[string]string{"endpoint": gcsServer.Endpoint()})
			}, wantErr: `bucket "backups" at ` + gcsServer.Endpoint() + ` does not have object retention enabled`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reader := credentialReader(tt.secret)
			plain, err := location.Open(context.Background(), reader, tt.bsl())
			if err != nil {
				t.Fatal(err)
			}
			if plain.Lock != nil || plain.Validate(context.Background()) != nil {
				t.Fatalf("without objectLock: lock %v, or not valid", plain.Lock)
			}
			bsl := tt.bsl()
			bsl.Spec.ObjectLock = &cairnv1.LocationObjectLock{Mode: tt.mode, MinRetention: metav1.Duration{Duration: 48 * time.Hour}}
			locked, err := location.Open(context.Background(), reader, bsl)
			if err != nil {
				t.Fatal(err)
			}
			if locked.Lock == nil || locked.Lock.Mode != tt.want || locked.Lock.MinRetention != 48*time.Hour {
				t.Fatalf("the store's lock: %+v", locked.Lock)
			}
			if err := locked.Validate(context.Background()); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
