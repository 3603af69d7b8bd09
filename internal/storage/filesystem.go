package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// tempPrefix starts the names of objects still being written; List never shows them.
const tempPrefix = ".tmp-"

// Filesystem is the filesystem provider: objects are regular files under Root. A Put writes a
// temp file beside its target, fsyncs it and renames it into place, so a crash never leaves a
// half-written object under its final name.
//
// Every access goes through an os.Root, which refuses a path that leaves Root — through "..",
// or through a symbolic link someone with write access to the directory planted (pointing at
// the manager's service account token, say): the download server hands out what Get opens.
// A symbolic link is never an object.
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

// path is key's path relative to the root.
func (f *Filesystem) path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return filepath.FromSlash(key), nil
}

// open opens the root for one operation; the caller closes it.
func (f *Filesystem) open() (*os.Root, error) {
	root, err := os.OpenRoot(f.Root)
	if err != nil {
		return nil, fmt.Errorf("opening the location's directory %s: %w", f.Root, unwrapPathError(err))
	}
	return root, nil
}

// Put implements ObjectStore.
func (f *Filesystem) Put(ctx context.Context, key string, r io.Reader) (err error) {
	p, err := f.path(key)
	if err != nil {
		return err
	}
	root, err := f.open()
	if err != nil {
		return err
	}
	defer root.Close()
	dir := filepath.Dir(p)
	if err := root.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("writing %s: %w", key, err)
	}
	tmpName := filepath.Join(dir, tempPrefix+filepath.Base(p)+"-"+strconv.FormatUint(rand.Uint64(), 36))
	tmp, err := root.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("writing %s: %w", key, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = root.Remove(tmpName)
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
	if err := root.Rename(tmpName, p); err != nil {
		return fmt.Errorf("renaming %s into place: %w", key, err)
	}
	return syncDir(root, dir)
}

// syncDir makes a rename in dir (relative to root) durable.
func syncDir(root *os.Root, dir string) error {
	d, err := root.Open(dir)
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
	root, err := f.open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if regular, err := isRegular(root, p); err != nil {
		return nil, fmt.Errorf("reading %s: %w", key, err)
	} else if !regular {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	file, err := root.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	return file, nil
}

// isRegular says whether p (relative to root) is a regular file, not following a symbolic
// link in its last element (os.Root keeps the ones before it inside the root); false when it
// does not exist.
func isRegular(root *os.Root, p string) (bool, error) {
	info, err := root.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return info.Mode().IsRegular(), nil
}

// List implements ObjectStore.
func (f *Filesystem) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := f.ListFunc(ctx, prefix, func(key string) error {
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(keys)
	return keys, nil
}

// ListFunc implements Lister: it walks the directories, in the walk's order (each directory's
// entries by name, which is not the keys' sorted order: "a/b" comes before "a.x").
func (f *Filesystem) ListFunc(ctx context.Context, prefix string, fn func(key string) error) error {
	// Walk from the deepest directory the prefix names, then filter by the whole prefix.
	start := "."
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dirKey := prefix[:i]
		if dirKey != "" {
			if err := checkKey(dirKey); err != nil {
				return err
			}
			start = dirKey
		}
	}
	root, err := f.open()
	if err != nil {
		return err
	}
	defer root.Close()
	var fnErr error
	err = fs.WalkDir(root.FS(), start, func(key string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Directories are walked (a symbolic link to one is not: WalkDir does not follow
		// links); only regular files are objects.
		if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), tempPrefix) || !strings.HasPrefix(key, prefix) {
			return nil
		}
		if err := fn(key); err != nil {
			fnErr = err
			return fs.SkipAll
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("listing %q: %w", prefix, err)
	}
	return nil
}

// Delete implements ObjectStore. It also removes the directories the delete left empty, up to
// the root.
func (f *Filesystem) Delete(_ context.Context, key string) error {
	p, err := f.path(key)
	if err != nil {
		return err
	}
	root, err := f.open()
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	pruneEmptyDirs(root, filepath.Dir(p))
	return nil
}

// pruneEmptyDirs removes dir (relative to root) and its parents up to the root while they are
// empty. A directory that is not empty (or already gone) ends the walk; that is not an error.
func pruneEmptyDirs(root *os.Root, dir string) {
	for ; dir != "." && dir != string(filepath.Separator) && dir != ""; dir = filepath.Dir(dir) {
		if root.Remove(dir) != nil {
			return
		}
	}
}

// Exists implements ObjectStore: a regular file under the key (a symbolic link is not one).
func (f *Filesystem) Exists(_ context.Context, key string) (bool, error) {
	p, err := f.path(key)
	if err != nil {
		return false, err
	}
	root, err := f.open()
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer root.Close()
	regular, err := isRegular(root, p)
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", key, err)
	}
	return regular, nil
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
