package blobproxy

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kopia/kopia/repo/blob"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// memoryHeadroom is what the read of a hostile blob may cost at most (issue 39).
const memoryHeadroom = 64 << 20

// TestHugeBlobIsRefusedNotRead: a 2 GiB object put in place of a repository's index blob, on
// a filesystem location and on an S3 one, fails the read of that blob with an error naming it
// and its size, while the proxy allocates (and the process's peak memory rises by) less than
// 64 MiB; the repository's other blobs and another namespace's repository keep working.
func TestHugeBlobIsRefusedNotRead(t *testing.T) {
	fsRoot := t.TempDir()
	server := testenv.StartS3Server(t)
	server.CreateBucket("volumes")
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "cairn-system"},
		Data:       map[string][]byte{"cloud": []byte(server.CredentialsFile())},
	}
	fsLoc := &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: "fs", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{
			Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": fsRoot},
			ObjectStorage: &cairnv1.ObjectStorage{Prefix: "cluster-a"},
		},
	}
	s3Loc := &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{
			Provider:      cairnv1.StorageProviderS3,
			ObjectStorage: &cairnv1.ObjectStorage{Bucket: "volumes", Prefix: "cluster-a"},
			Config:        map[string]string{"endpoint": server.Endpoint(), "region": "us-east-1"},
			Credential:    &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "cloud"},
		},
	}
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(secret, fsLoc, s3Loc).Build()
	e := newEnv(t, LocationBackends{Reader: reader, Namespace: "cairn-system"}, nil)
	ctx := context.Background()

	for _, tt := range []struct{ location, dir string }{
		{location: "fs", dir: fsRoot},
		{location: "s3", dir: filepath.Join(server.Dir, "volumes")},
	} {
		t.Run(tt.location, func(t *testing.T) {
			shop, other := e.client(tt.location, "shop"), e.client(tt.location, "other")
			for id, content := range map[blob.ID]string{"xn0_hostile": "to be grown, " + tt.location, "p-good": "good pack"} {
				if err := shop.PutBlob(ctx, id, sliceBytes(content), blob.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			testenv.GrowFile(t, tt.dir, "to be grown, "+tt.location, testenv.HugeBlobSize)

			var err error
			mem := testenv.MemoryOf(func() { _, err = blobOf(t, shop, "xn0_hostile") })
			if !errors.Is(err, location.ErrBlobTooLarge) ||
				!strings.Contains(err.Error(), "blob xn0_hostile has "+strconv.Itoa(testenv.HugeBlobSize)+" bytes") {
				t.Errorf("reading the 2 GiB blob: %v; want ErrBlobTooLarge naming xn0_hostile and its size", err)
			}
			if mem.Allocated > memoryHeadroom || mem.PeakRise > memoryHeadroom {
				t.Errorf("reading the 2 GiB blob allocated %d bytes and raised the peak RSS by %d, want under %d", mem.Allocated, mem.PeakRise, memoryHeadroom)
			}
			// Ranged reads are bounded by their length; one over the cap is refused as asked.
			var out outputBuffer
			if err := shop.GetBlob(ctx, "xn0_hostile", 0, maxBlobSize+1, &out); !errors.Is(err, location.ErrBlobTooLarge) {
				t.Errorf("reading more than the cap: %v; want ErrBlobTooLarge", err)
			}

			if got, err := blobOf(t, shop, "p-good"); err != nil || got != "good pack" {
				t.Errorf("the repository's other blob: %q, %v", got, err)
			}
			if err := other.PutBlob(ctx, "p-other", sliceBytes("other pack"), blob.PutOptions{}); err != nil {
				t.Fatalf("another namespace's write: %v", err)
			}
			if got, err := blobOf(t, other, "p-other"); err != nil || got != "other pack" {
				t.Errorf("another namespace's read: %q, %v", got, err)
			}
		})
	}
}
