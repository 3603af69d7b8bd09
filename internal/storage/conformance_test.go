package storage_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/storage"
)

// runConformance checks the ObjectStore contract; every provider must pass it.
func runConformance(t *testing.T, newStore func(t *testing.T) storage.ObjectStore) {
	t.Run("put then get, exists", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		mustPut(t, s, "a/b/c.txt", "hello")
		if got := mustGet(t, s, "a/b/c.txt"); got != "hello" {
			t.Errorf("Get = %q, want hello", got)
		}
		if ok, err := s.Exists(ctx, "a/b/c.txt"); !ok || err != nil {
			t.Errorf("Exists = %v, %v; want true", ok, err)
		}
		mustPut(t, s, "a/b/c.txt", "replaced")
		if got := mustGet(t, s, "a/b/c.txt"); got != "replaced" {
			t.Errorf("Get after overwrite = %q", got)
		}
	})

	t.Run("missing objects", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		if _, err := s.Get(ctx, "nope/x"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Get of a missing object = %v, want ErrNotFound", err)
		}
		if ok, err := s.Exists(ctx, "nope/x"); ok || err != nil {
			t.Errorf("Exists of a missing object = %v, %v", ok, err)
		}
		if err := s.Delete(ctx, "nope/x"); err != nil {
			t.Errorf("Delete of a missing object = %v, want nil", err)
		}
	})

	t.Run("list by prefix never crosses a name boundary", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		l := storage.Layout{Prefix: "p"}
		b1, b10 := l.Backup("ns", "b1"), l.Backup("ns", "b10")
		for _, k := range []string{b1.Archive, b1.Logs, b1.Metadata, b10.Archive, b10.Metadata, "p/other.txt"} {
			mustPut(t, s, k, k)
		}
		got, err := s.List(ctx, b1.Dir)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"p/backups/ns/b1/b1-logs.gz", "p/backups/ns/b1/b1.tar.gz", "p/backups/ns/b1/cairn-backup.json"}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("List(%s) = %v, want %v", b1.Dir, got, want)
		}
		all, err := s.List(ctx, "")
		if err != nil || len(all) != 6 {
			t.Errorf("List(\"\") = %v, %v; want 6 keys", all, err)
		}
		partial, err := s.List(ctx, "p/backups/ns/b1")
		if err != nil || len(partial) != 5 {
			t.Errorf("List of a partial name = %v, %v; want the 5 keys of b1 and b10", partial, err)
		}
		none, err := s.List(ctx, "q/")
		if err != nil || len(none) != 0 {
			t.Errorf("List of an empty prefix = %v, %v", none, err)
		}
	})

	t.Run("list each key as listed, through a read-only store too, stopping at the callback's error", func(t *testing.T) {
		inner, ctx := newStore(t), context.Background()
		for _, k := range []string{"l/a.x", "l/a/b", "l/a/c/d", "l/b", "m/other"} {
			mustPut(t, inner, k, k)
		}
		for name, s := range map[string]storage.ObjectStore{"store": inner, "read-only": storage.ReadOnly(inner)} {
			lister, ok := s.(storage.Lister)
			if !ok {
				t.Fatalf("the %s is not a Lister", name)
			}
			var got []string
			if err := lister.ListFunc(ctx, "l/", func(key string) error { got = append(got, key); return nil }); err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if want := []string{"l/a.x", "l/a/b", "l/a/c/d", "l/b"}; !slices.Equal(got, want) {
				t.Errorf("%s: ListFunc(l/) = %v, want %v", name, got, want)
			}
			stop := errors.New("enough")
			calls := 0
			err := lister.ListFunc(ctx, "l/", func(string) error { calls++; return stop })
			if !errors.Is(err, stop) || calls != 1 {
				t.Errorf("%s: ListFunc with a callback that fails = %v after %d calls; want its error after 1", name, err, calls)
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		mustPut(t, s, "d/one", "1")
		mustPut(t, s, "d/two", "2")
		if err := s.Delete(ctx, "d/one"); err != nil {
			t.Fatal(err)
		}
		keys, err := s.List(ctx, "d/")
		if err != nil || strings.Join(keys, ",") != "d/two" {
			t.Errorf("after delete List = %v, %v", keys, err)
		}
	})

	t.Run("invalid keys are refused", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		for _, k := range []string{"", "/abs", "../up", "a/../../b", "a//b", "a/./b"} {
			if err := s.Put(ctx, k, strings.NewReader("x")); !errors.Is(err, storage.ErrInvalidKey) {
				t.Errorf("Put(%q) = %v, want ErrInvalidKey", k, err)
			}
			if _, err := s.Get(ctx, k); !errors.Is(err, storage.ErrInvalidKey) {
				t.Errorf("Get(%q) = %v, want ErrInvalidKey", k, err)
			}
			if err := s.Delete(ctx, k); !errors.Is(err, storage.ErrInvalidKey) {
				t.Errorf("Delete(%q) = %v, want ErrInvalidKey", k, err)
			}
		}
	})

	t.Run("a failed put leaves nothing under the key", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		boom := errors.New("reader broke")
		r := io.MultiReader(bytes.NewReader(randomBytes(t, 3<<20)), errReader{boom})
		if err := s.Put(ctx, "f/partial.tar.gz", r); err == nil {
			t.Fatal("Put with a failing reader succeeded")
		}
		if ok, _ := s.Exists(ctx, "f/partial.tar.gz"); ok {
			t.Error("a failed Put left an object under its key")
		}
		if keys, _ := s.List(ctx, "f/"); len(keys) != 0 {
			t.Errorf("a failed Put left %v", keys)
		}
	})

	t.Run("a cancelled put leaves nothing under the key", func(t *testing.T) {
		s := newStore(t)
		ctx, cancel := context.WithCancel(context.Background())
		r := &cancelAfter{r: bytes.NewReader(randomBytes(t, 12<<20)), after: 1 << 20, cancel: cancel}
		if err := s.Put(ctx, "c/cancelled", r); err == nil {
			t.Fatal("a cancelled Put succeeded")
		}
		if ok, _ := s.Exists(context.Background(), "c/cancelled"); ok {
			t.Error("a cancelled Put left an object under its key")
		}
	})

	t.Run("a large archive round-trips and verifies", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		keys := storage.Layout{}.Backup("ns", "big")
		payload := randomBytes(t, 20<<20)
		data := archiveOf(t, payload)
		digest, err := storage.PutArchive(ctx, s, keys.Archive, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if digest.Size != int64(len(data)) {
			t.Errorf("size = %d, want %d", digest.Size, len(data))
		}
		if _, err := storage.ReadMetadata(ctx, s, keys); !errors.Is(err, storage.ErrNotCommitted) {
			t.Errorf("ReadMetadata before the commit marker = %v, want ErrNotCommitted", err)
		}
		commit(t, s, keys, digest)
		var got []byte
		err = storage.ReadArchive(ctx, s, keys.Archive, committedDigest(t, s, keys), func(e archive.Entry) error {
			if e.Name != archive.VersionPath {
				got = append(got, e.Data...)
			}
			return nil
		})
		if err != nil || !bytes.Equal(got, payload) {
			t.Errorf("read back %d bytes, err %v", len(got), err)
		}
	})

	t.Run("a corrupted or truncated archive fails its checksum", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		keys := storage.Layout{Prefix: "x"}.Backup("ns", "b")
		data := randomBytes(t, 64<<10)
		digest, err := storage.PutArchive(ctx, s, keys.Archive, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		commit(t, s, keys, digest)
		want := committedDigest(t, s, keys)
		for name, bad := range map[string][]byte{
			"one byte flipped": flipByte(data),
			"truncated":        data[:len(data)-1],
			"extended":         append(append([]byte{}, data...), 0),
		} {
			mustPut(t, s, keys.Archive, string(bad))
			err := storage.ReadArchive(ctx, s, keys.Archive, want, nil)
			if !errors.Is(err, storage.ErrChecksumMismatch) {
				t.Errorf("%s: read = %v, want ErrChecksumMismatch", name, err)
			}
		}
	})

	t.Run("read-only refuses writes and deletes", func(t *testing.T) {
		inner, ctx := newStore(t), context.Background()
		mustPut(t, inner, "r/x", "kept")
		s := storage.ReadOnly(inner)
		if err := s.Put(ctx, "r/y", strings.NewReader("no")); !errors.Is(err, storage.ErrReadOnly) {
			t.Errorf("Put = %v, want ErrReadOnly", err)
		}
		if err := s.Delete(ctx, "r/x"); !errors.Is(err, storage.ErrReadOnly) {
			t.Errorf("Delete = %v, want ErrReadOnly", err)
		}
		if got := mustGet(t, s, "r/x"); got != "kept" {
			t.Errorf("Get through read-only = %q", got)
		}
	})
}

