package repository

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/blob/filesystem"
)

const password = "correct horse battery staple"

type fixture struct {
	storeDir string
	storage  blob.Storage
}

func newFixture(t testing.TB) *fixture {
	t.Helper()

	dir := t.TempDir()

	st, err := filesystem.New(t.Context(), &filesystem.Options{Path: dir}, true)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = st.Close(context.Background()) })

	return &fixture{storeDir: dir, storage: st}
}

func (f *fixture) open(t testing.TB, pw string) (*Repository, error) {
	t.Helper()

	return Open(t.Context(), Options{
		Storage: f.storage, Password: pw, Hostname: "cairn", Username: "test",
		ConfigDir: filepath.Join(t.TempDir(), "config"),
	})
}

func (f *fixture) mustOpen(t testing.TB) *Repository {
	t.Helper()

	r, err := f.open(t, password)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = r.Close() })

	return r
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}

	if err := os.Chmod(path, mode); err != nil { // not masked by umask
		t.Fatal(err)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()

	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}

	return b
}

// makeTree writes random bytes, many small files, a symlink, an empty directory and
// several file modes under a new directory.
func makeTree(t *testing.T) string {
	t.Helper()

	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "random.bin"), randomBytes(t, 4<<20), 0o640)
	writeFile(t, filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)

	for i := range 500 {
		mode := os.FileMode(0o644)
		if i%3 == 0 {
			mode = 0o600
		}

		writeFile(t, filepath.Join(dir, "small", fmt.Sprintf("d%d", i%10), fmt.Sprintf("f%03d.txt", i)),
			[]byte(fmt.Sprintf("small file %d\n", i)), mode)
	}

	if err := os.Symlink("small/d0/f000.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}

	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}

	if err := os.Chmod(filepath.Join(dir, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}

	return dir
}

type entry struct {
	mode   fs.FileMode
	data   string
	target string
}

func readTree(t *testing.T, root string) map[string]entry {
	t.Helper()

	out := map[string]entry{}

	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}

		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}

		info, err := os.Lstat(path)
		if err != nil {
			return err
		}

		e := entry{mode: info.Mode()}

		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			e.target, err = os.Readlink(path)
		case info.Mode().IsRegular():
			var b []byte
			b, err = os.ReadFile(path)
			e.data = string(b)
		}

		out[rel] = e

		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	return out
}

func TestRoundTrip(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)
	src := makeTree(t)

	res, err := r.Snapshot(t.Context(), src, map[string]string{"pvc": "a"}, nil)
	if err != nil {
		t.Fatal(err)
	}

	if res.ID == "" || res.Parent != "" || res.Files != 502 || res.Bytes < 4<<20 || res.UploadedBytes == 0 {
		t.Fatalf("result %+v", res)
	}

	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := r.Restore(t.Context(), res.ID, dst, RestoreOptions{Of: SnapshotIdentity{Tags: map[string]string{"pvc": "a"}}}); err != nil {
		t.Fatal(err)
	}

	want, got := readTree(t, src), readTree(t, dst)
	if len(want) != len(got) {
		t.Fatalf("restored %d entries, want %d", len(got), len(want))
	}

	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Fatalf("%s not restored", name)
		}

		if g != w {
			t.Fatalf("%s: restored mode %v target %q (%d bytes), want mode %v target %q (%d bytes)",
				name, g.mode, g.target, len(g.data), w.mode, w.target, len(w.data))
		}
	}

	if got["link"].target != "small/d0/f000.txt" || !got["empty"].mode.IsDir() || got["run.sh"].mode.Perm() != 0o755 {
		t.Fatalf("symlink, empty dir or mode not kept: %+v %+v %+v", got["link"], got["empty"], got["run.sh"])
	}
}

func TestRestoreRefusesNonEmptyTarget(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)

	tags := map[string]string{"pvc": "n"}
	res, err := r.Snapshot(t.Context(), makeTree(t), tags, nil)
	if err != nil {
		t.Fatal(err)
	}

	dst := t.TempDir()
	writeFile(t, filepath.Join(dst, "existing"), []byte("x"), 0o644)

	if _, err := r.Restore(t.Context(), res.ID, dst, RestoreOptions{Of: SnapshotIdentity{Tags: tags}}); err == nil || !strings.Contains(err.Error(), "is not empty") {
		t.Fatalf("restore into a non-empty directory: %v", err)
	}
}

