package storage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stallingStore hands out its objects' first bytes and then blocks, as a stalled S3 server's
// body does, until the reader is closed.
type stallingStore struct {
	*memStore
	after int
}

func (s stallingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.memStore.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	b, _ := io.ReadAll(rc)
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write(b[:s.after]) }() // then nothing more, until the reader is closed
	return pr, nil
}

// TestEncryptedCloseWhileStalled: closing an object whose store stopped sending ends its read
// ahead at once (the goroutine is gone when Close returns) and a Read after Close fails.
func TestEncryptedCloseWhileStalled(t *testing.T) {
	mem := &memStore{}
	keys := Keyring{Keys: map[string][]byte{"k1": newKey(t)}, WriteKey: "k1"}
	s, _ := Encrypted(mem, keys, "")
	data := randomBytes(t, 1<<20)
	if err := s.Put(t.Context(), "obj", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	stalled, _ := Encrypted(stallingStore{memStore: mem, after: 3 * segmentSize}, keys, "")
	rc, err := stalled.Get(t.Context(), "obj")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, firstSegmentPlain)
	if _, err := io.ReadFull(rc, got); err != nil || !bytes.Equal(got, data[:len(got)]) {
		t.Fatalf("the first segment: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- rc.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close of a stalled object did not return")
	}
	a := rc.(aheadReadCloser)
	select {
	case <-a.done:
	default:
		t.Fatal("the read ahead still runs after Close")
	}
	if _, err := io.ReadAll(rc); err == nil {
		t.Fatal("a read after Close ended without an error")
	}
}

// failingStore reads some of what is put and fails, as an S3 upload cut off does.
type failingStore struct {
	*memStore
	after int64
	err   error
}

func (s failingStore) Put(_ context.Context, _ string, r io.Reader) error {
	if _, err := io.CopyN(io.Discard, r, s.after); err != nil {
		return err
	}
	return s.err
}

// watchedReader counts the reads of a stream, and those made once its reader said it was done.
type watchedReader struct {
	r         io.Reader
	finished  atomic.Bool
	lateReads atomic.Int32
	mu        sync.Mutex
}

func (w *watchedReader) Read(p []byte) (int, error) {
	if w.finished.Load() {
		w.lateReads.Add(1)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.r.Read(p)
}

// TestEncryptedPutStoreFails: a store that fails in the middle of an upload fails the Put with
// its error, and the stream being stored is not read any more once Put has returned.
func TestEncryptedPutStoreFails(t *testing.T) {
	cut := errors.New("connection reset by the S3 server")
	s, _ := Encrypted(failingStore{memStore: &memStore{}, after: 300 << 10, err: cut}, Keyring{Keys: map[string][]byte{"k1": newKey(t)}, WriteKey: "k1"}, "")
	src := &watchedReader{r: bytes.NewReader(randomBytes(t, 8<<20))}
	err := s.Put(t.Context(), "obj", src)
	src.finished.Store(true)
	if !errors.Is(err, cut) {
		t.Fatalf("Put = %v, want %v", err, cut)
	}
	time.Sleep(50 * time.Millisecond) // a goroutine left reading would read by now
	if n := src.lateReads.Load(); n != 0 {
		t.Fatalf("the stream was read %d times after Put returned", n)
	}
}

// TestAheadReader: the bytes come out as they went in, in reads of any size, then the error
// that ended the stream, again and again.
func TestAheadReader(t *testing.T) {
	broken := errors.New("broken")
	data := randomBytes(t, 3*aheadBufferSize+123)
	for _, tc := range []struct {
		name string
		r    func() io.Reader
		want []byte
		err  error
	}{
		{"to the end", func() io.Reader { return bytes.NewReader(data) }, data, io.EOF},
		{"empty", func() io.Reader { return strings.NewReader("") }, nil, io.EOF},
		{"an error after some bytes", func() io.Reader {
			return io.MultiReader(bytes.NewReader(data[:aheadBufferSize+5]), iotestErrReader{broken})
		}, data[:aheadBufferSize+5], broken},
		{"an error at once", func() io.Reader { return iotestErrReader{broken} }, nil, broken},
	} {
		for _, size := range []int{1, 1000, aheadBufferSize, 4 * aheadBufferSize} {
			a := newAheadReader(tc.r())
			var got []byte
			buf := make([]byte, size)
			var err error
			for err == nil {
				var n int
				n, err = a.Read(buf)
				got = append(got, buf[:n]...)
			}
			if !errors.Is(err, tc.err) || !bytes.Equal(got, tc.want) {
				t.Fatalf("%s, reads of %d: %d bytes, %v; want %d bytes, %v", tc.name, size, len(got), err, len(tc.want), tc.err)
			}
			if _, again := a.Read(buf); !errors.Is(again, tc.err) {
				t.Fatalf("%s: read again: %v", tc.name, again)
			}
			a.stop()
		}
	}
	// Stopped early, it hands out what it had read ahead (no more than its buffers) and fails.
	long := randomBytes(t, 10*aheadBufferSize)
	a := newAheadReader(bytes.NewReader(long))
	a.stop()
	got, err := io.ReadAll(a)
	if !errors.Is(err, errReadAfterClose) || len(got) > aheadBuffers*aheadBufferSize || !bytes.HasPrefix(long, got) {
		t.Fatalf("read %d bytes after stop, then %v", len(got), err)
	}
}