func commit(t *testing.T, s storage.ObjectStore, keys storage.BackupKeys, d storage.ArchiveDigest) {
	t.Helper()
	err := storage.WriteMetadata(context.Background(), s, keys, storage.BackupMetadata{
		FormatVersion: "1.0.0", Namespace: "ns", Name: "b", Phase: "Completed", ArchiveSHA256: d.SHA256, ArchiveSize: d.Size,
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := storage.ReadMetadata(context.Background(), s, keys)
	if err != nil || m.ArchiveSHA256 != d.SHA256 || m.ArchiveSize != d.Size {
		t.Fatalf("ReadMetadata = %+v, %v", m, err)
	}
}

// committedDigest is the archive digest keys' commit marker records, as a restore reads it.
func committedDigest(t *testing.T, s storage.ObjectStore, keys storage.BackupKeys) storage.ArchiveDigest {
	t.Helper()
	m, err := storage.ReadMetadata(context.Background(), s, keys)
	if err != nil {
		t.Fatal(err)
	}
	return storage.ArchiveDigest{SHA256: m.ArchiveSHA256, Size: m.ArchiveSize}
}

// archiveOf is an archive in Cairn's format whose entries after the version hold payload, in
// order, 1 MiB at a time.
func archiveOf(t testing.TB, payload []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := archive.NewWriter(&buf, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(payload); i += 1 << 20 {
		if err := w.AddEntry(fmt.Sprintf("part-%04d", i>>20), payload[i:min(i+1<<20, len(payload))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustPut(t *testing.T, s storage.ObjectStore, key, value string) {
	t.Helper()
	if err := s.Put(context.Background(), key, strings.NewReader(value)); err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}
}

func mustGet(t *testing.T, s storage.ObjectStore, key string) string {
	t.Helper()
	rc, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return string(data)
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func flipByte(b []byte) []byte {
	c := append([]byte{}, b...)
	c[len(c)/2] ^= 0xff
	return c
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// cancelAfter cancels its context once `after` bytes were read, then keeps reading.
type cancelAfter struct {
	r      io.Reader
	n      int
	after  int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	if c.n >= c.after {
		c.cancel()
	}
	return n, err
}
