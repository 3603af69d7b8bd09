package storage_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
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
	sdkUpload, sdkDownload func(ctx context.Context, data []byte) error
	store                  storage.ObjectStore
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

// heapPeak samples the bytes of heap objects (live and not yet collected) every few
// milliseconds while fn runs, and returns how far they rose above where they started.
func heapPeak(fn func() error) (int64, error) {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() int64 { metrics.Read(sample); return int64(sample[0].Value.Uint64()) }
	base, peak := read(), int64(0)
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
				peak = max(peak, read()-base)
			}
		}
	}()
	err := fn()
	close(done)
	wg.Wait()
	return max(peak, read()-base), err
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

// runCloudBench measures t in rounds: in each, the SDK's upload and Cairn's (the order
// alternating by round), then the SDK's download and Cairn's verified one. It reports the
// medians, their ratios (Cairn / SDK), Cairn's peak heap, and the share of the emulator's CPU
// in the wall time of Cairn's transfers.
func runCloudBench(b *testing.B, t cloudTransfer, data []byte) {
	ctx := context.Background()
	keys := storage.Layout{}.Backup("bench", "b")
	ms := map[string][]float64{}
	peaks := map[string]int64{}
	emulatorShare := map[string][]float64{}
	timed := func(name string, fn func() error) {
		cpu0, start := childrenCPU(), time.Now()
		peak, err := heapPeak(fn)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		wall := time.Since(start)
		ms[name] = append(ms[name], wall.Seconds()*1000)
		peaks[name] = max(peaks[name], peak)
		emulatorShare[name] = append(emulatorShare[name], (childrenCPU()-cpu0).Seconds()/wall.Seconds())
	}
	var digest storage.ArchiveDigest
	upload := map[string]func() error{
		"sdk": func() error { return t.sdkUpload(ctx, data) },
		"cairn": func() (err error) {
			digest, err = storage.PutArchive(ctx, t.store, keys.Archive, onlyReader{bytes.NewReader(data)})
			return err
		},
	}
	download := map[string]func() error{
		"sdk": func() error { return t.sdkDownload(ctx, data) },
		"cairn": func() error {
			var n int64
			err := storage.ReadArchive(ctx, t.store, keys.Archive, digest, func(e archive.Entry) error { n += int64(len(e.Data)); return nil })
			if err == nil && n != benchSize {
				err = fmt.Errorf("read %d bytes of entries", n)
			}
			return err
		},
	}
	round := 0
	for b.Loop() {
		order := []string{"sdk", "cairn"}
		if round%2 == 1 {
			order = []string{"cairn", "sdk"}
		}
		for _, who := range order {
			timed("upload-"+who, upload[who])
		}
		for _, who := range order {
			timed("download-"+who, download[who])
		}
		round++
	}
	for _, op := range []string{"upload", "download"} {
		sdk, cairn := medianOf(ms[op+"-sdk"]), medianOf(ms[op+"-cairn"])
		b.ReportMetric(sdk, op+"-sdk-ms")
		b.ReportMetric(cairn, op+"-cairn-ms")
		b.ReportMetric(cairn/sdk, op+"-ratio")
		b.ReportMetric(float64(peaks[op+"-cairn"])/(1<<20), op+"-cairn-peak-heap-MiB")
		b.ReportMetric(float64(peaks[op+"-sdk"])/(1<<20), op+"-sdk-peak-heap-MiB")
		b.ReportMetric(medianOf(emulatorShare[op+"-cairn"]), op+"-emulator-cpu-share")
	}
	b.ReportMetric(float64(t.bound)/(1<<20), "bound-MiB")
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
