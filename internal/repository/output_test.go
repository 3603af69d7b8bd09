package repository

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/fs/localfs"
	"github.com/kopia/kopia/snapshot/restore"
	"golang.org/x/sys/unix"

	"github.com/cairn-backup/cairn/internal/confined"
)

// hostileSource is the snapshot the hostile-target tests restore: a file at the top, files
// under directories one, two and three deep.
func hostileSource(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "config"), []byte("from the backup"), 0o644)
	writeFile(t, filepath.Join(src, "data", "file"), []byte("data from the backup"), 0o644)
	writeFile(t, filepath.Join(src, "a", "b", "c", "deep"), []byte("deep from the backup"), 0o644)
	writeFile(t, filepath.Join(src, "self", "x"), []byte("x from the backup"), 0o644)
	return src
}

// victim is another pod's volume beside the target, on the same file system: one file, which
// nothing may change, and nothing may appear beside it.
func victim(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "secret"), []byte("team-b's"), 0o600)
	return dir
}

func victimUntouched(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) != 1 || entries[0].Name() != "secret" {
		names := make([]string, len(entries))
		for i, e := range entries {
			names[i] = e.Name()
		}
		return errors.New("the victim's volume holds " + filepath.Join(names...))
	}
	b, err := os.ReadFile(filepath.Join(dir, "secret"))
	if err != nil {
		return err
	}
	if string(b) != "team-b's" {
		return errors.New("the victim's file holds " + string(b))
	}
	return nil
}

