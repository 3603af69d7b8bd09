package storage

import (
	"errors"
	"io"
	"sync"
)

// An encrypted object's bytes are handed between two goroutines, so that on a machine with a
// core to spare AES-GCM overlaps the rest of the work on them. Reading, the object is decrypted
// ahead of its reader (a restore's SHA-256, gunzip and tar). Writing, the plaintext is read
// ahead of the sealing: the caller's stream (PutArchive's SHA-256 of the archive) is consumed
// in one goroutine while the other seals and writes to the store. Measured in turns
// (BenchmarkEncryptionCost256MiB, BenchmarkEncryptedAhead256MiB, docs/benchmarks.md); sealing
// ahead of the writes instead (the hand-over after encrypting) was slower: the hashing and
// sealing were then on the same core. A Put waits for its goroutine before it returns, so the
// caller's stream is never read after Put: when the store fails first, that is once the
// stream's pending read returns (a pipe's next write or close).

const (
	// aheadBuffers and aheadBufferSize bound what an object read or written ahead holds
	// beyond its segments: four buffers of a segment's size.
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
