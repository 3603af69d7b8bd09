package location

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/blob/filesystem"
	"github.com/kopia/kopia/repo/blob/sharded"
)

// sliceBytes is the blob.Bytes of a byte slice.
type sliceBytes []byte

func (b sliceBytes) Length() int                        { return len(b) }
func (b sliceBytes) WriteTo(w io.Writer) (int64, error) { n, err := w.Write(b); return int64(n), err }
func (b sliceBytes) Reader() io.ReadSeekCloser          { return readSeekNopCloser{bytes.NewReader(b)} }

type readSeekNopCloser struct{ *bytes.Reader }

func (readSeekNopCloser) Close() error { return nil }

// strictOutput is a caller's buffer that fails the test when more than max bytes reach it.
type strictOutput struct {
	t   *testing.T
	max int
	bytes.Buffer
}

func (o *strictOutput) Write(p []byte) (int, error) {
	if o.Len()+len(p) > o.max {
		o.t.Errorf("%d bytes reached the caller's buffer, the cap is %d", o.Len()+len(p), o.max)
	}
	return o.Buffer.Write(p)
}

func (o *strictOutput) Length() int { return o.Len() }

// countingStorage counts the GetBlob calls that reach the storage.
type countingStorage struct {
	blob.Storage
	reads atomic.Int32
}

func (s *countingStorage) GetBlob(ctx context.Context, id blob.ID, offset, length int64, output blob.OutputBuffer) error {
	s.reads.Add(1)
	return s.Storage.GetBlob(ctx, id, offset, length, output)
}

// lyingStorage reports every blob as 10 bytes long.
type lyingStorage struct{ blob.Storage }

func (s lyingStorage) GetMetadata(ctx context.Context, id blob.ID) (blob.Metadata, error) {
	md, err := s.Storage.GetMetadata(ctx, id)
	md.Length = 10
	return md, err
}

func fsBlobs(t *testing.T, sizes map[blob.ID]int) blob.Storage {
	t.Helper()
	ctx := context.Background()
	st, err := filesystem.New(ctx, &filesystem.Options{Path: t.TempDir(), Options: sharded.Options{}}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(ctx) })
	for id, n := range sizes {
		if err := st.PutBlob(ctx, id, sliceBytes(strings.Repeat("x", n)), blob.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func TestCappedReads(t *testing.T) {
	const maxSize = 1 << 20
	inner := &countingStorage{Storage: fsBlobs(t, map[blob.ID]int{"at-cap": maxSize, "over-cap": maxSize + 1, "small": 100})}
	st := capReads(inner, maxSize)
	tests := []struct {
		name           string
		id             blob.ID
		offset, length int64
		wantLen        int
		wantErr        string // "": no error; else its text has it, and it is ErrBlobTooLarge
		wantRead       bool   // the storage was asked for the bytes
	}{
		{name: "whole blob at the cap", id: "at-cap", length: -1, wantLen: maxSize, wantRead: true},
		{name: "whole blob over the cap", id: "over-cap", length: -1, wantErr: "blob over-cap has 1048577 bytes, more than the 1048576"},
		{name: "the end of a blob over the cap", id: "over-cap", offset: maxSize, length: -1, wantErr: "blob over-cap has 1048577 bytes"},
		{name: "a range within the cap of a blob over it", id: "over-cap", offset: 1, length: maxSize, wantLen: maxSize, wantRead: true},
		{name: "a range over the cap", id: "at-cap", length: maxSize + 1, wantErr: "a read of 1048577 bytes of blob at-cap"},
		{name: "small blob from an offset", id: "small", offset: 40, length: -1, wantLen: 100, wantRead: true},
		{name: "small range", id: "small", offset: 40, length: 10, wantLen: 10, wantRead: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := inner.reads.Load()
			out := &strictOutput{t: t, max: maxSize}
			err := st.GetBlob(context.Background(), tt.id, tt.offset, tt.length, out)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrBlobTooLarge) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("GetBlob = %v; want ErrBlobTooLarge with %q", err, tt.wantErr)
				}
			} else if err != nil || out.Len() != tt.wantLen {
				t.Errorf("GetBlob = %d bytes, %v; want %d", out.Len(), err, tt.wantLen)
			}
			if read := inner.reads.Load() > before; read != tt.wantRead {
				t.Errorf("the storage was asked for the bytes: %v, want %v", read, tt.wantRead)
			}
		})
	}
}

// TestCappedReadWhenTheSizeLies: a storage that says a 4 MiB blob has 10 bytes still has its
// read stopped at the cap, and the caller's buffer never holds more.
func TestCappedReadWhenTheSizeLies(t *testing.T) {
	const maxSize = 1 << 20
	st := capReads(lyingStorage{fsBlobs(t, map[blob.ID]int{"p-lies": 4 << 20})}, maxSize)
	out := &strictOutput{t: t, max: maxSize}
	err := st.GetBlob(context.Background(), "p-lies", 0, -1, out)
	if !errors.Is(err, ErrBlobTooLarge) || !strings.Contains(err.Error(), "blob p-lies has more than "+strconv.Itoa(maxSize)+" bytes") {
		t.Errorf("GetBlob = %v; want ErrBlobTooLarge naming p-lies", err)
	}
}

// TestCappedStorageReopensCapped: kopia opens a repository again from its storage's
// ConnectionInfo, as written to its config file; the storage it gets is capped the same.
func TestCappedStorageReopensCapped(t *testing.T) {
	const maxSize = 1 << 20
	st := capReads(fsBlobs(t, map[blob.ID]int{"over-cap": maxSize + 1, "small": 100}), maxSize)
	b, err := json.Marshal(st.ConnectionInfo())
	if err != nil {
		t.Fatal(err)
	}
	var ci blob.ConnectionInfo
	if err := json.Unmarshal(b, &ci); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	ctx := context.Background()
	again, err := blob.NewStorage(ctx, ci, false)
	if err != nil {
		t.Fatalf("reopening from %s: %v", b, err)
	}
	defer func() { _ = again.Close(ctx) }()
	var out strictOutput
	out.t, out.max = t, maxSize
	if err := again.GetBlob(ctx, "over-cap", 0, -1, &out); !errors.Is(err, ErrBlobTooLarge) {
		t.Errorf("the reopened storage read a blob over the cap: %v", err)
	}
	if err := again.GetBlob(ctx, "small", 0, -1, &out); err != nil || out.Len() != 100 {
		t.Errorf("the reopened storage read %d bytes, %v; want 100", out.Len(), err)
	}
}
