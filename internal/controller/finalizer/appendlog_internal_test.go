package finalizer

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/storage"
)

// The stored log is read to append to it: one larger than a backup's log can be (the bucket
// holds something else under its name) is left as it is, not read into memory.
func TestAppendToLogBoundsTheStoredLog(t *testing.T) {
	for _, tt := range []struct {
		name       string
		storedSize int
		wantGrown  bool
	}{
		{name: "a log of this backup", storedSize: 1 << 10, wantGrown: true},
		{name: "an object far larger than a log", storedSize: maxAppendedLogSize + 1, wantGrown: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store, err := storage.NewFilesystem(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			keys := storage.Layout{}.Backup("team-a", "b")
			ctx := context.Background()
			if err := store.Put(ctx, keys.Logs, bytes.NewReader(make([]byte, tt.storedSize))); err != nil {
				t.Fatal(err)
			}
			err = appendToLog(ctx, store, keys, []string{keys.Logs}, func(l *backup.Log) { l.Info("Cleaned up") })
			if err != nil {
				t.Fatal(err)
			}
			rc, err := store.Get(ctx, keys.Logs)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(rc)
			rc.Close()
			if grown := len(data) > tt.storedSize; grown != tt.wantGrown {
				t.Errorf("stored log %d bytes after appending to %d: grown %v, want %v", len(data), tt.storedSize, grown, tt.wantGrown)
			}
		})
	}
}
