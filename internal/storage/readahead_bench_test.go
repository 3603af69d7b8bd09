package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/cairn-backup/cairn/internal/archive"
)

// directStore is an encrypted store whose Get decrypts inside the reader's Read, without the
// read-ahead: the comparison BenchmarkEncryptedRead makes.
type directStore struct{ encryptedStore }

func (s directStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.ObjectStore.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	plain, err := age.Decrypt(rc, &keyIdentity{keys: s.keys})
	if err != nil {
		_ = rc.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{decryptedReader{Reader: plain, key: key}, rc}, nil
}

// BenchmarkEncryptedRead reads a 64 MiB archive of an encrypted filesystem location as a
// restore does (storage.ReadArchive: gunzip, tar, SHA-256), with and without the read-ahead
// of encrypted objects, in the same run.
func BenchmarkEncryptedRead(b *testing.B) {
	ctx := context.Background()
	fs, err := NewFilesystem(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	key := make([]byte, KeySize)
	_, _ = rand.Read(key)
	enc := encryptedStore{ObjectStore: fs, keys: Keyring{Keys: map[string][]byte{"k1": key}, WriteKey: "k1"}}
	payload := make([]byte, 64<<20)
	_, _ = rand.Read(payload)
	var buf bytes.Buffer
	w, err := archive.NewWriter(&buf, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < len(payload); i += 1 << 20 {
		if err := w.AddEntry(fmt.Sprintf("part-%04d", i>>20), payload[i:i+1<<20]); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	size := int64(buf.Len())
	digest, err := PutArchive(ctx, enc, "a.tar.gz", &buf)
	if err != nil {
		b.Fatal(err)
	}
	for name, s := range map[string]ObjectStore{"read-ahead": enc, "direct": directStore{enc}} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				if err := ReadArchive(ctx, s, "a.tar.gz", digest, func(archive.Entry) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
