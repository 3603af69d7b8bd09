package storage_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// A stalled server (its process stopped with SIGSTOP: connections stay open, nothing answers)
// never holds a call past its context: an upload, a read, a list and a validation each end
// with the context's error soon after it ends, and once the server continues, the upload has
// left nothing under its key.
func TestCloudStoresStalledServer(t *testing.T) {
	a := emulator.StartAzurite(t)
	a.CreateContainer("stall")
	gcs := startGCS(t)
	gcs.CreateBucket("stall")
	for _, tt := range []struct {
		name   string
		store  storage.ObjectStore
		pause  func()
		resume func()
	}{
		{name: "azure", store: newAzure(t, a, "stall", storage.AzureCredentials{SharedKey: a.Key}), pause: a.Pause, resume: a.Resume},
		{name: "gcs", store: newGCS(t, gcs, "stall"), pause: gcs.Pause, resume: gcs.Resume},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.store
			mustPut(t, s, "stall/kept", "kept")
			// The upload stalls once its first part is sent.
			r := &killingReader{r: bytes.NewReader(randomBytes(t, 6<<20)), after: 1<<20 + 1, kill: tt.pause}
			defer tt.resume()
			calls := map[string]func(ctx context.Context) error{
				"upload": func(ctx context.Context) error { return s.Put(ctx, "stall/upload", r) },
				"read":   func(ctx context.Context) error { _, err := s.Get(ctx, "stall/kept"); return err },
				"list":   func(ctx context.Context) error { _, err := s.List(ctx, "stall/"); return err },
				"validate": func(ctx context.Context) error {
					return s.(interface {
						Validate(context.Context, string) error
					}).Validate(ctx, "stall/")
				},
			}
			for _, name := range []string{"upload", "read", "list", "validate"} {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				start := time.Now()
				err := calls[name](ctx)
				cancel()
				if took := time.Since(start); err == nil || took > 10*time.Second {
					t.Errorf("%s on a stalled server: %v after %s; want the context's end within seconds", name, err, took)
				} else if name != "validate" && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s on a stalled server: %v, want it to be the context's deadline", name, err)
				}
			}
			if !r.killed() {
				t.Fatal("the server was never paused: the test proves nothing")
			}
			tt.resume()
			if ok, err := s.Exists(context.Background(), "stall/upload"); ok || err != nil {
				t.Errorf("the stalled upload left an object: %v, %v", ok, err)
			}
			if got := mustGet(t, s, "stall/kept"); got != "kept" {
				t.Errorf("after the stall Get = %q", got)
			}
		})
	}
}
