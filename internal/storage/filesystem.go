package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// tempPrefix starts the names of objects still being written; List never shows them.
const tempPrefix = ".tmp-"

// Filesystem is the filesystem provider: objects are files under Root. A Put writes a temp file
// beside its target, fsyncs it and renames it into place, so a crash never leaves a
// half-written object under its final name.
type Filesystem struct {
	Root string
}

// NewFilesystem returns a store rooted at root, which must be an absolute path.
func NewFilesystem(root string) (*Filesystem, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("config.path %q must be an absolute path", root)
	}
	return &Filesystem{Root: filepath.Clean(root)}, nil
}

func (f *Filesystem) path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return filepath.Join(f.Root, filepath.FromSlash(key)), nil
}

// Put implements ObjectStore.
func (f *Filesystem) Put(ctx context.Context, key string, r io.Reader) (err error) {
	p, err := f.path(key)
	if err != nil {
		return err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("writing %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(dir, tempPrefix+filepath.Base(p)+"-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", key, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, contextReader{ctx, r}); err != nil {
		return fmt.Errorf("writing %s: %w", key, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("renaming %s into place: %w", key, err)
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// Get implements ObjectStore.
func (f *Filesystem) Get(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := f.path(key)
	if err != nil {
		return nil, err
	}
	file, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	return file, nil
}

// List implements ObjectStore.
func (f *Filesystem) List(ctx context.Context, prefix string) ([]string, error) {
	// Walk from the deepest directory the prefix names, then filter by the whole prefix.
	start := f.Root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dirKey := prefix[:i]
		if dirKey != "" {
			p, err := f.path(dirKey)
			if err != nil {
				return nil, err
			}
			start = p
		}
	}
	var keys []string
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), tempPrefix) {
			return nil
		}
		rel, err := filepath.Rel(f.Root, p)
		if err != nil {
			return err
		}
		if key := filepath.ToSlash(rel); strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing %q: %w", prefix, err)
	}
	sort.Strings(keys)
	return keys, nil
}

// Delete implements ObjectStore. It also removes the directories the delete left empty, up to
// the root.
func (f *Filesystem) Delete(_ context.Context, key string) error {
	p, err := f.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	f.pruneEmptyDirs(filepath.Dir(p))
	return nil
}

// pruneEmptyDirs removes dir and its parents up to the root while they are empty. A directory
// that is not empty (or already gone) ends the walk; that is not an error.
func (f *Filesystem) pruneEmptyDirs(dir string) {
	for ; dir != f.Root && strings.HasPrefix(dir, f.Root+string(filepath.Separator)); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			return
		}
	}
}

// Exists implements ObjectStore.
func (f *Filesystem) Exists(_ context.Context, key string) (bool, error) {
	p, err := f.path(key)
	if err != nil {
		return false, err
	}
	info, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", key, err)
	}
	return info.Mode().IsRegular(), nil
}

// Validate checks that the root is a directory Cairn can use: readable, and for writable
// locations, creatable and writable. Its error says what a person should fix.
func (f *Filesystem) Validate(_ context.Context, writable bool) error {
	if writable {
		if err := os.MkdirAll(f.Root, 0o750); err != nil {
			return fmt.Errorf("path %s cannot be created: %w", f.Root, unwrapPathError(err))
		}
	}
	info, err := os.Stat(f.Root)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("path %s does not exist", f.Root)
	}
	if err != nil {
		return fmt.Errorf("path %s cannot be read: %w", f.Root, unwrapPathError(err))
	}
	if !info.IsDir() {
		return fmt.Errorf("path %s is not a directory", f.Root)
	}
	if _, err := os.ReadDir(f.Root); err != nil {
		return fmt.Errorf("path %s cannot be read: %w", f.Root, unwrapPathError(err))
	}
	if !writable {
		return nil
	}
	probe, err := os.CreateTemp(f.Root, tempPrefix+"probe-*")
	if err != nil {
		return fmt.Errorf("path %s is not writable: %w", f.Root, unwrapPathError(err))
	}
	name := probe.Name()
	_ = probe.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("path %s does not allow deletes: %w", f.Root, unwrapPathError(err))
	}
	return nil
}

// unwrapPathError drops the path that a *fs.PathError repeats, leaving "permission denied".
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// contextReader stops a copy when ctx ends.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
