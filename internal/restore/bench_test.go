package restore_test

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

// bombEntrySize is the entry: 512 MiB of JSON that compresses to about half a megabyte.
const bombEntrySize = 512 << 20

// jsonBomb streams {"data":"aaaa…"} of exactly n bytes.
type jsonBomb struct{ n, off int64 }

func (j *jsonBomb) Read(p []byte) (int, error) {
	const head, tail = `{"data":"`, `"}`
	if j.off >= j.n {
		return 0, io.EOF
	}
	i := 0
	for ; i < len(p) && j.off < j.n; i, j.off = i+1, j.off+1 {
		switch {
		case j.off < int64(len(head)):
			p[i] = head[j.off]
		case j.off >= j.n-int64(len(tail)):
			p[i] = tail[j.off-(j.n-int64(len(tail)))]
		default:
			p[i] = 'a'
		}
	}
	return i, nil
}

// commitBomb writes a backup of team-a whose archive holds one entry of size bytes, streamed
// (the benchmark never holds it), and a marker whose checksum is wrong.
func commitBomb(b *testing.B, size int64) (storage.ObjectStore, storage.BackupKeys, storage.ArchiveDigest) {
	b.Helper()
	store, err := storage.NewFilesystem(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	keys := storage.Layout{}.Backup("team-a", "bomb")
	pr, pw := io.Pipe()
	go func() {
		gz := gzip.NewWriter(pw)
		tw := tar.NewWriter(gz)
		err := tw.WriteHeader(&tar.Header{Name: archive.VersionPath, Mode: 0o644, Size: int64(len(archive.FormatVersion) + 1), Typeflag: tar.TypeReg})
		if err == nil {
			_, err = tw.Write([]byte(archive.FormatVersion + "\n"))
		}
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: archive.ItemPath("configmaps", "", "team-a", "bomb"), Mode: 0o644, Size: size, Typeflag: tar.TypeReg})
		}
		if err == nil {
			_, err = io.Copy(tw, &jsonBomb{n: size})
		}
		if err == nil {
			err = tw.Close()
		}
		if err == nil {
			err = gz.Close()
		}
		_ = pw.CloseWithError(err)
	}()
	digest, err := storage.PutArchive(context.Background(), store, keys.Archive, pr)
	if err != nil {
		b.Fatal(err)
	}
	if err := storage.WriteMetadata(context.Background(), store, keys, storage.BackupMetadata{
		FormatVersion: archive.FormatVersion, Namespace: "team-a", Name: "bomb", Phase: "Completed",
		ArchiveSHA256: strings.Repeat("0", 64), ArchiveSize: digest.Size,
	}); err != nil {
		b.Fatal(err)
	}
	return store, keys, digest
}

// peakRSSMiB is the process's peak resident set since the last resetPeakRSS (VmHWM).
func peakRSSMiB(b *testing.B) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status: ", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Skip("no VmHWM")
	return 0
}

// resetPeakRSS sets VmHWM back to the current resident set (Linux: clear_refs 5).
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Skip("cannot reset the peak RSS: ", err)
	}
}

// BenchmarkRestoreReadBomb is issue 25's finding 4, in the restore's own read path: a team
// restore of a backup whose archive holds one 512 MiB JSON entry and whose marker has a wrong
// checksum. It runs the Runner in this process (the manager's restore code, a filesystem
// location, a fake API server), and reports the process's peak RSS during the run (VmHWM,
// reset before it) and what the run allocated. The goal is < 150 MiB peak RSS; before the
// entry cap the read allocated the whole entry (the manager went from 45 MB to 2.3 GB).
func BenchmarkRestoreReadBomb(b *testing.B) {
	store, keys, digest := commitBomb(b, bombEntrySize)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(), map[schema.GroupVersionResource]string{})
	runner := &restore.Runner{Dynamic: dyn, Discovery: clusterDiscovery()}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "r1"},
		Spec: cairnv1.RestoreSpec{BackupName: "bomb"}, Status: cairnv1.RestoreStatus{BackupName: "bomb"}}
	var peak, alloc float64
	for b.Loop() {
		runtime.GC()
		resetPeakRSS(b)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res := runner.Run(context.Background(), restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: store, BackupKeys: keys})
		runtime.ReadMemStats(&after)
		peak = max(peak, peakRSSMiB(b))
		alloc = max(alloc, float64(after.TotalAlloc-before.TotalAlloc)/(1<<20))
		if res.Ending != restore.Failed || !strings.Contains(res.FailureReason, "archive checksum mismatch") {
			b.Fatalf("run ended %s: %q, want Failed on the checksum mismatch", res.Ending, res.FailureReason)
		}
	}
	b.ReportMetric(float64(digest.Size)/1024, "compressed-KiB")
	b.ReportMetric(peak, "peak-rss-MiB")
	b.ReportMetric(alloc, "alloc-MiB")
}