// kopiaOutput is the writer Cairn used before its own: kopia's FilesystemOutput, as Restore
// configured it. The tests run it to show that each hostile target did reach outside.
func kopiaOutput(t *testing.T, dst string) restore.Output {
	t.Helper()
	out := &restore.FilesystemOutput{TargetPath: dst, OverwriteDirectories: true, OverwriteFiles: true, OverwriteSymlinks: true}
	if err := out.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRestoreNeverWritesThroughWhatTheTargetHolds(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)
	res, err := r.Snapshot(t.Context(), hostileSource(t), map[string]string{"pvc": "h"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// plant makes the target hostile; victim is the other volume.
		plant func(t *testing.T, dst, victim string)
	}{
		{"a directory replaced by a relative link out", func(t *testing.T, dst, v string) {
			rel, _ := filepath.Rel(dst, v)
			mustSymlink(t, rel, filepath.Join(dst, "data"))
		}},
		{"a directory two deep replaced by an absolute link", func(t *testing.T, dst, v string) {
			mustMkdir(t, filepath.Join(dst, "a"))
			mustSymlink(t, v, filepath.Join(dst, "a", "b"))
		}},
		{"a directory three deep replaced by a link to ..", func(t *testing.T, dst, v string) {
			// a/b/c -> ../../../<victim's path from dst>: the victim, through the parents.
			mustMkdir(t, filepath.Join(dst, "a", "b"))
			rel, _ := filepath.Rel(filepath.Join(dst, "a", "b"), v)
			mustSymlink(t, rel, filepath.Join(dst, "a", "b", "c"))
		}},
		{"a file replaced by a link to another volume's file", func(t *testing.T, dst, v string) {
			mustSymlink(t, filepath.Join(v, "secret"), filepath.Join(dst, "config"))
		}},
		{"a file hard-linked to another volume's file", func(t *testing.T, dst, v string) {
			if err := os.Link(filepath.Join(v, "secret"), filepath.Join(dst, "config")); err != nil {
				t.Fatal(err)
			}
		}},
		{"a directory replaced by a link to the volume itself, and one to another volume's file", func(t *testing.T, dst, v string) {
			mustSymlink(t, ".", filepath.Join(dst, "self"))
			// self -> . would put x at the top: make the top's x the victim's file.
			mustSymlink(t, filepath.Join(v, "secret"), filepath.Join(dst, "x"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Run("kopia's writer reaches outside", func(t *testing.T) {
				dst, v := t.TempDir(), victim(t)
				tt.plant(t, dst, v)
				_, err := r.restoreInto(t.Context(), res.ID, kopiaOutput(t, dst), RestoreOptions{})
				if victimUntouched(v) == nil && err == nil {
					t.Fatal("the old writer left the victim alone: this target is not hostile")
				}
			})
			t.Run("Cairn's writer stays inside", func(t *testing.T) {
				dst, v := t.TempDir(), victim(t)
				tt.plant(t, dst, v)
				if _, err := r.Restore(t.Context(), res.ID, dst, RestoreOptions{Overwrite: true, Parallel: 4, Of: SnapshotIdentity{Tags: map[string]string{"pvc": "h"}}}); err != nil {
					t.Fatal(err)
				}
				if err := victimUntouched(v); err != nil {
					t.Fatal(err)
				}
				for name, want := range map[string]string{
					"config": "from the backup", "data/file": "data from the backup",
					"a/b/c/deep": "deep from the backup", "self/x": "x from the backup",
				} {
					if info, err := os.Lstat(filepath.Join(dst, name)); err != nil || !info.Mode().IsRegular() {
						t.Fatalf("%s: %v, %v: not a file", name, info, err)
					}
					if b, _ := os.ReadFile(filepath.Join(dst, name)); string(b) != want {
						t.Fatalf("%s = %q, want %q", name, b, want)
					}
				}
			})
		})
	}
}

func TestRestoreReplacesAFIFO(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)
	res, err := r.Snapshot(t.Context(), hostileSource(t), map[string]string{"pvc": "f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// kopia's writer opens the FIFO and fails to truncate it (or blocks writing past the
	// pipe's buffer); Cairn's replaces it with the file.
	old := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(old, "config"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := r.restoreInto(ctx, res.ID, kopiaOutput(t, old), RestoreOptions{}); err == nil {
		if info, _ := os.Lstat(filepath.Join(old, "config")); info.Mode().IsRegular() {
			t.Fatal("the old writer replaced the FIFO: this target is not hostile")
		}
	}
	dst := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dst, "config"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Restore(ctx, res.ID, dst, RestoreOptions{Overwrite: true, Of: SnapshotIdentity{Tags: map[string]string{"pvc": "f"}}}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "config")); err != nil || string(b) != "from the backup" {
		t.Fatalf("config = %q, %v", b, err)
	}
}

// named is a snapshot entry under another name: a forged snapshot's directory listing.
type named struct {
	fs.File
	name string
}

func (n named) Name() string { return n.name }

func TestForgedNamesAreRefused(t *testing.T) {
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "escape"), []byte("forged"), 0o644)
	file, err := localfs.NewEntry(filepath.Join(src, "escape"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, relativePath, entryName string
	}{
		{"a parent in the path", "../escape", "escape"},
		{"an entry named ..", "..", ".."},
		{"a slash in the name", "sub/escape", "sub/escape"},
		{"a NUL in the name", "esc\x00ape", "esc\x00ape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "volume")
			mustMkdir(t, dst)
			e := named{File: file.(fs.File), name: tt.entryName}
			root, err := confined.OpenRoot(dst)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			out := &confinedOutput{root: root}
			err = out.WriteFile(t.Context(), tt.relativePath, e, nil)
			if !errors.Is(err, confined.ErrBadName) {
				t.Fatalf("WriteFile(%q) = %v, want %v", tt.relativePath, err, confined.ErrBadName)
			}
			if entries, _ := os.ReadDir(filepath.Dir(dst)); len(entries) != 1 {
				t.Fatalf("something was written beside the volume: %v", entries)
			}
		})
	}
	t.Run("kopia's writer follows ..", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "volume")
		mustMkdir(t, dst)
		_ = kopiaOutput(t, dst).WriteFile(t.Context(), "../escape", file.(fs.File), nil)
		if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "escape")); err != nil {
			t.Fatalf("the old writer did not write beside the volume: %v", err)
		}
	})
}

