package storage

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

type closeCounter struct{ n int }

func (c *closeCounter) Close() error { c.n++; return nil }

func TestReadAhead(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB: more buffers than the depth
	broken := errors.New("the disk failed")
	tests := []struct {
		name    string
		src     io.Reader
		want    []byte
		wantErr error
	}{
		{name: "all of it, in order", src: bytes.NewReader(data), want: data},
		{name: "one byte at a time", src: iotest.OneByteReader(bytes.NewReader(data[:1000])), want: data[:1000]},
		{name: "empty", src: bytes.NewReader(nil), want: []byte{}},
		{name: "an error after some data", src: io.MultiReader(bytes.NewReader(data[:700_000]), iotest.ErrReader(broken)), want: data[:700_000], wantErr: broken},
		{name: "a source's own unexpected EOF stays an error", src: io.MultiReader(bytes.NewReader(data[:10]), iotest.ErrReader(wrapped(io.ErrUnexpectedEOF))),
			want: data[:10], wantErr: io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			closer := &closeCounter{}
			r := readAhead(tt.src, closer)
			got, err := io.ReadAll(r)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("read %d bytes, want %d (or different bytes)", len(got), len(tt.want))
			}
			if err := r.Close(); err != nil || closer.n != 1 {
				t.Fatalf("Close = %v, closed %d times", err, closer.n)
			}
			_ = r.Close()
			if closer.n != 1 {
				t.Fatalf("closed %d times", closer.n)
			}
		})
	}
}

// A reader closed before its end stops its goroutine, which waits to hand over a buffer.
func TestReadAheadClosedEarly(t *testing.T) {
	closer := &closeCounter{}
	r := readAhead(bytes.NewReader(make([]byte, 10<<20)), closer)
	buf := make([]byte, 100)
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	rr := r.(*readAheadReader)
	for range rr.full { // closed once the goroutine has stopped
	}
	if rr.err == nil || closer.n != 1 {
		t.Fatalf("the goroutine ended with %v, closed %d times", rr.err, closer.n)
	}
}

func wrapped(err error) error { return &wrapError{err} }

type wrapError struct{ err error }

func (w *wrapError) Error() string { return "decrypting obj: " + w.err.Error() }
func (w *wrapError) Unwrap() error { return w.err }
