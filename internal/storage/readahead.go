package storage

import (
	"errors"
	"io"
	"sync"
)

// readAheadSize and readAheadDepth bound what a read-ahead reader holds: depth buffers of size
// bytes (1 MiB), whatever the object's size.
const (
	readAheadSize  = 256 << 10
	readAheadDepth = 4
)

// readAhead reads src in a goroutine of its own, up to readAheadDepth buffers ahead of its
// reader. An encrypted object's reads use it: age decrypts, authenticates and copies each 64 KiB
// chunk (and allocates its output) inside Read, so without it that work sits between the
// consumer's own reads (gunzip, tar, SHA-256) on one core; with it the two run side by side
// (docs/benchmarks.md, "Storage"). Close stops the goroutine and closes closer, which also
// ends a Read of src that waits on the network.
func readAhead(src io.Reader, closer io.Closer) io.ReadCloser {
	r := &readAheadReader{
		full:   make(chan []byte, readAheadDepth),
		free:   make(chan []byte, readAheadDepth),
		done:   make(chan struct{}),
		closer: closer,
	}
	for range readAheadDepth {
		r.free <- make([]byte, readAheadSize)
	}
	go r.fill(src)
	return r
}

type readAheadReader struct {
	full, free chan []byte
	// err is what ends the stream (io.EOF at its end); written before full is closed.
	err  error
	done chan struct{}
	// buf is the buffer being read, cur what is left of it.
	buf, cur  []byte
	closer    io.Closer
	closeOnce sync.Once
	closeErr  error
}

// fill reads src into free buffers and hands them over in order, until src ends or fails or
// the reader is closed.
func (r *readAheadReader) fill(src io.Reader) {
	defer close(r.full)
	for {
		var buf []byte
		select {
		case buf = <-r.free:
		case <-r.done:
			r.err = errors.New("read after close")
			return
		}
		n, err := io.ReadFull(src, buf[:cap(buf)])
		if n > 0 {
			select {
			case r.full <- buf[:n]:
			case <-r.done:
				r.err = errors.New("read after close")
				return
			}
		}
		switch {
		//nolint:errorlint // ReadFull's own io.EOF and io.ErrUnexpectedEOF, returned as they are, only say src ended (the last buffer is short); the same errors wrapped come from src itself: a cut-off object (age's "unexpected EOF", wrapped by decryptedReader) must stay an error.
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			r.err = io.EOF
			return
		case err != nil:
			r.err = err
			return
		}
	}
}

func (r *readAheadReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for len(r.cur) == 0 {
		if r.buf != nil {
			r.free <- r.buf[:cap(r.buf)] // never blocks: at most depth buffers exist
			r.buf = nil
		}
		buf, ok := <-r.full
		if !ok {
			return 0, r.err
		}
		r.buf, r.cur = buf, buf
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *readAheadReader) Close() error {
	r.closeOnce.Do(func() {
		close(r.done)
		r.closeErr = r.closer.Close()
	})
	return r.closeErr
}
