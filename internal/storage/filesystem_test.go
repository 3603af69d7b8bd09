package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-backup/cairn/internal/storage"
)

func newFilesystem(t *testing.T) storage.ObjectStore {
	t.Helper()
	fs, err := storage.NewFilesystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestFilesystemConformance(t *testing.T) {
	runConformance(t, newFilesystem)
}

func TestFilesystemLeavesNoTempFilesAndPrunesEmptyDirs(t *testing.T) {
	root := t.TempDir()
	fs, _ := storage.NewFilesystem(root)
	ctx := context.Background()
	keys := storage.Layout{}.Backup("ns", "b")
	if err := fs.Put(ctx, keys.Logs, strings.NewReader("log")); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "backups", "ns", "b"))
	if len(entries) != 1 || entries[0].Name() != "b-logs.gz" {
		t.Errorf("directory holds %v, want only b-logs.gz", entries)
	}
	if err := fs.Delete(ctx, keys.Logs); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "backups")); !os.IsNotExist(err) {
		t.Errorf("empty directories were left behind: %v", err)
	}
	if _, err := os.Stat(root); err != nil {
		t.Errorf("the root itself was removed: %v", err)
	}
}

func TestFilesystemListHidesObjectsBeingWritten(t *testing.T) {
	root := t.TempDir()
	fs, _ := storage.NewFilesystem(root)
	// A crash mid-Put leaves only a temp file; it must never be listed as an object.
	if err := os.MkdirAll(filepath.Join(root, "k"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "k", ".tmp-archive.tar.gz-123"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := fs.List(context.Background(), "k/")
	if err != nil || len(keys) != 0 {
		t.Errorf("List = %v, %v; want nothing", keys, err)
	}
}

func TestFilesystemValidate(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		name     string
		root     string
		writable bool
		wantErr  string
	}{
		{name: "writable directory", root: t.TempDir(), writable: true},
		{name: "missing directory is created for a writable location", root: filepath.Join(t.TempDir(), "new", "dir"), writable: true},
		{name: "missing directory of a read-only location", root: missing, wantErr: "path " + missing + " does not exist"},
		{name: "a file, not a directory", root: file, wantErr: "is not a directory"},
		{name: "under a file: cannot be created", root: filepath.Join(file, "sub"), writable: true, wantErr: "cannot be created: not a directory"},
		{name: "read-only location on a directory", root: t.TempDir()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, err := storage.NewFilesystem(tt.root)
			if err != nil {
				t.Fatal(err)
			}
			err = fs.Validate(ctx, tt.writable)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Validate = %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
		})
	}
	if _, err := storage.NewFilesystem("relative/path"); err == nil {
		t.Error("a relative path was accepted")
	}
}

// TestFilesystemNeverLeavesItsRoot: someone with write access to a location's directory plants
// symbolic links — to a file outside (the manager's service account token, say) and to a
// directory outside. The store never reads, lists or writes through them: the download server
// hands out what Get opens.
func TestFilesystemNeverLeavesItsRoot(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	secret := filepath.Join(outside, "token")
	if err := os.WriteFile(secret, []byte("the manager's token"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	fs, err := storage.NewFilesystem(root)
	if err != nil {
		t.Fatal(err)
	}
	keys := storage.Layout{}.Backup("team-a", "b")
	mustPut(t, fs, keys.Archive, "the archive")
	if err := os.Symlink(secret, filepath.Join(root, filepath.FromSlash(keys.Logs))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "backups", "team-a", "elsewhere")); err != nil {
		t.Fatal(err)
	}

	if ok, err := fs.Exists(ctx, keys.Logs); ok || err != nil {
		t.Errorf("Exists(a link to a file outside) = %v, %v; want false", ok, err)
	}
	if r, err := fs.Get(ctx, keys.Logs); err == nil {
		r.Close()
		t.Error("Get opened a link to a file outside the root")
	}
	if r, err := fs.Get(ctx, "backups/team-a/elsewhere/token"); err == nil {
		r.Close()
		t.Error("Get read through a link to a directory outside the root")
	}
	listed, err := fs.List(ctx, "backups/")
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0] != keys.Archive {
		t.Errorf("List = %v, want only %s", listed, keys.Archive)
	}
	if err := fs.Put(ctx, "backups/team-a/elsewhere/planted", strings.NewReader("x")); err == nil {
		t.Error("Put wrote through a link to a directory outside the root")
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); !os.IsNotExist(err) {
		t.Errorf("a file was written outside the root: %v", err)
	}
	if err := fs.Delete(ctx, "backups/team-a/elsewhere/token"); err == nil {
		if _, serr := os.Stat(secret); serr != nil {
			t.Errorf("Delete removed a file outside the root: %v", serr)
		}
	}
	if got, err := os.ReadFile(secret); err != nil || string(got) != "the manager's token" {
		t.Errorf("the file outside is %q, %v", got, err)
	}
}
