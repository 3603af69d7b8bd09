package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// craftedArchive is a tar.gz of entries of the given sizes (zeros, which compress to almost
// nothing), written as whoever controls the bucket could write it, without the Writer.
func craftedArchive(t *testing.T, sizes map[string]int64, order []string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, name := range order {
		size := sizes[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(tw, zeros{}, size); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestEachMaxCapsEntries(t *testing.T) {
	const limit = 4 << 10
	tests := []struct {
		name    string
		sizes   map[string]int64
		order   []string
		wantErr error
		// wantSeen are the entries fn saw before the read ended.
		wantSeen []string
	}{
		{name: "every entry under the cap", sizes: map[string]int64{"a": 10, "b": limit - 1}, order: []string{"a", "b"}, wantSeen: []string{"a", "b"}},
		{name: "an entry of exactly the cap", sizes: map[string]int64{"a": limit}, order: []string{"a"}, wantSeen: []string{"a"}},
		{name: "an empty entry", sizes: map[string]int64{"a": 0}, order: []string{"a"}, wantSeen: []string{"a"}},
		{name: "one byte over the cap, by its header", sizes: map[string]int64{"a": 1, "big": limit + 1, "c": 1}, order: []string{"a", "big", "c"},
			wantErr: ErrEntryTooLarge, wantSeen: []string{"a"}},
		{name: "a first entry far over the cap", sizes: map[string]int64{"big": 64 * limit}, order: []string{"big"}, wantErr: ErrEntryTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := craftedArchive(t, tt.sizes, tt.order)
			var seen []string
			err := EachMax(bytes.NewReader(data), limit, func(e Entry) error {
				if int64(len(e.Data)) != tt.sizes[e.Name] {
					t.Errorf("%s: %d bytes, want %d", e.Name, len(e.Data), tt.sizes[e.Name])
				}
				seen = append(seen, e.Name)
				return nil
			})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("EachMax = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "big") {
				t.Errorf("the error does not name the entry: %v", err)
			}
			if strings.Join(seen, ",") != strings.Join(tt.wantSeen, ",") {
				t.Errorf("fn saw %v, want %v", seen, tt.wantSeen)
			}
		})
	}
}

// A reader that gives more than the header said (which the tar reader never does; the cap
// does not rely on it) is cut off just past the cap.
func TestReadEntryEnforcesTheCapWhileReading(t *testing.T) {
	tests := []struct {
		name     string
		declared int64
		actual   int64
		wantErr  error
	}{
		{name: "as declared", declared: 100, actual: 100},
		{name: "less than declared", declared: 100, actual: 10},
		{name: "more than declared, under the cap", declared: 10, actual: 1000},
		{name: "more than declared, over the cap", declared: 10, actual: 1 << 30, wantErr: ErrEntryTooLarge},
		{name: "declared over the cap", declared: 1 << 30, actual: 0, wantErr: ErrEntryTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &countingZeros{left: tt.actual}
			data, err := readEntry("resources/x/cluster/y.json", tt.declared, r, 4096)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("readEntry = %v, want %v", err, tt.wantErr)
			}
			if err == nil && int64(len(data)) != tt.actual {
				t.Errorf("read %d bytes, want %d", len(data), tt.actual)
			}
			if r.read > 4097 {
				t.Errorf("read %d bytes of the entry: the cap is 4096", r.read)
			}
		})
	}
}

type countingZeros struct{ left, read int64 }

func (c *countingZeros) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), c.left)
	clear(p[:n])
	c.left -= n
	c.read += n
	return int(n), nil
}

// A gzip bomb: one 256 MiB entry that compresses to a few hundred kilobytes. Reading it with
// the default cap allocates nothing like its size (io.ReadAll of the entry allocated it all).
func TestEachRefusesAGzipBombWithoutReadingIt(t *testing.T) {
	const size = 256 << 20
	data := craftedArchive(t, map[string]int64{"metadata/version": 6, "resources/configmaps/namespaces/a/bomb.json": size},
		[]string{"metadata/version", "resources/configmaps/namespaces/a/bomb.json"})
	if len(data) > 1<<20 {
		t.Fatalf("the bomb is %d bytes compressed", len(data))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := Each(bytes.NewReader(data), func(Entry) error { return nil })
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrEntryTooLarge) {
		t.Fatalf("Each = %v, want ErrEntryTooLarge", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("reading the bomb allocated %d MiB", alloc>>20)
	}
}
