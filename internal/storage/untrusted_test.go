package storage_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/storage"
)

// Archives and the side objects of backups and restores are untrusted input (DESIGN.md section
// 15): whoever can write the bucket can write them, marker included.

// countingStore counts the bytes its Gets hand out.
type countingStore struct {
	storage.ObjectStore
	read *atomic.Int64
}

func (s countingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.ObjectStore.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return countingReadCloser{rc, s.read}, nil
}

type countingReadCloser struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingReadCloser) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// zeroArchive is a tar.gz with one entry of size zero bytes under name, streamed (never held).
func zeroArchive(t *testing.T, name string, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroReader{}, size); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func digestOf(data []byte) storage.ArchiveDigest {
	sum := sha256.Sum256(data)
	return storage.ArchiveDigest{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// A stored archive longer than its marker records is read no further than the recorded size:
// today's reader read all of it before comparing.
func TestReadArchiveStopsAtTheRecordedSize(t *testing.T) {
	f := newReadArchiveFixture(t)
	for _, tt := range []struct {
		name  string
		extra int
	}{
		{name: "one byte more", extra: 1},
		{name: "a megabyte more", extra: 1 << 20},
		{name: "32 MiB more", extra: 32 << 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.storeBytes(t, append(append([]byte{}, f.data...), bytes.Repeat([]byte{0x1f}, tt.extra)...))
			var read atomic.Int64
			err := storage.ReadArchive(context.Background(), countingStore{f.store, &read}, f.key, f.digest, func(archive.Entry) error { return nil })
			if !errors.Is(err, storage.ErrChecksumMismatch) || !strings.Contains(err.Error(), "longer than") {
				t.Fatalf("ReadArchive = %v, want ErrChecksumMismatch saying the archive is longer than recorded", err)
			}
			if got := read.Load(); got > f.digest.Size+1 {
				t.Errorf("read %d bytes of the store: the marker records %d", got, f.digest.Size)
			}
		})
	}
}

func TestReadArchiveCapsEntries(t *testing.T) {
	const name = "resources/configmaps/namespaces/a/big.json"
	data := zeroArchive(t, name, 64<<10)
	good := digestOf(data)
	wrongSum := good
	wrongSum.SHA256 = strings.Repeat("0", 64)
	for _, tt := range []struct {
		name    string
		want    storage.ArchiveDigest
		opts    []storage.TransferOption
		wantErr []error
		notErr  error
	}{
		{name: "under the cap", want: good, opts: []storage.TransferOption{storage.WithMaxEntrySize(64 << 10)}},
		{name: "over the cap, the marker right", want: good, opts: []storage.TransferOption{storage.WithMaxEntrySize(64<<10 - 1)},
			wantErr: []error{storage.ErrArchiveUnreadable, archive.ErrEntryTooLarge}, notErr: storage.ErrChecksumMismatch},
		{name: "over the cap, the marker wrong: the mismatch wins", want: wrongSum, opts: []storage.TransferOption{storage.WithMaxEntrySize(1024)},
			wantErr: []error{storage.ErrChecksumMismatch}, notErr: storage.ErrArchiveUnreadable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := newFilesystem(t)
			mustPut(t, store, "a.tar.gz", string(data))
			var seen int
			err := storage.ReadArchive(context.Background(), store, "a.tar.gz", tt.want, func(archive.Entry) error { seen++; return nil }, tt.opts...)
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("ReadArchive = %v", err)
			}
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("ReadArchive = %v, want %v", err, want)
				}
			}
			if tt.notErr != nil && errors.Is(err, tt.notErr) {
				t.Errorf("ReadArchive = %v, not %v", err, tt.notErr)
			}
			if err != nil && seen != 0 {
				t.Errorf("the callback saw %d entries of a refused archive", seen)
			}
		})
	}
}

// The archive: one 512 MiB JSON entry (half a megabyte compressed), with a wrong
// checksum in the marker. Reading it took the manager from 45 MB to 2.3 GB; it must now
// allocate about nothing, and still say that the checksum does not match.
func TestReadArchiveBombWithAWrongChecksum(t *testing.T) {
	if testing.Short() {
		t.Skip("compresses 512 MiB")
	}
	data := zeroArchive(t, "resources/configmaps/namespaces/a/bomb.json", 512<<20)
	want := digestOf(data)
	want.SHA256 = strings.Repeat("0", 64)
	store := newFilesystem(t)
	mustPut(t, store, "bomb.tar.gz", string(data))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := storage.ReadArchive(context.Background(), store, "bomb.tar.gz", want, func(archive.Entry) error { return nil })
	runtime.ReadMemStats(&after)
	if !errors.Is(err, storage.ErrChecksumMismatch) {
		t.Fatalf("ReadArchive = %v, want ErrChecksumMismatch", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("reading the archive allocated %d MiB", alloc>>20)
	}
}

func gzipped(t *testing.T, parts ...io.Reader) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	for _, p := range parts {
		if _, err := io.Copy(gz, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodeGzipJSONCaps(t *testing.T) {
	const key = "backups/a/b/b-itemoperations.json.gz"
	exact := `["` + strings.Repeat("x", 1024-4) + `"]`
	tests := []struct {
		name    string
		data    []byte
		wantErr error
		// wantMsg is in the error.
		wantMsg string
	}{
		{name: "small", data: gzipped(t, strings.NewReader(`[{"action":"a"}]`))},
		{name: "exactly the cap", data: gzipped(t, strings.NewReader(exact))},
		{name: "one byte over the cap", data: gzipped(t, strings.NewReader(exact+" ")), wantErr: storage.ErrFileTooLarge, wantMsg: "more than 1024 bytes"},
		{name: "a gzip bomb of whitespace", data: gzipped(t, strings.NewReader("["), io.LimitReader(spaces{}, 256<<20), strings.NewReader("]")),
			wantErr: storage.ErrFileTooLarge, wantMsg: key},
		{name: "not gzip", data: []byte(`[{"action":"a"}]`), wantMsg: key + ": not gzip"},
		{name: "not JSON", data: gzipped(t, strings.NewReader(`[{`)), wantMsg: key},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := storage.DecodeGzipJSON(bytes.NewReader(tt.data), key, 1024, &v)
			runtime.ReadMemStats(&after)
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("DecodeGzipJSON = %v, want %v", err, tt.wantErr)
			}
			if tt.wantMsg == "" && err != nil {
				t.Errorf("DecodeGzipJSON = %v", err)
			}
			if tt.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tt.wantMsg)) {
				t.Errorf("DecodeGzipJSON = %v, want an error with %q", err, tt.wantMsg)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
				t.Errorf("decoding allocated %d MiB", alloc>>20)
			}
		})
	}
}

type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}