func TestRestoreKeepsEveryModeBitItMay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners are restored only as root")
	}
	f := newFixture(t)
	r := f.mustOpen(t)
	src := t.TempDir()
	mustMkdir(t, filepath.Join(src, "small", "empty"))
	writeFile(t, filepath.Join(src, "small", "f"), []byte("f"), 0o640)
	writeFile(t, filepath.Join(src, "rootsuid"), []byte("#!"), 0o755)
	writeFile(t, filepath.Join(src, "usersuid"), []byte("#!"), 0o755)
	writeFile(t, filepath.Join(src, "othersgid"), []byte("#!"), 0o755)
	mustMkdir(t, filepath.Join(src, "tmp"))
	// Owners first: changing one clears setuid and setgid.
	for name, uid := range map[string]int{"small": 1000, "small/empty": 1000, "small/f": 1000, "usersuid": 1000, "othersgid": 2000} {
		if err := os.Lchown(filepath.Join(src, name), uid, 1000); err != nil {
			t.Fatal(err)
		}
	}
	for name, m := range map[string]uint32{
		"small": 0o2755 | unix.S_IFDIR, "small/empty": 0o2750 | unix.S_IFDIR, "tmp": 0o1777 | unix.S_IFDIR,
		"rootsuid": 0o4755, "usersuid": 0o6750, "othersgid": 0o2755,
	} {
		if err := unix.Chmod(filepath.Join(src, name), m&0o7777); err != nil {
			t.Fatal(err)
		}
	}
	res, err := r.Snapshot(t.Context(), src, map[string]string{"pvc": "m"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	var dropped []string
	podUser := int64(1000)
	if _, err := r.Restore(t.Context(), res.ID, dst, RestoreOptions{Of: SnapshotIdentity{Tags: map[string]string{"pvc": "m"}}, PodUser: &podUser, Dropped: func(p string, _ os.FileMode) {
		dropped = append(dropped, p)
	}}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{
		"small": unix.S_IFDIR | 0o2755, "small/empty": unix.S_IFDIR | 0o2750, "tmp": unix.S_IFDIR | 0o1777,
		"small/f": unix.S_IFREG | 0o640, "usersuid": unix.S_IFREG | 0o6750,
		"rootsuid": unix.S_IFREG | 0o755, "othersgid": unix.S_IFREG | 0o755,
	} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dst, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode != want {
			t.Errorf("%s: st_mode %o, want %o", name, st.Mode, want)
		}
		if name == "small/f" && (st.Uid != 1000 || st.Gid != 1000) {
			t.Errorf("%s: owner %d:%d, want 1000:1000", name, st.Uid, st.Gid)
		}
	}
	if len(dropped) != 2 {
		t.Errorf("dropped %v, want rootsuid and othersgid", dropped)
	}
}

func TestSparseFilesStaySparseAndCapacityBounds(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)
	src := t.TempDir()
	sparse, err := os.Create(filepath.Join(src, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	const size = 256 << 20
	if _, err := sparse.WriteAt([]byte("middle"), size/2); err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(size); err != nil {
		t.Fatal(err)
	}
	_ = sparse.Close()
	res, err := r.Snapshot(t.Context(), src, map[string]string{"pvc": "s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := r.Restore(t.Context(), res.ID, dst, RestoreOptions{Capacity: 1 << 20, Of: SnapshotIdentity{Tags: map[string]string{"pvc": "s"}}}); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dst, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if allocated := info.Sys().(*syscall.Stat_t).Blocks * 512; info.Size() != size || allocated > 1<<20 {
		t.Fatalf("restored %d bytes with %d allocated, want %d with at most 1 MiB", info.Size(), allocated, size)
	}

	// Over the capacity: the restore stops, saying so.
	writeRandom(t, filepath.Join(src, "dense"), 2<<20)
	res, err = r.Snapshot(t.Context(), src, map[string]string{"pvc": "s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Restore(t.Context(), res.ID, t.TempDir(), RestoreOptions{Capacity: 1 << 20, Of: SnapshotIdentity{Tags: map[string]string{"pvc": "s"}}}); !errors.Is(err, confined.ErrOverBudget) {
		t.Fatalf("restore of 2 MiB into 1 MiB: %v, want %v", err, confined.ErrOverBudget)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
