// Package confined writes files beneath one directory and never anywhere else: every create,
// open, owner, mode and time is relative to an open handle on that directory, and no symbolic
// link is ever followed, neither in the last component of a path nor in any before it (DESIGN.md
// section 20). It is what the node agent, root over every pod volume of its node, writes a
// volume restore and the restore helper's markers with: the directory's content is the pod's,
// and the pod may have left links, FIFOs or hard links anywhere in it.
//
// Paths are slash-separated and relative to the root; each component must be a plain name (no
// "/", no NUL, not "." or ".."), or the call fails with ErrBadName before touching anything.
// Directories are opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) where the kernel has
// it (Linux 5.6), else one component at a time with O_NOFOLLOW. A file or link is written under a
// temporary name in its directory and renamed over the entry it replaces: the entry is replaced
// whatever it was (a link, a FIFO, a file hard-linked elsewhere), never opened or written through.
package confined

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrBadName is returned for a path component that is not a plain name.
var ErrBadName = errors.New("not a plain name")

// Root is an open handle on the directory everything is written beneath. It is safe for
// concurrent use.
type Root struct {
	fd   int
	path string // for messages only; never used to reach anything
	seq  atomic.Uint64

	// dirs are handles on directories beneath the root that writes use now or used last, by
	// path: a restore writes a directory's files one after another, and one openat2 per
	// directory instead of one per file is a quarter of its system calls.
	mu   sync.Mutex
	dirs map[string]*cachedDir
}

// cachedDir is an open directory of Root.dirs and how many writes hold it.
type cachedDir struct{ fd, refs int }

// maxCachedDirs bounds Root.dirs: a tree of a million directories is written with as many
// descriptors as this.
const maxCachedDirs = 64

// OpenRoot opens the directory at path, which must be a directory and not itself a symbolic
// link (the components before it are trusted: the caller chose them, as the kubelet's).
func OpenRoot(path string) (*Root, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &Root{fd: fd, path: path}, nil
}

// Close closes the handle and the handles of directories beneath it.
func (r *Root) Close() error {
	r.mu.Lock()
	for rel, d := range r.dirs {
		_ = unix.Close(d.fd)
		delete(r.dirs, rel)
	}
	r.mu.Unlock()
	return unix.Close(r.fd)
}

// dir opens the directory of parts (checked names), from Root.dirs when it is there; release
// gives it back.
func (r *Root) dir(parts []string) (fd int, release func(), err error) {
	rel := strings.Join(parts, "/")
	r.mu.Lock()
	if d, ok := r.dirs[rel]; ok {
		d.refs++
		r.mu.Unlock()
		return d.fd, r.releaser(d), nil
	}
	r.mu.Unlock()
	fd, err = r.openDir(parts)
	if err != nil {
		return -1, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := r.dirs[rel]; ok { // opened meanwhile by another write
		_ = unix.Close(fd)
		d.refs++
		return d.fd, r.releaser(d), nil
	}
	if len(r.dirs) >= maxCachedDirs {
		for k, d := range r.dirs {
			if d.refs == 0 {
				_ = unix.Close(d.fd)
				delete(r.dirs, k)
			}
		}
	}
	if len(r.dirs) >= maxCachedDirs {
		return fd, func() { _ = unix.Close(fd) }, nil
	}
	if r.dirs == nil {
		r.dirs = map[string]*cachedDir{}
	}
	d := &cachedDir{fd: fd, refs: 1}
	r.dirs[rel] = d
	return fd, r.releaser(d), nil
}

func (r *Root) releaser(d *cachedDir) func() {
	return func() {
		r.mu.Lock()
		d.refs--
		r.mu.Unlock()
	}
}

// forget drops the handle of the directory rel from Root.dirs, unless a write holds it: its
// directory is complete.
func (r *Root) forget(rel string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := r.dirs[rel]; ok && d.refs == 0 {
		_ = unix.Close(d.fd)
		delete(r.dirs, rel)
	}
}

// CheckName reports whether name is a plain name: not empty, not "." or "..", without "/" or NUL.
func CheckName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%q: %w", name, ErrBadName)
	}
	return nil
}

// split checks every component of rel and returns them; "" and "." are the root itself.
func split(rel string) ([]string, error) {
	if rel == "" || rel == "." {
		return nil, nil
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if err := CheckName(p); err != nil {
			return nil, fmt.Errorf("path %q: %w", rel, err)
		}
	}
	return parts, nil
}

// openat2Missing is set once the kernel said it has no openat2.
var openat2Missing atomic.Bool

