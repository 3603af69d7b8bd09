package location_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kopia/kopia/repo/blob"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// blobBytes is the blob.Bytes of a byte slice.
type blobBytes []byte

func (b blobBytes) Length() int                        { return len(b) }
func (b blobBytes) WriteTo(w io.Writer) (int64, error) { n, err := w.Write(b); return int64(n), err }
func (b blobBytes) Reader() io.ReadSeekCloser          { return nopCloser{bytes.NewReader(b)} }

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// buffer is a blob.OutputBuffer.
type buffer struct{ bytes.Buffer }

func (b *buffer) Length() int { return b.Len() }

func fsLocation(dir, prefix string, mode cairnv1.AccessMode) *cairnv1.BackupStorageLocation {
	l := loc("fs", false, 0)
	l.Spec.Provider = cairnv1.StorageProviderFilesystem
	l.Spec.Config = map[string]string{"path": dir}
	l.Spec.ObjectStorage = &cairnv1.ObjectStorage{Prefix: prefix}
	l.Spec.AccessMode = mode
	return &l
}

// files lists the regular files under dir, slash-separated and relative to it.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func putGet(t *testing.T, st blob.Storage, id blob.ID, data string) {
	t.Helper()
	ctx := context.Background()
	if err := st.PutBlob(ctx, id, blobBytes(data), blob.PutOptions{}); err != nil {
		t.Fatalf("PutBlob: %v", err)
	}
	var out buffer
	if err := st.GetBlob(ctx, id, 0, -1, &out); err != nil || out.String() != data {
		t.Fatalf("GetBlob = %q, %v; want %q", out.String(), err, data)
	}
}

func TestKopiaStorageFilesystemLivesUnderThePrefix(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, ro, err := location.KopiaStorage(ctx, nil, fsLocation(dir, "cluster-a", ""), "shop")
	if err != nil || ro {
		t.Fatalf("KopiaStorage = %v, readOnly %v", err, ro)
	}
	defer st.Close(ctx)
	putGet(t, st, "kopia.repository", "format")
	putGet(t, st, "p0123456789abcdef", "pack")
	for _, f := range files(t, dir) {
		if !strings.HasPrefix(f, "cluster-a/kopia/shop/") {
			t.Errorf("%s is outside cluster-a/kopia/shop/", f)
		}
	}
	var ids []string
	if err := st.ListBlobs(ctx, "", func(m blob.Metadata) error { ids = append(ids, string(m.BlobID)); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	if strings.Join(ids, ",") != "kopia.repository,p0123456789abcdef" {
		t.Errorf("ListBlobs = %v", ids)
	}

	// Another namespace is another repository.
	other, _, err := location.KopiaStorage(ctx, nil, fsLocation(dir, "cluster-a", ""), "shopping")
	if err != nil {
		t.Fatal(err)
	}
	var out buffer
	if err := other.GetBlob(ctx, "kopia.repository", 0, -1, &out); !errors.Is(err, blob.ErrBlobNotFound) {
		t.Errorf("the namespace shopping sees shop's blob: %v", err)
	}

	// ReadOnly: reads work, writes are refused.
	ros, ro, err := location.KopiaStorage(ctx, nil, fsLocation(dir, "cluster-a", cairnv1.AccessModeReadOnly), "shop")
	if err != nil || !ro {
		t.Fatalf("ReadOnly KopiaStorage = %v, readOnly %v", err, ro)
	}
	out.Reset()
	if err := ros.GetBlob(ctx, "p0123456789abcdef", 0, -1, &out); err != nil || out.String() != "pack" {
		t.Errorf("ReadOnly GetBlob = %q, %v", out.String(), err)
	}
	if err := ros.PutBlob(ctx, "p1", blobBytes("x"), blob.PutOptions{}); err == nil {
		t.Error("a ReadOnly location's storage took a write")
	}
	if err := ros.DeleteBlob(ctx, "p0123456789abcdef"); err == nil {
		t.Error("a ReadOnly location's storage took a delete")
	}
}

func TestKopiaStorageFilesystemRefusals(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	// A ReadOnly location with no repository for the namespace: refused, nothing written.
	if _, _, err := location.KopiaStorage(ctx, nil, fsLocation(dir, "p", cairnv1.AccessModeReadOnly), "shop"); err == nil ||
		!strings.Contains(err.Error(), "holds no volume data repository") {
		t.Errorf("ReadOnly without repository: %v", err)
	}
	if f := files(t, dir); len(f) > 0 {
		t.Errorf("a ReadOnly location was written to: %v", f)
	}

	// A location directory that is not there (a volume not mounted) is not made.
	missing := filepath.Join(dir, "not-mounted")
	if _, _, err := location.KopiaStorage(ctx, nil, fsLocation(missing, "", ""), "shop"); err == nil {
		t.Error("a missing location directory was accepted")
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the missing location directory was created: %v", err)
	}

	// A symbolic link in the repository's path is refused.
	elsewhere := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "linked"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, "linked", "kopia")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := location.KopiaStorage(ctx, nil, fsLocation(dir, "linked", ""), "shop"); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlinked kopia directory: %v", err)
	}

	// A namespace that is not a DNS label never becomes a path.
	if _, _, err := location.KopiaStorage(ctx, nil, fsLocation(dir, "p", ""), "../etc"); err == nil {
		t.Error("namespace ../etc accepted")
	}
}

