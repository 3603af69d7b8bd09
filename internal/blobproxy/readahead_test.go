package blobproxy

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kopia/kopia/repo/blob"
)

func TestReadAheadWindows(t *testing.T) {
	r := &readAhead{size: 1024, slots: 2}
	for _, tc := range []struct {
		offset, length int64
		covers         bool
	}{
		{0, 10, true},
		{1000, 24, true},   // ends at the window's end
		{1000, 25, false},  // crosses into the next window
		{2048, 511, true},  // under half a window
		{2048, 512, false}, // half a window or more gains nothing
	} {
		if got := r.covers(tc.offset, tc.length); got != tc.covers {
			t.Errorf("covers(%d, %d) = %v, want %v", tc.offset, tc.length, got, tc.covers)
		}
	}

	// Windows are aligned: two reads in one window share it; the least recently used goes.
	a, fetch := r.lookup("p1", 10)
	if !fetch || a.start != 0 {
		t.Fatalf("first lookup: fetch %v, start %d", fetch, a.start)
	}
	r.filled(a, make([]byte, 1024), nil)
	if w, fetch := r.lookup("p1", 1000); fetch || w != a {
		t.Error("a read in the same window fetched again")
	}
	b, _ := r.lookup("p1", 1024) // the next window
	r.filled(b, make([]byte, 1024), nil)
	if b.start != 1024 {
		t.Errorf("the second window starts at %d", b.start)
	}
	if _, fetch := r.lookup("p1", 5); fetch {
		t.Error("the first window left before a third was needed")
	}
	c, _ := r.lookup("p2", 0) // evicts the least recently used: p1's second window
	r.filled(c, nil, errors.New("gone"))
	if _, fetch := r.lookup("p1", 1030); !fetch {
		t.Error("the least recently used window was kept over two slots")
	}
	if _, fetch := r.lookup("p2", 0); !fetch {
		t.Error("a failed fetch stayed in the cache")
	}
}

// TestReadAheadThroughTheProxy reads every small range of a pack, as a restore of many small
// files does, and gets the bytes a client without read-ahead gets, in a few requests instead
// of one each; the ends of packs, ranges past them and blobs that are not packs behave as
// without it.
func TestReadAheadThroughTheProxy(t *testing.T) {
	st, _ := fsStorage(t)
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2))
	pack := make([]byte, 3<<20+12345) // three windows and a short fourth
	for i := range pack {
		pack[i] = byte(rnd.Uint32())
	}
	for _, id := range []blob.ID{"pabc", "xindex"} {
		if err := st.PutBlob(ctx, id, sliceBytes(pack), blob.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var gets atomic.Int32
	countGets := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				gets.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	}
	e := newEnv(t, staticBackend(st, true), nil, countGets)
	opt := e.options("default", "shop")
	opt.ReadAheadWindows, opt.ReadAheadBytes = 2, 1<<20
	c, err := newClient(ctx, opt, fastRetry)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })

	read := func(id blob.ID, offset, length int64) ([]byte, error) {
		var out outputBuffer
		err := c.GetBlob(ctx, id, offset, length, &out)
		return out.Bytes(), err
	}
	gets.Store(0)
	var reads int
	for offset := int64(0); offset < int64(len(pack)); offset += 4200 {
		length := min(4200, int64(len(pack))-offset)
		got, err := read("pabc", offset, length)
		if err != nil {
			t.Fatalf("read %d+%d: %v", offset, length, err)
		}
		if !bytes.Equal(got, pack[offset:offset+length]) {
			t.Fatalf("read %d+%d: wrong bytes", offset, length)
		}
		reads++
	}
	// Four windows, and one read for each range that crosses a window's end.
	if n := gets.Load(); n > 8 {
		t.Errorf("%d small reads made %d requests, want at most 8", reads, n)
	}

	// Concurrent reads of one new window fetch it once.
	c.ahead.windows = nil
	gets.Store(0)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			off := int64(i * 100)
			if got, err := read("pabc", off, 100); err != nil || !bytes.Equal(got, pack[off:off+100]) {
				t.Errorf("concurrent read %d: %v", off, err)
			}
		})
	}
	wg.Wait()
	if n := gets.Load(); n != 1 {
		t.Errorf("8 concurrent reads of one window made %d requests, want 1", n)
	}

	// A range past a pack's end is the same error as without read-ahead.
	if _, err := read("pabc", int64(len(pack))-10, 20); !errors.Is(err, blob.ErrInvalidRange) {
		t.Errorf("a range past the end: %v, want ErrInvalidRange", err)
	}
	if _, err := read("pabc", int64(len(pack))+5000, 20); !errors.Is(err, blob.ErrInvalidRange) {
		t.Errorf("a window past the end: %v, want ErrInvalidRange", err)
	}
	if _, err := read("pmissing", 0, 20); !errors.Is(err, blob.ErrBlobNotFound) {
		t.Errorf("a missing pack: %v, want ErrBlobNotFound", err)
	}
	// Blobs that are not packs (indexes, the format blob) are read by ranges, as ever.
	gets.Store(0)
	for offset := int64(0); offset < 10*4200; offset += 4200 {
		if got, err := read("xindex", offset, 4200); err != nil || !bytes.Equal(got, pack[offset:offset+4200]) {
			t.Fatalf("index read %d: %v", offset, err)
		}
	}
	if n := gets.Load(); n != 10 {
		t.Errorf("10 reads of an index made %d requests, want 10", n)
	}
}

func TestAtMostReads(t *testing.T) {
	st, _ := fsStorage(t)
	ctx := context.Background()
	if err := st.PutBlob(ctx, "p1", sliceBytes("0123456789"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, staticBackend(st, true), nil)
	session := e.client("default", "shop").session
	for _, tc := range []struct {
		query  string
		status int
		body   string
	}{
		{"offset=4&length=100&atMost=true", http.StatusOK, "456789"},
		{"offset=4&length=3&atMost=true", http.StatusOK, "456"},
		{"offset=10&length=3&atMost=true", http.StatusOK, ""},
		{"offset=11&length=3&atMost=true", http.StatusRequestedRangeNotSatisfiable, ""},
		{"offset=4&length=100", http.StatusRequestedRangeNotSatisfiable, ""},
	} {
		r := e.request(http.MethodGet, "/repositories/default/shop/blobs/p1?"+tc.query, session, "")
		if r.status != tc.status || (tc.status == http.StatusOK && r.body != tc.body) {
			t.Errorf("%s: %d %q, want %d %q", tc.query, r.status, r.body, tc.status, tc.body)
		}
	}
}
