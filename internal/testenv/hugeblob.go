package testenv

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// HugeBlobSize is the size of the hostile blob of the issue 39 tests: 2 GiB, made sparse, so
// it costs no disk and no time to make.
const HugeBlobSize = 2 << 30

// GrowFile finds the one regular file under root whose content is exactly content (a blob put
// through a storage, wherever the storage keeps it: kopia's sharded filesystem layout, the S3
// server's bucket directory) and makes it size bytes long, a sparse file, as an object put in
// its place by a bucket writer would be. It returns the file's path.
func GrowFile(t TB, root, content string, size int64) string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil || info.Size() != int64(len(content)) {
			return err
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, []byte(content)) {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 {
		t.Fatalf("files under %s holding %q: %v, want one", root, content, found)
	}
	if err := os.Truncate(found[0], size); err != nil {
		t.Fatal(err)
	}
	return found[0]
}

// Memory is what a call cost the process: the bytes the Go heap allocated during it (every
// goroutine's, the servers' of the test included), and how far the peak resident set rose
// (VmHWM; 0 where /proc is not there).
type Memory struct {
	Allocated uint64
	PeakRise  uint64
}

// MemoryOf runs fn and measures it.
func MemoryOf(fn func()) Memory {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	peak := peakRSS()
	fn()
	runtime.ReadMemStats(&after)
	m := Memory{Allocated: after.TotalAlloc - before.TotalAlloc}
	if p := peakRSS(); p > peak {
		m.PeakRise = p - peak
	}
	return m
}

// peakRSS is the process's peak resident set size in bytes (VmHWM), 0 if unknown.
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
