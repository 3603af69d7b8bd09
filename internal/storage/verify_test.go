package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// tarGz is a small archive in Cairn's format.
func tarGz(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := archive.NewWriter(&buf, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := w.AddItem("configmaps", "", "ns", name, bytes.Repeat([]byte(name), 4096)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func runVerify(t *testing.T, newStore func(t *testing.T) storage.ObjectStore) {
	good := tarGz(t)
	tests := []struct {
		name   string
		stored func(uploaded []byte) []byte
		want   error
	}{
		{name: "the archive uploaded", stored: func(b []byte) []byte { return b }},
		{name: "one byte flipped in storage", stored: flipByte, want: storage.ErrChecksumMismatch},
		{name: "truncated in storage", stored: func(b []byte) []byte { return b[:len(b)/2] }, want: storage.ErrChecksumMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ctx := newStore(t), context.Background()
			keys := storage.Layout{}.Backup("ns", "b")
			digest, err := storage.PutArchive(ctx, s, keys.Archive, bytes.NewReader(good))
			if err != nil {
				t.Fatal(err)
			}
			mustPut(t, s, keys.Archive, string(tt.stored(good)))
			if err := storage.VerifyArchive(ctx, s, keys.Archive, digest); !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("VerifyArchive = %v, want %v", err, tt.want)
			}
		})
	}
	t.Run("uploaded as it is, but not a readable tar.gz", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		keys := storage.Layout{}.Backup("ns", "b")
		broken := good[:len(good)-40] // the writer itself produced a cut stream
		digest, err := storage.PutArchive(ctx, s, keys.Archive, bytes.NewReader(broken))
		if err != nil {
			t.Fatal(err)
		}
		if err := storage.VerifyArchive(ctx, s, keys.Archive, digest); !errors.Is(err, storage.ErrArchiveUnreadable) {
			t.Errorf("VerifyArchive = %v, want ErrArchiveUnreadable", err)
		}
	})
	t.Run("no archive", func(t *testing.T) {
		s := newStore(t)
		if err := storage.VerifyArchive(context.Background(), s, "ns/none.tar.gz", storage.ArchiveDigest{}); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("VerifyArchive = %v, want ErrNotFound", err)
		}
	})
	t.Run("an upload whose writer stalls fails, a slow one that moves does not", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		pr, pw := io.Pipe()
		defer pw.Close()
		go func() { _, _ = pw.Write([]byte("first bytes")) }() // then nothing more, never closed
		_, err := storage.PutArchive(ctx, s, "ns/stalled.tar.gz", pr, storage.WithIdleTimeout(300*time.Millisecond))
		if !errors.Is(err, storage.ErrStalled) {
			t.Fatalf("PutArchive = %v, want ErrStalled", err)
		}
		if ok, _ := s.Exists(ctx, "ns/stalled.tar.gz"); ok {
			t.Error("a stalled upload left an object under its key")
		}
		slow := &slowReader{r: bytes.NewReader(good), every: 100 * time.Millisecond}
		if _, err := storage.PutArchive(ctx, s, "ns/slow.tar.gz", slow, storage.WithIdleTimeout(time.Second)); err != nil {
			t.Fatalf("a slow upload that keeps moving failed: %v", err)
		}
	})
}

// slowReader returns a few bytes at a time with a pause before each read.
type slowReader struct {
	r     io.Reader
	every time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.every)
	return s.r.Read(p[:min(len(p), 4096)])
}

func TestFilesystemVerify(t *testing.T) { runVerify(t, newFilesystem) }

func TestS3Verify(t *testing.T) {
	server := testenv.StartS3Server(t)
	n := 0
	runVerify(t, func(t *testing.T) storage.ObjectStore {
		n++
		bucket := "verify-" + string(rune('a'+n))
		server.CreateBucket(bucket)
		return newS3(t, server, bucket, rootCreds(server))
	})
}

func TestFilesystemAbortsIncompleteUploads(t *testing.T) {
	root := t.TempDir()
	fs, err := storage.NewFilesystem(root)
	if err != nil {
		t.Fatal(err)
	}
	keys := storage.Layout{}.Backup("ns", "b")
	mustPut(t, fs, keys.Logs, "log")
	// What a manager killed during a Put leaves: a temp file beside the object it was writing.
	dir := filepath.Join(root, filepath.FromSlash(keys.Dir))
	left := filepath.Join(dir, ".tmp-b.tar.gz-123456")
	if err := os.WriteFile(left, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := storage.Layout{}.Backup("ns", "b2")
	mustPut(t, fs, other.Logs, "other")
	otherLeft := filepath.Join(root, filepath.FromSlash(other.Dir), ".tmp-b2.tar.gz-1")
	if err := os.WriteFile(otherLeft, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}

	n, err := storage.AbortIncompleteUploads(context.Background(), fs, keys.Dir)
	if err != nil || n != 1 {
		t.Fatalf("AbortIncompleteUploads = %d, %v; want 1", n, err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temp file is still there: %v", err)
	}
	if _, err := os.Stat(otherLeft); err != nil {
		t.Errorf("another backup's directory was touched: %v", err)
	}
	if got := mustGet(t, fs, keys.Logs); got != "log" {
		t.Errorf("the log = %q", got)
	}
	if _, err := storage.AbortIncompleteUploads(context.Background(), storage.ReadOnly(fs), keys.Dir); !errors.Is(err, storage.ErrReadOnly) {
		t.Errorf("through a ReadOnly store = %v, want ErrReadOnly", err)
	}
}

func TestS3CancelledUploadLeavesNoIncompleteUpload(t *testing.T) {
	server := testenv.StartS3Server(t)
	server.CreateBucket("cancelled")
	s := newS3(t, server, "cancelled", rootCreds(server))
	ctx, cancel := context.WithCancel(context.Background())
	// More than one 5 MiB part, cancelled once the first part is on its way.
	r := &cancelAfter{r: bytes.NewReader(randomBytes(t, 12<<20)), after: 6 << 20, cancel: cancel}
	err := s.Put(ctx, "ns/b/b.tar.gz", r)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Put = %v, want context.Canceled", err)
	}
	s.WaitForAborts()
	// An incomplete upload left behind would be found, and aborted, here.
	if n, err := storage.AbortIncompleteUploads(context.Background(), s, "ns/"); err != nil || n != 0 {
		t.Errorf("incomplete uploads left by a cancelled Put: %d (%v), want 0", n, err)
	}
}
