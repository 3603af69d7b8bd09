package storage

import (
	"errors"
	"io"
	"sync"
)

// Decrypting runs ahead of the reader, in a goroutine of its own, so that on a machine with a
// core to spare AES-GCM overlaps what the reader does with the bytes (a restore's SHA-256,
// gunzip and tar). Encrypting does not: measured in turns (BenchmarkEncryptedAhead256MiB, three
// runs), a read ahead was faster than a direct one in every run, an upload ahead slower in two
// of three (the writes leave no core idle, and the hand-over is one more copy). See
// docs/benchmarks.md.

const (
	// aheadBuffers and aheadBufferSize bound what an object read ahead holds beyond its
	// segments: four buffers of a segment's size.
	aheadBuffers    = 4
	aheadBufferSize = segmentSize
)

var errReadAfterClose = errors.New("read of an encrypted object after it was closed")

// aheadReader reads r in a goroutine of its own into a few buffers ahead of its reader. The
// first error of r (io.EOF included) is returned, after the bytes read before it, by every
// later Read. stop ends the goroutine and waits for it: after stop, r is not read any more.
type aheadReader struct {
	full     chan aheadChunk
	free     chan []byte
	stopping chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	cur aheadChunk
	off int
}

type aheadChunk struct {
	b   []byte
	err error
}

func newAheadReader(r io.Reader) *aheadReader {
	a := &aheadReader{
		full:     make(chan aheadChunk, aheadBuffers),
		free:     make(chan []byte, aheadBuffers),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
	}
	for range aheadBuffers {
		a.free <- make([]byte, aheadBufferSize)
	}
	go a.fill(r)
	return a
}

// fill reads r into free buffers and hands them on, until r's first error or stop.
func (a *aheadReader) fill(r io.Reader) {
	defer close(a.done)
	for {
		var buf []byte
		select {
		case buf = <-a.free:
		case <-a.stopping:
			return
		}
		// One read: what r has now is handed on now, as a direct read would have it.
		n, err := r.Read(buf)
		select {
		case a.full <- aheadChunk{b: buf[:n], err: err}:
		case <-a.stopping:
			return
		}
		if err != nil {
			return
		}
	}
}

func (a *aheadReader) Read(p []byte) (int, error) {
	for a.off == len(a.cur.b) {
		if a.cur.err != nil {
			return 0, a.cur.err
		}
		if a.cur.b != nil {
			a.free <- a.cur.b[:cap(a.cur.b)] // never blocks: there are as many places as buffers
		}
		select {
		case a.cur = <-a.full:
		case <-a.done:
			// The goroutine has returned; what it handed on before is still to be read.
			select {
			case a.cur = <-a.full:
			default:
				a.cur = aheadChunk{err: errReadAfterClose}
			}
		}
		a.off = 0
	}
	n := copy(p, a.cur.b[a.off:])
	a.off += n
	return n, nil
}

// stop ends the goroutine and waits for it. Whatever blocks its read of r must be unblocked
// first (the stored object closed).
func (a *aheadReader) stop() {
	a.stopOnce.Do(func() { close(a.stopping) })
	<-a.done
}

// aheadReadCloser is an object's content decrypted ahead; Close closes the stored object,
// which ends a read the goroutine is blocked in, and waits for the goroutine.
type aheadReadCloser struct {
	*aheadReader
	closer io.Closer
}

func (a aheadReadCloser) Close() error {
	a.stopOnce.Do(func() { close(a.stopping) })
	err := a.closer.Close()
	<-a.done
	return err
}