// openDir opens the directory rel beneath the root, following no link on the way.
func (r *Root) openDir(parts []string) (int, error) {
	if len(parts) == 0 {
		return unix.Dup(r.fd)
	}
	if !openat2Missing.Load() {
		fd, err := unix.Openat2(r.fd, strings.Join(parts, "/"), &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if !errors.Is(err, unix.ENOSYS) {
			return fd, err
		}
		openat2Missing.Store(true)
	}
	return r.walk(parts)
}

// walk opens parts one component at a time, each with O_NOFOLLOW: the kernels without openat2.
func (r *Root) walk(parts []string) (int, error) {
	fd, err := unix.Dup(r.fd)
	if err != nil {
		return -1, err
	}
	for _, p := range parts {
		next, err := unix.Openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		_ = unix.Close(fd)
		if err != nil {
			if errors.Is(err, unix.ELOOP) {
				err = unix.ENOTDIR
			}
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// parent opens the directory holding rel and returns it with rel's last component; release
// gives the directory back.
func (r *Root) parent(rel string) (fd int, name string, release func(), err error) {
	parts, err := split(rel)
	if err != nil {
		return -1, "", nil, err
	}
	if len(parts) == 0 {
		return -1, "", nil, fmt.Errorf("path %q: the root has no parent here: %w", rel, ErrBadName)
	}
	fd, release, err = r.dir(parts[:len(parts)-1])
	if err != nil {
		return -1, "", nil, r.pathError("open", strings.Join(parts[:len(parts)-1], "/"), err)
	}
	return fd, parts[len(parts)-1], release, nil
}

func (r *Root) pathError(op, rel string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		err = fmt.Errorf("%w (a symbolic link, or out of %s: not followed)", err, r.path)
	}
	return &os.PathError{Op: op, Path: r.path + "/" + rel, Err: err}
}

// tempName is a name for a new entry of a directory, unique in this process.
func (r *Root) tempName() string {
	return fmt.Sprintf(".cairn-%d-%d.tmp", os.Getpid(), r.seq.Add(1))
}

// EnsureDir makes rel a directory: it stays if it is one; anything else of that name (a link,
// a file, a FIFO) is removed first, never followed. A new directory is made with mode 0700,
// until SetAttributes gives it its own.
func (r *Root) EnsureDir(rel string) error {
	parts, err := split(rel)
	if err != nil || len(parts) == 0 {
		return err
	}
	dir, name, release, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer release()
	var st unix.Stat_t
	switch err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return r.pathError("lstat", rel, err)
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return nil
	default:
		if err := unix.Unlinkat(dir, name, 0); err != nil {
			return r.pathError("remove", rel, err)
		}
	}
	if err := unix.Mkdirat(dir, name, 0o700); err != nil {
		return r.pathError("mkdir", rel, err)
	}
	return nil
}

// Attributes are what SetAttributes gives an entry.
type Attributes struct {
	// UID and GID are the owner; ChangeOwner says whether to set them at all.
	UID, GID    int
	ChangeOwner bool
	// Mode is the permission bits with setuid, setgid and sticky (unix's, not os.FileMode's).
	// It is not set on a symbolic link (Linux has no modes for links).
	Mode uint32
	// ModTime is set as both the access and the modification time, in Unix nanoseconds.
	ModTime int64
}

// SetDirAttributes gives the directory rel (the root for "") its owner, mode and time. It is
// the last write of a directory: its handle leaves Root.dirs.
func (r *Root) SetDirAttributes(rel string, a Attributes) error {
	parts, err := split(rel)
	if err != nil {
		return err
	}
	fd, release, err := r.dir(parts)
	if err != nil {
		return r.pathError("open", rel, err)
	}
	err = setAttributes(fd, a)
	release()
	r.forget(strings.Join(parts, "/"))
	if err != nil {
		return r.pathError("set attributes of", rel, err)
	}
	return nil
}

// setAttributes sets a on the open fd: the owner first, since changing it clears setuid and
// setgid.
func setAttributes(fd int, a Attributes) error {
	if a.ChangeOwner {
		if err := unix.Fchown(fd, a.UID, a.GID); err != nil {
			return err
		}
	}
	if err := unix.Fchmod(fd, a.Mode); err != nil {
		return err
	}
	return futimens(fd, a.ModTime)
}

// futimens sets the access and modification times of the open fd (utimensat with no path, as
// the C library's futimens does).
func futimens(fd int, nsec int64) error {
	t := unix.NsecToTimespec(nsec)
	ts := [2]unix.Timespec{t, t}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
