package location_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kopia/kopia/repo/blob"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// A Velero repository in a filesystem location of format velero is read as Velero wrote it,
// one file per blob directly under <prefix>/kopia/<namespace>/, and never written: no .shards
// file appears, writes and deletes are refused, and no blob ID reaches outside the directory.
func TestKopiaStorageOfAVeleroFilesystemLocation(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "velero", "kopia", "ledger")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"kopia.repository": "format", "p0123": "0123456789", "q9": "index", ".hidden": "no"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "velero", "kopia", "secret"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	bsl := &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: "velero", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{
			Format: cairnv1.LocationFormatVelero, AccessMode: cairnv1.AccessModeReadOnly, Provider: cairnv1.StorageProviderFilesystem,
			Config: map[string]string{"path": root}, ObjectStorage: &cairnv1.ObjectStorage{Prefix: "velero"},
		},
	}
	r := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl).Build()
	ctx := context.Background()
	st, readOnly, err := location.KopiaStorage(ctx, r, bsl, "ledger")
	if err != nil || !readOnly {
		t.Fatalf("KopiaStorage = %v, readOnly %v", err, readOnly)
	}
	defer func() { _ = st.Close(ctx) }()

	var ids []string
	if err := st.ListBlobs(ctx, "", func(m blob.Metadata) error { ids = append(ids, string(m.BlobID)); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"kopia.repository", "p0123", "q9"}; !slices.Equal(ids, want) {
		t.Errorf("ListBlobs = %q, want %q", ids, want)
	}
	ids = nil
	_ = st.ListBlobs(ctx, "p", func(m blob.Metadata) error { ids = append(ids, string(m.BlobID)); return nil })
	if !slices.Equal(ids, []string{"p0123"}) {
		t.Errorf("ListBlobs(p) = %q", ids)
	}

	var out buffer
	if err := st.GetBlob(ctx, "p0123", 2, 3, &out); err != nil || out.String() != "234" {
		t.Errorf("GetBlob(2, 3) = %q, %v", out.String(), err)
	}
	if err := st.GetBlob(ctx, "p0123", 0, -1, &out); err != nil || out.String() != "0123456789" {
		t.Errorf("GetBlob(whole) = %q, %v", out.String(), err)
	}
	if err := st.GetBlob(ctx, "p0123", 7, -1, &out); err != nil || out.String() != "789" {
		t.Errorf("GetBlob(7, to the end) = %q, %v", out.String(), err)
	}
	if err := st.GetBlob(ctx, "p0123", 8, 5, &out); !errors.Is(err, blob.ErrInvalidRange) {
		t.Errorf("GetBlob past the end: %v, want ErrInvalidRange", err)
	}
	if m, err := st.GetMetadata(ctx, "q9"); err != nil || m.Length != 5 {
		t.Errorf("GetMetadata = %+v, %v", m, err)
	}
	for _, id := range []blob.ID{"missing", "../secret", "sub", ".hidden", ""} {
		if err := st.GetBlob(ctx, id, 0, -1, &out); !errors.Is(err, blob.ErrBlobNotFound) {
			t.Errorf("GetBlob(%q) = %v, want ErrBlobNotFound", id, err)
		}
	}
	if err := st.PutBlob(ctx, "p0123", blobBytes("x"), blob.PutOptions{}); err == nil {
		t.Error("PutBlob succeeded on a Velero repository")
	}
	if err := st.DeleteBlob(ctx, "p0123"); err == nil {
		t.Error("DeleteBlob succeeded on a Velero repository")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "p0123")); string(b) != "0123456789" {
		t.Errorf("the blob changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, ".shards")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a .shards file was written: %v", err)
	}

	if _, _, err := location.KopiaStorage(ctx, r, bsl, "other"); err == nil {
		t.Error("KopiaStorage of a namespace Velero copied nothing of succeeded")
	}
}
