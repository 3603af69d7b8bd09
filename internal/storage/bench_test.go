package storage_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// benchSize is the stream each benchmark moves: the size of a mid-sized backup archive.
const benchSize = 256 << 20

// benchData is benchSize bytes of incompressible data, made once, when a benchmark first asks.
var benchData = sync.OnceValue(func() []byte {
	b := make([]byte, benchSize)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(b); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
})

// onlyReader hides bytes.Reader's Seek and WriterTo, so the stores see a plain stream of
// unknown length, as an archive being written is.
type onlyReader struct{ io.Reader }

func benchStores(b *testing.B) (fs *storage.Filesystem, s3store *storage.S3, raw *s3.Client, bucket string) {
	b.Helper()
	fs, err := storage.NewFilesystem(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	server := testenv.StartS3Server(b)
	bucket = "bench"
	server.CreateBucket(bucket)
	s3store, err = storage.NewS3(storage.S3Config{Bucket: bucket, Endpoint: server.Endpoint(), ForcePathStyle: true,
		Credentials: storage.S3Credentials{AccessKeyID: server.AccessKey, SecretAccessKey: server.SecretKey}})
	if err != nil {
		b.Fatal(err)
	}
	raw = s3.New(s3.Options{Region: "us-east-1", UsePathStyle: true, BaseEndpoint: aws.String(server.Endpoint()),
		Credentials:                credentials.NewStaticCredentialsProvider(server.AccessKey, server.SecretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired})
	return fs, s3store, raw, bucket
}

// encryptedBench wraps s as an encrypted location does (the cost issue 31 bounds).
func encryptedBench(b *testing.B, s storage.ObjectStore) storage.ObjectStore {
	b.Helper()
	e, err := storage.Encrypted(s, storage.Keyring{Keys: map[string][]byte{"k1": bytes.Repeat([]byte{1}, storage.KeySize)}, WriteKey: "k1"}, "")
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func BenchmarkUpload256MiB(b *testing.B) {
	fs, s3store, raw, bucket := benchStores(b)
	ctx := context.Background()
	b.Run("plain-file-copy", func(b *testing.B) {
		dir := b.TempDir()
		b.SetBytes(benchSize)
		for b.Loop() {
			f, err := os.Create(filepath.Join(dir, "copy"))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(f, onlyReader{bytes.NewReader(benchData())}); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			_ = f.Close()
		}
	})
	b.Run("filesystem", func(b *testing.B) {
		b.SetBytes(benchSize)
		for b.Loop() {
			if _, err := storage.PutArchive(ctx, fs, "bench/archive.tar.gz", onlyReader{bytes.NewReader(benchData())}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plain-sdk-put", func(b *testing.B) {
		b.SetBytes(benchSize)
		for b.Loop() {
			_, err := raw.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("bench/plain"),
				Body: bytes.NewReader(benchData()), ContentLength: aws.Int64(benchSize)})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("s3", func(b *testing.B) {
		b.SetBytes(benchSize)
		for b.Loop() {
			if _, err := storage.PutArchive(ctx, s3store, "bench/archive.tar.gz", onlyReader{bytes.NewReader(benchData())}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for name, s := range map[string]storage.ObjectStore{"filesystem-encrypted": encryptedBench(b, fs), "s3-encrypted": encryptedBench(b, s3store)} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(benchSize)
			for b.Loop() {
				if _, err := storage.PutArchive(ctx, s, "bench/encrypted.tar.gz", onlyReader{bytes.NewReader(benchData())}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDownload256MiB(b *testing.B) {
	fs, s3store, raw, bucket := benchStores(b)
	ctx := context.Background()
	keys := storage.Layout{}.Backup("bench", "b")
	data := archiveOf(b, benchData())
	size := int64(len(data))
	fsEnc, s3Enc := encryptedBench(b, fs), encryptedBench(b, s3store)
	encKeys := storage.Layout{Prefix: "encrypted"}.Backup("bench", "b")
	for _, s := range []storage.ObjectStore{fsEnc, s3Enc} {
		d, err := storage.PutArchive(ctx, s, encKeys.Archive, bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		if err := storage.WriteMetadata(ctx, s, encKeys, storage.BackupMetadata{Name: "b", Namespace: "bench", ArchiveSHA256: d.SHA256, ArchiveSize: d.Size}); err != nil {
			b.Fatal(err)
		}
	}
	for _, s := range []storage.ObjectStore{fs, s3store} {
		d, err := storage.PutArchive(ctx, s, keys.Archive, bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		if err := storage.WriteMetadata(ctx, s, keys, storage.BackupMetadata{Name: "b", Namespace: "bench", ArchiveSHA256: d.SHA256, ArchiveSize: d.Size}); err != nil {
			b.Fatal(err)
		}
	}
	drain := func(b *testing.B, rc io.ReadCloser, err error) {
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		_ = rc.Close()
		if err != nil || n != size {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}
	// verified reads the archive as a restore does: the commit marker, then the archive checked
	// against it as it is unpacked.
	verified := func(b *testing.B, s storage.ObjectStore, keys storage.BackupKeys) {
		m, err := storage.ReadMetadata(ctx, s, keys)
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		err = storage.ReadArchive(ctx, s, keys.Archive, storage.ArchiveDigest{SHA256: m.ArchiveSHA256, Size: m.ArchiveSize},
			func(e archive.Entry) error {
				if e.Name != archive.VersionPath {
					n += int64(len(e.Data))
				}
				return nil
			})
		if err != nil || n != benchSize {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}
	b.Run("plain-file-read", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			f, err := os.Open(filepath.Join(fs.Root, filepath.FromSlash(keys.Archive)))
			drain(b, f, err)
		}
	})
	b.Run("filesystem-verified", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			verified(b, fs, keys)
		}
	})
	b.Run("plain-sdk-get", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			out, err := raw.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &keys.Archive})
			if err != nil {
				b.Fatal(err)
			}
			drain(b, out.Body, nil)
		}
	})
	b.Run("s3-verified", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			verified(b, s3store, keys)
		}
	})
	for name, s := range map[string]storage.ObjectStore{"filesystem-encrypted-verified": fsEnc, "s3-encrypted-verified": s3Enc} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				verified(b, s, encKeys)
			}
		})
	}
}

// BenchmarkEncryptionCost256MiB is issue 31's measure of the 256 MiB rows: the same archive
// uploaded (PutArchive) and read back verified (ReadArchive, as a restore reads it) through a
// filesystem and an S3 location, plain and encrypted, in turns. Each iteration is one round:
// for each provider, plain then encrypted or the other way (by round), so that the load of a
// shared machine falls on both alike. It reports each median and the encrypted/plain ratio of
// the medians (goal: at most 1.1).
func BenchmarkEncryptionCost256MiB(b *testing.B) {
	fs, s3store, _, _ := benchStores(b)
	ctx := context.Background()
	data := archiveOf(b, benchData())
	type pair struct {
		name  string
		plain storage.ObjectStore
		enc   storage.ObjectStore
	}
	pairs := []pair{{"filesystem", fs, encryptedBench(b, fs)}, {"s3", s3store, encryptedBench(b, s3store)}}
	ms := map[string][]float64{}
	round := 0
	for b.Loop() {
		for _, p := range pairs {
			kinds := []string{"plain", "encrypted"}
			if round%2 == 1 {
				kinds = []string{"encrypted", "plain"}
			}
			for _, kind := range kinds {
				s := p.plain
				if kind == "encrypted" {
					s = p.enc
				}
				key := "cost/" + kind + ".tar.gz"
				start := time.Now()
				d, err := storage.PutArchive(ctx, s, key, onlyReader{bytes.NewReader(data)})
				if err != nil {
					b.Fatal(err)
				}
				ms[p.name+"-upload-"+kind] = append(ms[p.name+"-upload-"+kind], time.Since(start).Seconds()*1000)
				start = time.Now()
				var n int64
				if err := storage.ReadArchive(ctx, s, key, d, func(e archive.Entry) error {
					n += int64(len(e.Data))
					return nil
				}); err != nil || n < benchSize {
					b.Fatalf("read %d bytes: %v", n, err)
				}
				ms[p.name+"-verified-read-"+kind] = append(ms[p.name+"-verified-read-"+kind], time.Since(start).Seconds()*1000)
			}
		}
		round++
	}
	for _, p := range pairs {
		for _, op := range []string{"upload", "verified-read"} {
			plain, enc := medianOf(ms[p.name+"-"+op+"-plain"]), medianOf(ms[p.name+"-"+op+"-encrypted"])
			b.ReportMetric(plain, p.name+"-"+op+"-plain-ms")
			b.ReportMetric(enc, p.name+"-"+op+"-encrypted-ms")
			b.ReportMetric(enc/plain, p.name+"-"+op+"-ratio")
		}
	}
}

func medianOf(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	switch {
	case len(v) == 0:
		return 0
	case len(v)%2 == 1:
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
