package repository

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kopia/kopia/snapshot/restore"
)

// BenchmarkRestoreWriters times the restore of the volume benchmark's tree (200 MiB of random
// bytes, 10,000 files of 4 KiB in directories of 100, a few links) from a filesystem
// repository into an empty directory, with kopia's FilesystemOutput (what Cairn wrote with
// before issue 39) and with Cairn's confined writer, in turns (kopia, Cairn, Cairn, kopia, ...,
// 5 rounds) so that the load of the moment falls on both alike. It reports the medians and
// throughput-ratio, Cairn's throughput over kopia's (goal: at least 0.9).
func BenchmarkRestoreWriters(b *testing.B) {
	f := newFixture(b)
	r := f.mustOpen(b)
	src := b.TempDir()
	writeRandom(b, filepath.Join(src, "big.bin"), 200<<20)
	small := make([]byte, 4<<10)
	for i := range 10_000 {
		dir := filepath.Join(src, "small", fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.Symlink("../../big.bin", filepath.Join(dir, "link")); err != nil {
				b.Fatal(err)
			}
		}
		small[0], small[1] = byte(i), byte(i>>8)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), small, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	res, err := r.Snapshot(b.Context(), src, map[string]string{"pvc": "bench"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	work := b.TempDir()
	restoreOnce := func(kopia bool) time.Duration {
		dst, err := os.MkdirTemp(work, "dst-")
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = os.RemoveAll(dst) }()
		start := time.Now()
		if kopia {
			out := &restore.FilesystemOutput{TargetPath: dst, OverwriteDirectories: true}
			if err := out.Init(b.Context()); err != nil {
				b.Fatal(err)
			}
			_, err = r.restoreInto(b.Context(), res.ID, out, RestoreOptions{Of: SnapshotIdentity{Tags: map[string]string{"pvc": "bench"}}})
		} else {
			_, err = r.Restore(b.Context(), res.ID, dst, RestoreOptions{Of: SnapshotIdentity{Tags: map[string]string{"pvc": "bench"}}})
		}
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	rounds := 5
	if s := os.Getenv("CAIRN_BENCH_WRITER_ROUNDS"); s != "" {
		if _, err := fmt.Sscan(s, &rounds); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		var kopiaTimes, cairnTimes []float64
		for round := range rounds {
			order := []bool{true, false}
			if round%2 == 1 {
				order = []bool{false, true}
			}
			for _, kopia := range order {
				ms := float64(restoreOnce(kopia).Microseconds()) / 1000
				b.Logf("round %d: kopia %v: %.0f ms", round, kopia, ms)
				if kopia {
					kopiaTimes = append(kopiaTimes, ms)
				} else {
					cairnTimes = append(cairnTimes, ms)
				}
			}
		}
		k, c := median(kopiaTimes), median(cairnTimes)
		b.ReportMetric(k, "kopia-ms")
		b.ReportMetric(c, "cairn-ms")
		b.ReportMetric(k/c, "throughput-ratio")
	}
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
