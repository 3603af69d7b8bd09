package storage_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gcs "cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// The cloud benchmarks (issue 44): a 256 MiB archive uploaded (PutArchive) and read back
// verified (ReadArchive, as a restore reads it) through Cairn's azure and gcs stores, next to
// the provider SDK's plain single upload and download of the same bytes, in turns, against
// Azurite and fake-gcs-server on 127.0.0.1. The archive is mapped from a file, outside the Go
// heap, so that the heap measured is what the transfer itself holds.

// cloudTransfer is one provider's four transfers of the same bytes.
type cloudTransfer struct {
	// sdkUpload is the SDK's plainest single upload of a buffer; sdkStream its streaming
	// upload of a reader of unknown length, with the store's part size and concurrency.
	sdkUpload, sdkStream, sdkDownload func(ctx context.Context, data []byte) error
	store                             storage.ObjectStore
	// bound is the part size × concurrency of the store's uploads.
	bound int64
}

// mappedArchive is a tar.gz of 256 MiB of incompressible entries (1 MiB each), written to a
// file and mapped read-only: its bytes are not on the Go heap.
func mappedArchive(b *testing.B) []byte {
	b.Helper()
	f, err := os.Create(filepath.Join(b.TempDir(), "archive.tar.gz"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w, err := archive.NewWriter(f, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	entry := make([]byte, 1<<20)
	for i := 0; i < benchSize>>20; i++ {
		for j := 0; j < len(entry); j += 8 {
			v := r.Uint64()
			for k := 0; k < 8; k++ {
				entry[j+k] = byte(v >> (8 * k))
			}
		}
		if err := w.AddEntry(fmt.Sprintf("part-%04d", i), entry); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	info, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(info.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = syscall.Munmap(data) })
	return data
}

// memoryPeak samples, every 2 ms while fn runs, the bytes of heap objects (live and not yet
// collected) and this process's anonymous resident memory (the heap, and the buffers the Azure
// SDK maps outside it; not the mapped archive, which is a file's), and returns how far each
// rose above where it started. Memory is handed back to the system first, so that each run
// starts from what is live.
func memoryPeak(fn func() error) (heap, anon int64, err error) {
	debug.FreeOSMemory()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	readHeap := func() int64 { metrics.Read(sample); return int64(sample[0].Value.Uint64()) }
	heapBase, anonBase := readHeap(), rssAnon()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				heap, anon = max(heap, readHeap()-heapBase), max(anon, rssAnon()-anonBase)
			}
		}
	}()
	err = fn()
	close(done)
	wg.Wait()
	return max(heap, readHeap()-heapBase), max(anon, rssAnon()-anonBase), err
}

// rssAnon is this process's anonymous resident memory (RssAnon of /proc/self/status), in bytes.
func rssAnon() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kib << 10
		}
	}
	return 0
}

// childrenCPU is the CPU time of this process's children (the emulator) so far.
func childrenCPU() time.Duration {
	var total time.Duration
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: state ppid ... utime(12) stime(13).
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 13 || fields[1] != self {
			continue
		}
		u, _ := strconv.ParseInt(fields[11], 10, 64)
		s, _ := strconv.ParseInt(fields[12], 10, 64)
		total += time.Duration(u+s) * time.Second / 100 // USER_HZ
	}
	return total
}

// runCloudBench measures t in rounds: in each, the SDK's single upload, the SDK's streaming
// upload and Cairn's (the order turning by round), then the SDK's download, Cairn's plain Get
// and Cairn's verified read. It reports the medians, the ratios to the SDK's single
// upload and download (the floor of issue 44), Cairn's peak memory, and the share of the
// emulator's CPU in the wall time of Cairn's transfers.
func runCloudBench(b *testing.B, t cloudTransfer, data []byte) {
	ctx := context.Background()
	keys := storage.Layout{}.Backup("bench", "b")
	ms := map[string][]float64{}
	heapPeaks, anonPeaks := map[string]int64{}, map[string]int64{}
	emulatorShare := map[string][]float64{}
	timed := func(name string, fn func() error) {
		cpu0, start := childrenCPU(), time.Now()
		heap, anon, err := memoryPeak(fn)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		wall := time.Since(start)
		ms[name] = append(ms[name], wall.Seconds()*1000)
		heapPeaks[name], anonPeaks[name] = max(heapPeaks[name], heap), max(anonPeaks[name], anon)
		emulatorShare[name] = append(emulatorShare[name], (childrenCPU()-cpu0).Seconds()/wall.Seconds())
	}
	var digest storage.ArchiveDigest
	uploads := map[string]func() error{
		"sdk":        func() error { return t.sdkUpload(ctx, data) },
		"sdk-stream": func() error { return t.sdkStream(ctx, data) },
		"cairn": func() (err error) {
			digest, err = storage.PutArchive(ctx, t.store, keys.Archive, onlyReader{bytes.NewReader(data)})
			return err
		},
	}
	downloads := map[string]func() error{
		"sdk": func() error { return t.sdkDownload(ctx, data) },
		"cairn-get": func() error {
			rc, err := t.store.Get(ctx, keys.Archive)
			if err != nil {
				return err
			}
			return drainExactly(rc, int64(len(data)))
		},
		"cairn": func() error {
			var n int64
			err := storage.ReadArchive(ctx, t.store, keys.Archive, digest, func(e archive.Entry) error {
				if e.Name != archive.VersionPath {
					n += int64(len(e.Data))
				}
				return nil
			})
			if err == nil && n != benchSize {
				err = fmt.Errorf("read %d bytes of entries", n)
			}
			return err
		},
	}
	round := 0
	for b.Loop() {
		for _, who := range turn([]string{"sdk", "sdk-stream", "cairn"}, round) {
			timed("upload-"+who, uploads[who])
		}
		for _, who := range turn([]string{"sdk", "cairn-get", "cairn"}, round) {
			timed("download-"+who, downloads[who])
		}
		round++
	}
	reportCloudBench(b, ms, heapPeaks, anonPeaks, emulatorShare)
	b.ReportMetric(float64(t.bound)/(1<<20), "bound-MiB")
}