func TestKopiaStorageRefusesNestedLocation(t *testing.T) {
	dir := t.TempDir()
	older := fsLocation(dir, "a", "")
	older.Name, older.CreationTimestamp = "older", metav1.NewTime(t0.Add(-time.Hour))
	newer := fsLocation(dir, "a/b", "")
	newer.Name = "newer"
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(older, newer).Build()
	if _, _, err := location.KopiaStorage(context.Background(), reader, newer, "shop"); !errors.Is(err, location.ErrConfig) ||
		!strings.Contains(err.Error(), "older") {
		t.Errorf("nested location: %v", err)
	}
}

func TestKopiaStorageS3(t *testing.T) {
	server := testenv.StartS3Server(t)
	server.CreateBucket("volumes")
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "cairn-system"},
		Data:       map[string][]byte{"cloud": []byte(server.CredentialsFile())},
	}
	l := loc("s3", false, 0)
	l.Spec.Provider = cairnv1.StorageProviderS3
	l.Spec.ObjectStorage = &cairnv1.ObjectStorage{Bucket: "volumes", Prefix: "cluster-a"}
	l.Spec.Config = map[string]string{"endpoint": server.Endpoint(), "region": "us-east-1"}
	l.Spec.Credential = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "cloud"}
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(secret, &l).Build()
	ctx := context.Background()

	st, ro, err := location.KopiaStorage(ctx, reader, &l, "shop")
	if err != nil || ro {
		t.Fatalf("KopiaStorage = %v, %v", err, ro)
	}
	defer st.Close(ctx)
	putGet(t, st, "p0123456789abcdef", "pack")
	if got := files(t, filepath.Join(server.Dir, "volumes")); strings.Join(got, ",") != "cluster-a/kopia/shop/p0123456789abcdef" {
		t.Errorf("objects in the bucket: %v", got)
	}

	// A wrong secret is a clear error, not a hang or a fallback to another identity.
	secret.Data["cloud"] = []byte("[default]\naws_access_key_id = " + server.AccessKey + "\naws_secret_access_key = wrong-secret-value\n")
	if err := reader.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	bad, _, err := location.KopiaStorage(ctx, reader, &l, "shop")
	if err == nil {
		var out buffer
		err = bad.GetBlob(ctx, "p0123456789abcdef", 0, -1, &out)
	}
	if err == nil {
		t.Error("a wrong secret key was accepted")
	}
}
