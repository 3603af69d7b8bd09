package confined

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// blockSize is the unit in which a sparse write looks for zeros: a block of zeros is left as a
// hole (a file system's block is this or a divisor of it on every Linux file system in use).
const blockSize = 4096

// copyBuffer is how much of a file's content is read at once.
const copyBuffer = 1 << 20

// zeros is one block of zero bytes.
var zeros = make([]byte, blockSize)

// buffers are the copy buffers of the writes running, reused: a restore writes thousands of
// small files, each of which would otherwise allocate (and clear) a whole buffer.
var buffers = sync.Pool{New: func() any { b := make([]byte, copyBuffer); return &b }}

// ErrOverBudget is returned when a write would allocate more than its Budget allows.
var ErrOverBudget = errors.New("over the volume's capacity")

// Budget bounds the bytes written beneath a root, across every file (holes are free). The zero
// Budget, or a nil one, has no bound.
type Budget struct {
	Limit int64
	used  atomic.Int64
}

// take accounts for n more bytes, or fails without taking them when they pass the limit.
func (b *Budget) take(n int64) error {
	if b == nil || b.Limit <= 0 {
		return nil
	}
	if used := b.used.Add(n); used > b.Limit {
		b.used.Add(-n)
		return fmt.Errorf("writing %d more bytes after %d: %w of %d bytes", n, used-n, ErrOverBudget, b.Limit)
	}
	return nil
}

// Used is how many bytes were taken so far.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// FileOptions say how WriteFile writes.
type FileOptions struct {
	Attributes
	// Sparse leaves blocks of zeros as holes.
	Sparse bool
	// Budget, when set, bounds the bytes allocated.
	Budget *Budget
	// Progress, when set, is told the bytes read from the source as they are written.
	Progress func(n int64)
}

// WriteFile writes what src holds to the file rel, with opt's attributes. When rel does not
// exist the file is made under its name (O_CREAT|O_EXCL, which never follows a link, not even
// one made meanwhile); otherwise it is written under a temporary name and renamed over rel when
// complete, so that whatever rel was (a file, a link, a FIFO, a file hard-linked elsewhere) is
// replaced, never written through. A directory of that name is an error (the rename's
// EISDIR). A file that fails part-way is removed. It returns the bytes read from src.
func (r *Root) WriteFile(rel string, src io.Reader, opt FileOptions) (int64, error) {
	dir, name, release, err := r.parent(rel)
	if err != nil {
		return 0, err
	}
	defer release()
	created := name
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) {
		created = r.tempName()
		fd, err = unix.Openat(dir, created, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return 0, r.pathError("create", rel, err)
	}
	f := os.NewFile(uintptr(fd), created)
	n, err := write(f, src, opt)
	if err == nil {
		err = setAttributes(fd, opt.Attributes)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && created != name {
		err = unix.Renameat(dir, created, dir, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dir, created, 0)
		if errors.Is(err, ErrOverBudget) {
			return n, fmt.Errorf("%s/%s: %w", r.path, rel, err)
		}
		return n, r.pathError("write", rel, err)
	}
	return n, nil
}

// write copies src into the new file f, leaving zero blocks as holes when opt.Sparse, and sets
// its size to what was read.
func write(f *os.File, src io.Reader, opt FileOptions) (int64, error) {
	pooled := buffers.Get().(*[]byte)
	defer buffers.Put(pooled)
	buf := *pooled
	var off int64
	for {
		n, rerr := io.ReadFull(src, buf)
		if n > 0 {
			if err := writeChunk(f, buf[:n], off, opt); err != nil {
				return off, err
			}
			off += int64(n)
			if opt.Progress != nil {
				opt.Progress(int64(n))
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return off, rerr
		}
	}
	if opt.Sparse {
		// The file's end may be a hole that no write reached.
		return off, f.Truncate(off)
	}
	return off, nil
}

// writeChunk writes chunk at off: whole, or when sparse, only its runs of blocks that are not
// all zeros.
func writeChunk(f *os.File, chunk []byte, off int64, opt FileOptions) error {
	if !opt.Sparse {
		if err := opt.Budget.take(int64(len(chunk))); err != nil {
			return err
		}
		_, err := f.WriteAt(chunk, off)
		return err
	}
	for _, run := range dataRuns(chunk) {
		if err := opt.Budget.take(int64(run.end - run.start)); err != nil {
			return err
		}
		if _, err := f.WriteAt(chunk[run.start:run.end], off+int64(run.start)); err != nil {
			return err
		}
	}
	return nil
}

// span is a run of chunk[start:end].
type span struct{ start, end int }

// dataRuns are the runs of chunk's blocks that hold a byte other than zero, in order, adjacent
// blocks merged.
func dataRuns(chunk []byte) []span {
	var runs []span
	for start := 0; start < len(chunk); start += blockSize {
		end := min(start+blockSize, len(chunk))
		if bytes.Equal(chunk[start:end], zeros[:end-start]) {
			continue
		}
		if n := len(runs); n > 0 && runs[n-1].end == start {
			runs[n-1].end = end
			continue
		}
		runs = append(runs, span{start, end})
	}
	return runs
}

// Symlink makes rel a symbolic link to target, owned as a says (its mode is not set: Linux
// has none for links), replacing whatever rel was but a directory. The link is made, never
// followed: target may name anything.
func (r *Root) Symlink(rel, target string, a Attributes) error {
	dir, name, release, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer release()
	tmp := r.tempName()
	if err := unix.Symlinkat(target, dir, tmp); err != nil {
		return r.pathError("symlink", rel, err)
	}
	err = nil
	if a.ChangeOwner {
		err = unix.Fchownat(dir, tmp, a.UID, a.GID, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil {
		t := unix.NsecToTimespec(a.ModTime)
		err = unix.UtimesNanoAt(dir, tmp, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		return r.pathError("symlink", rel, err)
	}
	return nil
}

// Lstat is what rel is, the link itself for a link.
func (r *Root) Lstat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	parts, err := split(rel)
	if err != nil {
		return st, err
	}
	if len(parts) == 0 {
		return st, unix.Fstat(r.fd, &st)
	}
	dir, name, release, err := r.parent(rel)
	if err != nil {
		return st, err
	}
	defer release()
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, r.pathError("lstat", rel, err)
	}
	return st, nil
}

// Exists reports whether rel is there (as anything, a link not followed).
func (r *Root) Exists(rel string) bool {
	_, err := r.Lstat(rel)
	return err == nil
}
