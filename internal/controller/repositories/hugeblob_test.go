package repositories

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/kopia/kopia/repo/blob"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/blobproxy"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/testenv"
)

type buffer struct{ bytes.Buffer }

func (b *buffer) Length() int { return b.Len() }

// indexBlob is the content of one of the repository's index blobs, and its ID.
func indexBlob(t *testing.T, backends blobproxy.Backends, ref cairnv1.RepositoryReference) (blob.ID, string) {
	t.Helper()
	ctx := context.Background()
	st, _, err := backends.Open(ctx, ref.StorageLocation, ref.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close(ctx) }()
	var id blob.ID
	if err := st.ListBlobs(ctx, "x", func(m blob.Metadata) error { id = m.BlobID; return nil }); err != nil || id == "" {
		t.Fatalf("no index blob in %s: %v", ref.Key(), err)
	}
	var out buffer
	if err := st.GetBlob(ctx, id, 0, -1, &out); err != nil {
		t.Fatal(err)
	}
	return id, out.String()
}

// TestHugeBlobFailsOnlyItsRepository: the manager's own use of a repository (snapshot
// deletion, maintenance) whose index blob a bucket writer replaced with a 2 GiB object fails
// naming the blob and its size, having allocated less than 64 MiB; another namespace's
// repository is maintained as before.
func TestHugeBlobFailsOnlyItsRepository(t *testing.T) {
	root := t.TempDir()
	bsl := &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{
			Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": root},
			ObjectStorage: &cairnv1.ObjectStorage{Prefix: "cluster-a"},
		},
	}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl).Build()
	backends := blobproxy.LocationBackends{Reader: c, Namespace: "cairn-system"}
	s := &Service{
		Client: c, Reader: c, Namespace: "cairn-system", Locks: blobproxy.NewLocks(0, nil), Backends: backends,
		Passwords: &podvolume.Passwords{Client: c, Reader: c, Namespace: "cairn-system", Secret: "passwords"},
	}
	ctx := context.Background()
	shop := cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "shop"}
	other := cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "other"}
	for _, ref := range []cairnv1.RepositoryReference{shop, other} {
		if err := s.Prepare(ctx, ref); err != nil {
			t.Fatalf("Prepare(%s): %v", ref.Key(), err)
		}
	}
	id, content := indexBlob(t, backends, shop)
	testenv.GrowFile(t, root, content, testenv.HugeBlobSize)
	wantErr := "blob " + string(id) + " has " + strconv.Itoa(testenv.HugeBlobSize) + " bytes"

	for name, op := range map[string]func() error{
		"maintenance": func() error { return s.Maintain(ctx, shop) },
		"snapshot deletion": func() error {
			return s.DeleteSnapshots(ctx, []podvolume.Snapshot{{Repository: shop, SnapshotID: "k0123456789abcdef0123456789abcdef"}})
		},
	} {
		var err error
		mem := testenv.MemoryOf(func() { err = op() })
		if !errors.Is(err, location.ErrBlobTooLarge) || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s of the repository with the 2 GiB blob: %v; want ErrBlobTooLarge with %q", name, err, wantErr)
		}
		if mem.Allocated > 64<<20 || mem.PeakRise > 64<<20 {
			t.Errorf("%s allocated %d bytes and raised the peak RSS by %d, want under 64 MiB", name, mem.Allocated, mem.PeakRise)
		}
	}
	if err := s.Maintain(ctx, other); err != nil {
		t.Errorf("maintaining another namespace's repository: %v", err)
	}
}