// turn is order rotated by round, so that each transfer goes first in turn.
func turn(order []string, round int) []string {
	k := round % len(order)
	return append(append([]string{}, order[k:]...), order[:k]...)
}

// reportCloudBench reports the medians, the ratios to the SDK's floor, and the peaks.
func reportCloudBench(b *testing.B, ms map[string][]float64, heapPeaks, anonPeaks map[string]int64, emulatorShare map[string][]float64) {
	for name, v := range ms {
		b.ReportMetric(medianOf(v), name+"-ms")
		b.ReportMetric(float64(heapPeaks[name])/(1<<20), name+"-peak-heap-MiB")
		b.ReportMetric(float64(anonPeaks[name])/(1<<20), name+"-peak-anon-MiB")
	}
	ratio := func(a, b string) float64 { return medianOf(ms[a]) / medianOf(ms[b]) }
	b.ReportMetric(ratio("upload-cairn", "upload-sdk"), "upload-ratio")
	b.ReportMetric(ratio("upload-cairn", "upload-sdk-stream"), "upload-stream-ratio")
	b.ReportMetric(ratio("upload-sdk-stream", "upload-sdk"), "sdk-stream-ratio")
	b.ReportMetric(ratio("download-cairn", "download-sdk"), "download-ratio")
	b.ReportMetric(ratio("download-cairn-get", "download-sdk"), "download-get-ratio")
	b.ReportMetric(medianOf(emulatorShare["upload-cairn"]), "upload-emulator-cpu-share")
	b.ReportMetric(medianOf(emulatorShare["download-cairn"]), "download-emulator-cpu-share")
}

func BenchmarkCloudAzure256MiB(b *testing.B) {
	data := mappedArchive(b)
	a := emulator.StartAzurite(b)
	a.CreateContainer("bench")
	store, err := storage.NewAzure(storage.AzureConfig{Account: a.Account, Container: "bench", Endpoint: a.Endpoint(),
		Credentials: storage.AzureCredentials{SharedKey: a.Key}})
	if err != nil {
		b.Fatal(err)
	}
	cred, err := blob.NewSharedKeyCredential(a.Account, a.Key)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := container.NewClientWithSharedKeyCredential(a.Endpoint()+"/bench", cred,
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{InsecureAllowCredentialWithHTTP: true}})
	if err != nil {
		b.Fatal(err)
	}
	runCloudBench(b, cloudTransfer{
		store: store, bound: 8 << 20 * 4,
		sdkUpload: func(ctx context.Context, data []byte) error {
			// One Put Blob of the whole seekable buffer: the SDK's plainest upload.
			_, err := raw.NewBlockBlobClient("plain").Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), nil)
			return err
		},
		sdkStream: func(ctx context.Context, data []byte) error {
			_, err := raw.NewBlockBlobClient("stream").UploadStream(ctx, onlyReader{bytes.NewReader(data)},
				&blockblob.UploadStreamOptions{BlockSize: 8 << 20, Concurrency: 4})
			return err
		},
		sdkDownload: func(ctx context.Context, data []byte) error {
			resp, err := raw.NewBlobClient("plain").DownloadStream(ctx, nil)
			if err != nil {
				return err
			}
			return drainExactly(resp.Body, int64(len(data)))
		},
	}, data)
}

func BenchmarkCloudGCS256MiB(b *testing.B) {
	data := mappedArchive(b)
	server := emulator.StartFakeGCS(b)
	server.CreateBucket("bench")
	tokens := emulator.StartTokenServer(b)
	store, err := storage.NewGCS(storage.GCSConfig{Bucket: "bench", Endpoint: server.Endpoint(), Credentials: storage.GCSCredentials{JSON: tokens.ServiceAccountKey(b)}})
	if err != nil {
		b.Fatal(err)
	}
	raw, err := gcs.NewClient(context.Background(), gcsRawOptions(server.Endpoint())...)
	if err != nil {
		b.Fatal(err)
	}
	runCloudBench(b, cloudTransfer{
		store: store, bound: 8 << 20,
		sdkUpload: func(ctx context.Context, data []byte) error {
			// ChunkSize 0: one request with the whole object, the SDK's plainest upload.
			w := raw.Bucket("bench").Object("plain").NewWriter(ctx)
			w.ChunkSize = 0
			if _, err := w.Write(data); err != nil {
				_ = w.Close()
				return err
			}
			return w.Close()
		},
		sdkStream: func(ctx context.Context, data []byte) error {
			w := raw.Bucket("bench").Object("stream").NewWriter(ctx)
			w.ChunkSize = 8 << 20
			if _, err := io.Copy(w, onlyReader{bytes.NewReader(data)}); err != nil {
				_ = w.Close()
				return err
			}
			return w.Close()
		},
		sdkDownload: func(ctx context.Context, data []byte) error {
			rc, err := raw.Bucket("bench").Object("plain").ReadCompressed(true).NewReader(ctx)
			if err != nil {
				return err
			}
			return drainExactly(rc, int64(len(data)))
		},
	}, data)
}

// drainExactly reads rc to its end and closes it; an error unless it held size bytes.
func drainExactly(rc io.ReadCloser, size int64) error {
	n, err := io.Copy(io.Discard, rc)
	_ = rc.Close()
	if err == nil && n != size {
		err = fmt.Errorf("read %d bytes, want %d", n, size)
	}
	return err
}
