package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/storage"
)

// readArchiveFixture is an archive of a few items of different sizes (some barely compressible,
// so that the compressed stream has room for a flipped byte in every part), stored in a
// filesystem store under key with the digest of its upload.
type readArchiveFixture struct {
	store   storage.ObjectStore
	key     string
	data    []byte
	digest  storage.ArchiveDigest
	entries []archive.Entry
}

func newReadArchiveFixture(t *testing.T) readArchiveFixture {
	t.Helper()
	entries := []archive.Entry{
		{Name: archive.VersionPath, Data: []byte(archive.FormatVersion + "\n")},
		{Name: archive.ItemPath("namespaces", "", "", "shop"), Data: []byte(`{"kind":"Namespace"}`)},
		{Name: archive.ItemPath("configmaps", "", "shop", "settings"), Data: randomBytes(t, 16<<10)},
		{Name: archive.ItemPath("deployments", "apps", "shop", "web"), Data: bytes.Repeat([]byte("web"), 2048)},
		{Name: archive.ItemPath("widgets", "example.com", "shop", "w1"), Data: randomBytes(t, 8<<10)},
	}
	var buf bytes.Buffer
	w, err := archive.NewWriter(&buf, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries[1:] {
		if err := w.AddEntry(e.Name, e.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := readArchiveFixture{store: newFilesystem(t), key: "backups/ns/b/b.tar.gz", data: buf.Bytes(), entries: entries}
	f.digest, err = storage.PutArchive(context.Background(), f.store, f.key, bytes.NewReader(f.data))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// store replaces the stored archive with data; the digest stays the upload's.
func (f readArchiveFixture) storeBytes(t *testing.T, data []byte) {
	t.Helper()
	mustPut(t, f.store, f.key, string(data))
}

func TestReadArchiveSeesEveryEntryInOrder(t *testing.T) {
	f := newReadArchiveFixture(t)
	var seen []archive.Entry
	err := storage.ReadArchive(context.Background(), f.store, f.key, f.digest, func(e archive.Entry) error {
		seen = append(seen, e)
		return nil
	})
	if err != nil {
		t.Fatalf("ReadArchive = %v", err)
	}
	if !reflect.DeepEqual(seen, f.entries) {
		names := make([]string, len(seen))
		for i, e := range seen {
			names[i] = e.Name
		}
		t.Errorf("entries seen %q, want every entry of the archive, in order, with its data", names)
	}
	if err := storage.ReadArchive(context.Background(), f.store, f.key, f.digest, nil); err != nil {
		t.Errorf("ReadArchive without a callback = %v", err)
	}
}

func TestReadArchiveChecksumMismatchWins(t *testing.T) {
	f := newReadArchiveFixture(t)
	errStop := errors.New("the callback gave up")
	// Every part of the stream: the gzip header, the compressed data, the gzip trailer (its
	// CRC and size), the last byte.
	n := len(f.data)
	for _, at := range []int{0, 3, 10, n / 4, n / 2, 3 * n / 4, n - 8, n - 1} {
		for _, cb := range []struct {
			name string
			each func(archive.Entry) error
		}{
			{name: "no callback"},
			{name: "callback accepting", each: func(archive.Entry) error { return nil }},
			{name: "callback failing on the first entry", each: func(archive.Entry) error { return errStop }},
		} {
			t.Run(fmt.Sprintf("byte %d of %d, %s", at, n, cb.name), func(t *testing.T) {
				flipped := append([]byte{}, f.data...)
				flipped[at] ^= 0x01
				f.storeBytes(t, flipped)
				err := storage.ReadArchive(context.Background(), f.store, f.key, f.digest, cb.each)
				if !errors.Is(err, storage.ErrChecksumMismatch) {
					t.Fatalf("ReadArchive = %v, want ErrChecksumMismatch", err)
				}
				if errors.Is(err, errStop) || errors.Is(err, storage.ErrArchiveUnreadable) {
					t.Errorf("ReadArchive = %v: a mismatch must win over the callback's and the format's errors", err)
				}
			})
		}
	}
}

func TestReadArchiveReturnsTheCallbackErrorAsItIs(t *testing.T) {
	f := newReadArchiveFixture(t)
	errStop := errors.New("the callback gave up")
	var calls int
	err := storage.ReadArchive(context.Background(), f.store, f.key, f.digest, func(e archive.Entry) error {
		calls++
		if e.Name == f.entries[2].Name {
			return errStop
		}
		return nil
	})
	if err != errStop { //nolint:errorlint // "as it is": not wrapped
		t.Errorf("ReadArchive = %v, want the callback's error as it is", err)
	}
	if calls != 3 {
		t.Errorf("the callback was called %d times, want 3 (not again after it failed)", calls)
	}
}

func TestReadArchiveTruncatedOrExtended(t *testing.T) {
	f := newReadArchiveFixture(t)
	for _, tt := range []struct {
		name   string
		stored []byte
	}{
		{name: "cut in the middle", stored: f.data[:len(f.data)/2]},
		{name: "the gzip trailer missing", stored: f.data[:len(f.data)-8]},
		{name: "one byte missing", stored: f.data[:len(f.data)-1]},
		{name: "empty", stored: nil},
		{name: "one byte appended", stored: append(append([]byte{}, f.data...), 0)},
		{name: "a second archive appended", stored: append(append([]byte{}, f.data...), f.data...)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.storeBytes(t, tt.stored)
			var seen int
			err := storage.ReadArchive(context.Background(), f.store, f.key, f.digest, func(archive.Entry) error {
				seen++
				return nil
			})
			if !errors.Is(err, storage.ErrChecksumMismatch) {
				t.Errorf("ReadArchive = %v (after %d entries), want ErrChecksumMismatch", err, seen)
			}
		})
	}
}

// failingStore serves its objects through readers that fail once they have returned after bytes.
type failingStore struct {
	storage.ObjectStore
	after int
	err   error
}

func (s failingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.ObjectStore.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return failingReader{ReadCloser: rc, r: io.MultiReader(io.LimitReader(rc, int64(s.after)), errReader{s.err})}, nil
}

type failingReader struct {
	io.ReadCloser
	r io.Reader
}

func (f failingReader) Read(p []byte) (int, error) { return f.r.Read(p) }

func TestReadArchiveStoreFailingMidRead(t *testing.T) {
	f := newReadArchiveFixture(t)
	errConn := errors.New("connection reset by peer")
	errStop := errors.New("the callback gave up")
	for _, after := range []int{0, 10, len(f.data) / 2, len(f.data) - 1} {
		for _, each := range []func(archive.Entry) error{nil, func(archive.Entry) error { return errStop }} {
			t.Run(fmt.Sprintf("after %d bytes, callback %v", after, each != nil), func(t *testing.T) {
				s := failingStore{ObjectStore: f.store, after: after, err: errConn}
				err := storage.ReadArchive(context.Background(), s, f.key, f.digest, each)
				if !errors.Is(err, errConn) {
					t.Errorf("ReadArchive = %v, want the store's error", err)
				}
				// Nothing is known of the archive: it must not be called corrupt or unreadable.
				if errors.Is(err, storage.ErrChecksumMismatch) || errors.Is(err, storage.ErrArchiveUnreadable) || errors.Is(err, errStop) {
					t.Errorf("ReadArchive = %v: a failure to read is neither a mismatch, nor a broken archive, nor the callback's", err)
				}
			})
		}
	}
}

// An archive with no recorded digest (a Velero backup's) is read to its end and checked as a
// tar.gz, nothing else; a damaged one is still caught, as ErrArchiveUnreadable.
func TestReadArchiveUnverified(t *testing.T) {
	f := newReadArchiveFixture(t)
	unverified := storage.ArchiveDigest{Unverified: true}
	var seen int
	if err := storage.ReadArchive(context.Background(), f.store, f.key, unverified, func(archive.Entry) error { seen++; return nil }); err != nil {
		t.Fatalf("ReadArchive of an intact archive, unverified = %v", err)
	}
	if seen != len(f.entries) {
		t.Errorf("saw %d entries, want %d", seen, len(f.entries))
	}
	n := len(f.data)
	for name, data := range map[string][]byte{
		"truncated in the middle":  f.data[:n/2],
		"without its gzip trailer": f.data[:n-4],
		"a flipped byte in the compressed data": func() []byte {
			d := append([]byte{}, f.data...)
			d[n/2] ^= 0x40
			return d
		}(),
		"not gzip": []byte("this is not an archive"),
	} {
		t.Run(name, func(t *testing.T) {
			f.storeBytes(t, data)
			err := storage.ReadArchive(context.Background(), f.store, f.key, unverified, nil)
			if !errors.Is(err, storage.ErrArchiveUnreadable) {
				t.Fatalf("ReadArchive = %v, want ErrArchiveUnreadable", err)
			}
		})
	}
}
