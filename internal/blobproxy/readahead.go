package blobproxy

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/kopia/kopia/repo/blob"
)

// cacheablePack reports whether id names a pack blob: kopia's data packs start with "p", its
// metadata packs (directory listings) with "q". Packs are never rewritten once written, so a
// copy of part of one stays true for the life of a session.
func cacheablePack(id blob.ID) bool {
	return strings.HasPrefix(string(id), "p") || strings.HasPrefix(string(id), "q")
}

// readAhead keeps the last few windows of packs a client read, so that the many small
// contents a restore reads from one pack (the files of a directory, written one after another
// into it by the backup) cost one request through the proxy per window instead of one each: a
// restore of 10,000 small files was 10,000 requests, each a few hundred microseconds of CPU on
// both sides. A window is the aligned span of size bytes a read falls in, fetched once
// however many reads wait for it; at most slots are kept, the least recently used dropped
// first. Reads as large as half a window gain nothing from it and bypass it.
type readAhead struct {
	size  int64
	slots int

	mu      sync.Mutex
	windows []*window // the most recently used last
}

// window is bytes [start, start+len(data)) of pack id, or the fetch bringing them.
type window struct {
	id    blob.ID
	start int64
	ready chan struct{} // closed once data or err is set
	data  []byte
	err   error
}

// covers reports whether a read of length bytes at offset of pack id falls in the window
// r.windowOf would fetch for it.
func (r *readAhead) covers(offset, length int64) bool {
	return length < r.size/2 && offset-offset%r.size+r.size >= offset+length
}

// lookup returns the window of id holding offset, and whether the caller must fetch it (it is
// new: the caller calls filled when done); the window becomes the most recently used.
func (r *readAhead) lookup(id blob.ID, offset int64) (*window, bool) {
	start := offset - offset%r.size
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, w := range r.windows {
		if w.id == id && w.start == start {
			r.windows = append(append(r.windows[:i:i], r.windows[i+1:]...), w)
			return w, false
		}
	}
	w := &window{id: id, start: start, ready: make(chan struct{})}
	if len(r.windows) >= r.slots {
		r.windows = append(r.windows[:0:0], r.windows[1:]...)
	}
	r.windows = append(r.windows, w)
	return w, true
}

// filled records the fetch of w; a failed one leaves the cache, so the next read tries again.
func (r *readAhead) filled(w *window, data []byte, err error) {
	w.data, w.err = data, err
	if err != nil {
		r.mu.Lock()
		for i, v := range r.windows {
			if v == w {
				r.windows = append(r.windows[:i:i], r.windows[i+1:]...)
				break
			}
		}
		r.mu.Unlock()
	}
	close(w.ready)
}

// readAhead answers a read of length bytes at offset of pack id from its window: ok is false
// when it cannot (the window could not be fetched, or the pack ends before the read does), and
// the caller reads the range as it would without read-ahead, which reports the error a reader
// expects.
func (c *proxyStorage) readAhead(ctx context.Context, id blob.ID, offset, length int64, output blob.OutputBuffer) (ok bool, err error) {
	w, fetch := c.ahead.lookup(id, offset)
	if fetch {
		data, ferr := c.fetchWindow(ctx, id, w.start, c.ahead.size)
		c.ahead.filled(w, data, ferr)
	}
	select {
	case <-w.ready:
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
	// A failed fetch (w.err) is not this read's error: the read is made again by range.
	from := offset - w.start
	if fetched := w.err == nil; !fetched || from+length > int64(len(w.data)) {
		return false, nil
	}
	output.Reset()
	if _, err := output.Write(w.data[from : from+length]); err != nil {
		return false, err
	}
	return true, nil
}

// fetchWindow reads up to size bytes of pack id from start (fewer where the pack ends).
func (c *proxyStorage) fetchWindow(ctx context.Context, id blob.ID, start, size int64) ([]byte, error) {
	var data []byte
	q := url.Values{"offset": {strconv.FormatInt(start, 10)}, "length": {strconv.FormatInt(size, 10)}, queryAtMost: {"true"}}
	err := c.do(ctx, request{method: http.MethodGet, path: blobPath(id), query: q, retryBody: true}, func(resp *http.Response) error {
		n := resp.ContentLength
		if n < 0 || n > size {
			return &ServerError{Status: resp.StatusCode, Message: "the blob proxy answered a read-ahead of " + strconv.FormatInt(size, 10) + " bytes with " + strconv.FormatInt(n, 10)}
		}
		data = make([]byte, n)
		_, err := io.ReadFull(resp.Body, data)
		return err
	})
	return data, err
}
