package location_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
	"github.com/cairn-backup/cairn/internal/velerofmt"
)

// veleroFixtureBucket is the bucket hack/velero-fixtures.sh made with Velero.
func veleroFixtureBucket(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", "testdata", "velero", "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// checkVeleroLocation opens bsl as the reconcilers do and reads Velero's backups through it:
// the four committed ones, their markers, an archive read to its end, and every write refused.
func checkVeleroLocation(t *testing.T, bsl *cairnv1.BackupStorageLocation, objs ...*corev1.Secret) {
	t.Helper()
	ctx := context.Background()
	b := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl)
	for _, o := range objs {
		b = b.WithObjects(o)
	}
	store, err := location.Open(ctx, b.Build(), bsl)
	if err != nil {
		t.Fatal(err)
	}
	if !store.Velero {
		t.Error("store.Velero = false")
	}
	if err := store.Validate(ctx); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	committed, err := storage.ListCommitted(ctx, store.ObjectStore, store.Layout)
	if err != nil {
		t.Fatal(err)
	}
	if len(committed) != 4 {
		t.Fatalf("committed = %v, want Velero's four backups", committed)
	}
	keys := store.Layout.Backup(bsl.Namespace, "shop-broken")
	m, err := storage.ReadMetadata(ctx, store, keys)
	if err != nil || m.Phase != "PartiallyFailed" || m.Errors == 0 {
		t.Fatalf("marker of shop-broken = %+v, %v", m, err)
	}
	if err := storage.ReadArchive(ctx, store, keys.Archive, storage.ArchiveDigest{Unverified: true}, nil); err != nil {
		t.Errorf("ReadArchive = %v", err)
	}
	for _, key := range []string{keys.Archive, keys.Metadata, "velero/backups/shop-broken/velero-backup.json", "velero/restores/r/r-logs.gz"} {
		if err := store.Put(ctx, key, strings.NewReader("x")); !errors.Is(err, storage.ErrReadOnly) {
			t.Errorf("Put(%s) = %v, want ErrReadOnly", key, err)
		}
		if err := store.Delete(ctx, key); !errors.Is(err, storage.ErrReadOnly) {
			t.Errorf("Delete(%s) = %v, want ErrReadOnly", key, err)
		}
	}
	if err := store.Delete(ctx, keys.Archive); !errors.Is(err, velerofmt.ErrVeleroLocation) {
		t.Errorf("Delete = %v, want it to say the location is Velero's", err)
	}
}

func TestVeleroLocationOnFilesystem(t *testing.T) {
	spec := cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Format: cairnv1.LocationFormatVelero,
		AccessMode: cairnv1.AccessModeReadOnly, Config: map[string]string{"path": veleroFixtureBucket(t)}, ObjectStorage: &cairnv1.ObjectStorage{Prefix: "velero"}}
	checkVeleroLocation(t, &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "from-velero", Namespace: "cairn-system"}, Spec: spec})
}

// A ReadWrite access mode (which the CRD refuses) does not make a Velero location writable.
func TestVeleroLocationIsReadOnlyWhateverItsAccessMode(t *testing.T) {
	spec := cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Format: cairnv1.LocationFormatVelero,
		AccessMode: cairnv1.AccessModeReadWrite, Config: map[string]string{"path": veleroFixtureBucket(t)}, ObjectStorage: &cairnv1.ObjectStorage{Prefix: "velero"}}
	checkVeleroLocation(t, &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "from-velero", Namespace: "cairn-system"}, Spec: spec})
}

// The fixture bucket uploaded to an S3 server (versitygw on loopback), read through an s3
// location of format velero with Velero's prefix.
func TestVeleroLocationOnS3(t *testing.T) {
	server := testenv.StartS3Server(t)
	server.CreateBucket("velero")
	creds := storage.S3Credentials{AccessKeyID: server.AccessKey, SecretAccessKey: server.SecretKey}
	upload, err := storage.NewS3(storage.S3Config{Bucket: "velero", Endpoint: server.Endpoint(), Region: "us-east-1", ForcePathStyle: true, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	root := veleroFixtureBucket(t)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(root, path)
		return upload.Put(context.Background(), filepath.ToSlash(rel), f)
	})
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: "cairn-system"}, Data: map[string][]byte{"cloud": []byte(server.CredentialsFile())}}
	spec := cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderS3, Format: cairnv1.LocationFormatVelero, AccessMode: cairnv1.AccessModeReadOnly,
		ObjectStorage: &cairnv1.ObjectStorage{Bucket: "velero", Prefix: "velero"},
		Config:        map[string]string{"region": "us-east-1", "endpoint": server.Endpoint(), "forcePathStyle": "true"},
		Credential:    &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s3"}, Key: "cloud"}}
	checkVeleroLocation(t, &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "from-velero-s3", Namespace: "cairn-system"}, Spec: spec}, secret)
}
