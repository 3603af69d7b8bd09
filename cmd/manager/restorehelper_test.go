package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWaitForVolumes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		markers map[string]string // file → content, written after a moment
		timeout time.Duration
		wantErr string
	}{
		{"every volume done", map[string]string{"data.done": "", "cache.done": ""}, 0, ""},
		{"one failed: its reason", map[string]string{"data.done": "", "cache.failed": "the node agent restarted during the restore\n"}, 0,
			"volume cache was not restored: the node agent restarted during the restore"},
		{"one never comes: the timeout names it", map[string]string{"data.done": ""}, 300 * time.Millisecond,
			"the data of volumes cache was not restored within 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			go func() {
				time.Sleep(50 * time.Millisecond)
				// As the node agent writes them: whole, by a rename (a marker read while it is
				// still being written would have no reason yet).
				for name, content := range tc.markers {
					tmp := filepath.Join(dir, name+".tmp")
					_ = os.WriteFile(tmp, []byte(content), 0o644)
					_ = os.Rename(tmp, filepath.Join(dir, name))
				}
			}()
			var out bytes.Buffer
			err := waitForVolumes(context.Background(), restoreHelperOptions{dir: dir, volumes: []string{"data", "cache"},
				timeout: tc.timeout, poll: 10 * time.Millisecond, progressInterval: time.Hour}, &out)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if !strings.Contains(out.String(), "Waiting for the data of volumes data, cache") {
				t.Fatalf("output: %s", out.String())
			}
		})
	}
}

func TestRestoreHelperExitCodes(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(filepath.Join(dir, "data.failed"), []byte("cancelled"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := runRestoreHelper([]string{"--dir", dir, "--volumes", "data", "--termination-log", log}); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if b, _ := os.ReadFile(log); string(b) != "volume data was not restored: cancelled" {
		t.Fatalf("termination log: %q", b)
	}
	if err := os.WriteFile(filepath.Join(dir, "db.done"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := runRestoreHelper([]string{"--dir", dir, "--volumes", "db"}); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	for _, args := range [][]string{{}, {"--volumes", "Bad_Name"}, {"--volumes", "a", "extra"}} {
		if code := runRestoreHelper(args); code != 2 {
			t.Fatalf("%v: exit code %d, want 2", args, code)
		}
	}
}
