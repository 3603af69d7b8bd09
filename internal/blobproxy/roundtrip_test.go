package blobproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kopia/kopia/repo/blob"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/repository"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// writeTree makes a small directory tree with some incompressible data.
func writeTree(t *testing.T, dir string) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	files := map[string][]byte{
		"big.bin":          big,
		"a/hello.txt":      []byte("hello, volume\n"),
		"a/b/c/deep.txt":   []byte("deep\n"),
		"empty-file":       nil,
		"a/b/second.txt":   bytes.Repeat([]byte("x"), 10000),
		"config/app.yaml":  []byte("key: value\n"),
		"config/other.txt": []byte("other\n"),
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a/hello.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
}

// tree describes dir: each entry's path, mode and content (a symlink's target).
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		case info.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			desc += " " + string(b)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKopiaRepositoryThroughTheProxy is the whole path: a kopia repository opened by
// internal/repository on the proxy's client storage (reconnecting through its ConnectionInfo),
// a snapshot and a restore, the manager's side being a filesystem location read from its
// BackupStorageLocation.
func TestKopiaRepositoryThroughTheProxy(t *testing.T) {
	root := t.TempDir()
	bsl := &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{
			Provider:      cairnv1.StorageProviderFilesystem,
			Config:        map[string]string{"path": root},
			ObjectStorage: &cairnv1.ObjectStorage{Prefix: "cluster-a"},
		},
	}
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl).Build()
	locks := NewLocks(0, nil)
	e := newEnv(t, LocationBackends{Reader: reader, Namespace: "cairn-system"}, locks)
	ctx := context.Background()

	src := t.TempDir()
	writeTree(t, src)

	st := e.client("default", "shop")
	rep, err := repository.Open(ctx, repository.Options{
		Storage: st, Password: "secret", Hostname: "cairn", Username: "node-a", ConfigDir: t.TempDir(),
	})
	if err != nil {
		t.Fatalf("repository.Open: %v", err)
	}
	tags := map[string]string{"pvc": "data"}
	first, err := rep.Snapshot(ctx, src, tags, nil)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	second, err := rep.Snapshot(ctx, src, tags, nil)
	if err != nil {
		t.Fatalf("second Snapshot: %v", err)
	}
	if second.Parent != first.ID || second.UploadedBytes >= first.UploadedBytes/10 {
		t.Errorf("the unchanged second snapshot: parent %q (want %q), uploaded %d bytes after %d",
			second.Parent, first.ID, second.UploadedBytes, first.UploadedBytes)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := rep.Restore(ctx, first.ID, dst, repository.RestoreOptions{Of: repository.SnapshotIdentity{Tags: tags}}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if err := rep.Close(); err != nil {
		t.Fatal(err)
	}
	want, got := tree(t, src), tree(t, dst)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("restored %s = %.60q, want %.60q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("restored %d entries, want %d", len(got), len(want))
	}

	// Everything the repository wrote is under <path>/<prefix>/kopia/<namespace>/.
	var outside []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		if d.Type().IsRegular() && !strings.HasPrefix(filepath.ToSlash(rel), "cluster-a/kopia/shop/") {
			outside = append(outside, rel)
		}
		return nil
	})
	if len(outside) > 0 {
		t.Errorf("files outside cluster-a/kopia/shop/: %v", outside)
	}

	// The repository's plain text never reached the storage: kopia encrypts in the client.
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("hello, volume")) {
				t.Errorf("%s holds plain text", p)
			}
		}
		return nil
	})

	// Once the repository and the first storage are closed, no session is left behind:
	// maintenance may start at once.
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	release, err := locks.Maintain(mctx, RepositoryKey("default", "shop"))
	if err != nil {
		t.Fatalf("a session outlived its storage: %v", err)
	}
	release()
}