func TestUnchangedSnapshotUploadsAlmostNothing(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)
	src := makeTree(t)
	tags := map[string]string{"pvc": "uid-1"}

	first, err := r.Snapshot(t.Context(), src, tags, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Another volume's snapshot must not be taken as the parent.
	if _, err := r.Snapshot(t.Context(), t.TempDir(), map[string]string{"pvc": "uid-2"}, nil); err != nil {
		t.Fatal(err)
	}

	second, err := r.Snapshot(t.Context(), src, tags, nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Logf("first uploaded %d bytes, second %d", first.UploadedBytes, second.UploadedBytes)

	if second.Parent != first.ID {
		t.Fatalf("parent %q, want %q", second.Parent, first.ID)
	}

	if second.UploadedBytes*100 >= first.UploadedBytes {
		t.Fatalf("second snapshot uploaded %d bytes, first %d: not under 1%%", second.UploadedBytes, first.UploadedBytes)
	}

	if second.Bytes != first.Bytes || second.Files != first.Files {
		t.Fatalf("second %+v, first %+v", second, first)
	}
}

func TestDataIsEncrypted(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)
	secret := "cairn-distinctive-plaintext-7f3a9c"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "secret.txt"), bytes.Repeat([]byte(secret+"\n"), 1000), 0o644)

	if _, err := r.Snapshot(t.Context(), src, nil, nil); err != nil {
		t.Fatal(err)
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	blobs := 0

	err := filepath.WalkDir(f.storeDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}

		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}

		blobs++

		if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte("secret.txt")) {
			t.Errorf("%s holds plain text", path)
		}

		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if blobs < 3 {
		t.Fatalf("only %d blobs in the repository", blobs)
	}
}

func TestWrongPassword(t *testing.T) {
	f := newFixture(t)

	r, err := f.open(t, password)
	if err != nil {
		t.Fatal(err)
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	if _, err := f.open(t, "not the password"); !errors.Is(err, ErrWrongPassword) {
		t.Fatalf("open with a wrong password: %v, want ErrWrongPassword", err)
	}

	r = f.mustOpen(t) // the right one still opens the existing repository
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCancelStopsUploadAndSavesNothing(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "large.bin"), randomBytes(t, 32<<20), 0o644)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	calls := 0

	_, err := r.Snapshot(ctx, src, map[string]string{"pvc": "c"}, func(p Progress) {
		calls++

		cancel()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled snapshot returned %v, want context.Canceled", err)
	}

	if calls == 0 {
		t.Fatal("progress never reported")
	}

	mans, err := r.load(t.Context(), nil, nil) // complete or not
	if err != nil {
		t.Fatal(err)
	}

	if len(mans) != 0 {
		t.Fatalf("%d manifests left after cancel", len(mans))
	}
}

// TestDeleteAndMaintain checks that Delete removes the snapshot and that both maintenance
// modes run as the owner set at initialisation. It does not check that space comes back:
// with the safety margins for running beside writers (maintenance.SafetyFull), kopia keeps
// unreferenced contents younger than 24h and deletes packs only a day after that, so a
// test cannot see the repository shrink without waiting days or faking the clock.
func TestDeleteAndMaintain(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)

	res, err := r.Snapshot(t.Context(), makeTree(t), map[string]string{"pvc": "d"}, nil)
	if err != nil {
		t.Fatal(err)
	}

	if err := r.Delete(t.Context(), res.ID); err != nil {
		t.Fatal(err)
	}

	ids, err := r.Snapshots(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}

	if len(ids) != 0 {
		t.Fatalf("snapshots after delete: %v", ids)
	}

	if err := r.Delete(t.Context(), res.ID); err == nil {
		t.Fatal("deleting a deleted snapshot succeeded")
	}

	if err := r.Maintain(t.Context(), false, false); err != nil {
		t.Fatalf("quick maintenance: %v", err)
	}

	if err := r.Maintain(t.Context(), true, false); err != nil {
		t.Fatalf("full maintenance: %v", err)
	}
}