// TestConnectionInfoReconnectsWithoutTheToken: kopia stores ConnectionInfo in its config file
// and reconnects through the registered type; the token stays in its file.
func TestConnectionInfoReconnectsWithoutTheToken(t *testing.T) {
	st, _ := fsStorage(t)
	e := newEnv(t, staticBackend(st, false), nil)
	c := e.client("default", "shop")
	b, err := json.Marshal(c.ConnectionInfo())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(goodToken)) {
		t.Fatalf("the token is in the ConnectionInfo: %s", b)
	}
	var ci blob.ConnectionInfo
	if err := json.Unmarshal(b, &ci); err != nil {
		t.Fatal(err)
	}
	again, err := blob.NewStorage(context.Background(), ci, false)
	if err != nil {
		t.Fatalf("NewStorage from %s: %v", b, err)
	}
	defer again.Close(context.Background())
	if err := again.PutBlob(context.Background(), "kopia.repository", sliceBytes("x"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := blobOf(t, c, "kopia.repository"); err != nil || got != "x" {
		t.Errorf("GetBlob = %q, %v", got, err)
	}
	if !strings.Contains(c.DisplayName(), "default/shop") {
		t.Errorf("DisplayName = %q", c.DisplayName())
	}
	if _, err := c.GetCapacity(context.Background()); !errors.Is(err, blob.ErrNotAVolume) {
		t.Errorf("GetCapacity = %v", err)
	}
	if err := c.ExtendBlobRetention(context.Background(), "x", blob.ExtendOptions{}); !errors.Is(err, blob.ErrUnsupportedObjectLock) {
		t.Errorf("ExtendBlobRetention = %v", err)
	}
}

func TestListingStreams(t *testing.T) {
	const half = 3000
	seen := make(chan struct{})
	var seenOnce bool
	lister := &listingStorage{list: func(ctx context.Context, cb func(blob.Metadata) error) error {
		emit := func(from int) error {
			for i := from; i < from+half; i++ {
				if err := cb(blob.Metadata{BlobID: blob.ID("p" + strings.Repeat("0", 8) + string(rune('a'+i%26))), Length: int64(i), Timestamp: time.Unix(int64(i), 0)}); err != nil {
					return err
				}
			}
			return nil
		}
		if err := emit(0); err != nil {
			return err
		}
		// The second half comes only once the client has seen the first: a proxy that
		// gathered the listing before sending it would never get here.
		select {
		case <-seen:
		case <-time.After(5 * time.Second):
			return errors.New("the client saw nothing of the listing while it was being made")
		case <-ctx.Done():
			return ctx.Err()
		}
		return emit(half)
	}}
	e := newEnv(t, staticBackend(lister, false), nil)
	c := e.client("default", "shop")
	var n int
	var lengths int64
	err := c.ListBlobs(context.Background(), "p", func(m blob.Metadata) error {
		if !seenOnce {
			seenOnce = true
			close(seen)
		}
		n++
		lengths += m.Length
		return nil
	})
	if err != nil || n != 2*half || lengths != int64(2*half*(2*half-1)/2) {
		t.Fatalf("ListBlobs: %d blobs, total length %d, %v", n, lengths, err)
	}

	// A callback's error ends the listing and is returned as it is.
	stop := errors.New("enough")
	lister2 := &listingStorage{list: func(_ context.Context, cb func(blob.Metadata) error) error {
		for i := 0; ; i++ {
			if err := cb(blob.Metadata{BlobID: "p1", Length: 1}); err != nil {
				return err
			}
		}
	}}
	e2 := newEnv(t, staticBackend(lister2, false), nil)
	if err := e2.client("default", "shop").ListBlobs(context.Background(), "", func(blob.Metadata) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("ListBlobs with a failing callback = %v", err)
	}

	// A storage that fails in the middle: the client gets its error, not a short listing.
	lister3 := &listingStorage{list: func(_ context.Context, cb func(blob.Metadata) error) error {
		_ = cb(blob.Metadata{BlobID: "p1", Length: 1})
		return errors.New("bucket vanished")
	}}
	e3 := newEnv(t, staticBackend(lister3, false), nil)
	err = e3.client("default", "shop").ListBlobs(context.Background(), "", func(blob.Metadata) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "bucket vanished") {
		t.Errorf("ListBlobs of a failing storage = %v", err)
	}
}

type listingStorage struct {
	blob.Storage
	list func(ctx context.Context, cb func(blob.Metadata) error) error
}

func (s *listingStorage) ListBlobs(ctx context.Context, _ blob.ID, cb func(blob.Metadata) error) error {
	return s.list(ctx, cb)
}

func sortedIDs(t *testing.T, st blob.Storage) []string {
	t.Helper()
	var ids []string
	if err := st.ListBlobs(context.Background(), "", func(m blob.Metadata) error { ids = append(ids, string(m.BlobID)); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	return ids
}

func (s *listingStorage) Close(context.Context) error { return nil }