// TestExclusiveMaintenanceReclaims checks that full maintenance run exclusively (nothing else
// using the repository) by a client that is not the maintenance owner gives back the space of
// deleted snapshots at once: the repository shrinks to under a tenth of its peak.
func TestExclusiveMaintenanceReclaims(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)
	dir := t.TempDir()
	writeRandom(t, filepath.Join(dir, "data"), 8<<20)

	res, err := r.Snapshot(t.Context(), dir, map[string]string{"pvc": "big"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	peak := storageSize(t, f.storage)
	if err := r.Delete(t.Context(), res.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	other, err := Open(t.Context(), Options{Storage: f.storage, Password: password, Hostname: "cairn", Username: "manager", ConfigDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// Maintenance collects only contents written before it started, compared at the storage's
	// timestamp resolution (a second on some filesystems): let one go by, as any real schedule does.
	time.Sleep(1100 * time.Millisecond)
	if err := other.Maintain(t.Context(), true, true); err != nil {
		t.Fatalf("exclusive full maintenance: %v", err)
	}
	if after := storageSize(t, f.storage); after*10 >= peak {
		t.Fatalf("repository is %d bytes after maintenance, peak was %d: want under a tenth", after, peak)
	}
}

func writeRandom(t testing.TB, name string, n int) {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func storageSize(t *testing.T, st blob.Storage) int64 {
	t.Helper()
	var total int64
	if err := st.ListBlobs(t.Context(), "", func(m blob.Metadata) error {
		total += m.Length
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return total
}

// TestRestoreOverwrite: with Overwrite, a restore into a volume that holds files writes the
// snapshot's files over theirs, leaves the others, and reports its bytes; a read-only client
// restores too.
func TestRestoreOverwrite(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, "data"), 1<<20)
	if err := os.WriteFile(filepath.Join(src, "config"), []byte("from the backup"), 0o640); err != nil {
		t.Fatal(err)
	}
	res, err := r.Snapshot(t.Context(), src, map[string]string{"pvc": "o"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(t.Context(), Options{Storage: f.storage, Password: password, Hostname: "cairn", Username: "reader", ConfigDir: t.TempDir(), ReadOnly: true, MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()

	dst := t.TempDir()
	if err := os.WriteFile(filepath.Join(dst, "config"), []byte("changed since"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "extra"), []byte("not in the snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	var lastDone, lastTotal int64
	got, err := ro.Restore(t.Context(), res.ID, dst, RestoreOptions{Overwrite: true, Parallel: 4, Of: SnapshotIdentity{Tags: map[string]string{"pvc": "o"}}, Progress: func(done, total int64) { lastDone, lastTotal = done, total }})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "config")); string(b) != "from the backup" {
		t.Fatalf("config = %q: not written over", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "extra")); string(b) != "not in the snapshot" {
		t.Fatalf("extra = %q: a file not in the snapshot was touched", b)
	}
	want := int64(1<<20 + len("from the backup"))
	if got.Bytes != want || got.Files != 2 || lastDone != want || lastTotal != want {
		t.Fatalf("result %+v, last progress %d/%d; want %d bytes, 2 files", got, lastDone, lastTotal, want)
	}
	if _, ok := readTree(t, dst)["extra"]; !ok {
		t.Fatal("the extra file is gone")
	}
}

// createOnlyStorage carries out DoNotRecreate as Cairn's blob proxy does: check, then write,
// one at a time.
type createOnlyStorage struct {
	blob.Storage
	mu sync.Mutex
}

func (s *createOnlyStorage) PutBlob(ctx context.Context, id blob.ID, data blob.Bytes, opts blob.PutOptions) error {
	if !opts.DoNotRecreate {
		return s.Storage.PutBlob(ctx, id, data, opts)
	}

	s.mu.Lock()
	defer s.mu.Unlock()

	if _, err := s.GetMetadata(ctx, id); err == nil {
		return blob.ErrBlobAlreadyExists
	}

	opts.DoNotRecreate = false

	return s.Storage.PutBlob(ctx, id, data, opts)
}

// Two volumes of a pod are copied at once into their namespace's new repository: every client
// opening it for the first time at the same moment must get the same, readable repository.
func TestConcurrentFirstOpens(t *testing.T) {
	f := newFixture(t)
	f.storage = &createOnlyStorage{Storage: f.storage}

	const clients = 4

	errs := make(chan error, clients)

	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			r, err := f.open(t, password)
			if err == nil {
				_, err = r.Snapshot(t.Context(), makeTree(t), map[string]string{"volume": "v"}, nil)
				_ = r.Close()
			}
			errs <- err
		})
	}

	wg.Wait()
	close(errs)

	for err := range errs {
		if err != nil {
			t.Errorf("a concurrent first open: %v", err)
		}
	}

	ids, err := f.mustOpen(t).Snapshots(t.Context(), nil)
	if err != nil || len(ids) != clients {
		t.Fatalf("Snapshots = %v, %v; want %d", ids, err, clients)
	}
}
