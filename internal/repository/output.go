package repository

import (
	"context"
	"fmt"
	"os"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/snapshot"
	"github.com/kopia/kopia/snapshot/restore"
	"golang.org/x/sys/unix"

	"github.com/cairn-backup/cairn/internal/confined"
)

// confinedOutput is kopia's restore.Output writing beneath one directory handle (package
// confined): kopia walks the snapshot and runs the writes in parallel, this writes each entry
// without ever following a link the target held, replaces what is in the way, and restores
// sparse files sparse. It replaces kopia's FilesystemOutput, which follows links in every
// component of every path and opens existing files to truncate them.
type confinedOutput struct {
	root   *confined.Root
	budget *confined.Budget
	// owners is set when running as root: only then are owners restored.
	owners bool
	// podUser is the restored pod's own user, when it is known: the only owner a file may keep
	// its setuid or setgid bit for (never root).
	podUser *int64
	// dropped is told each file whose setuid or setgid bit was dropped.
	dropped func(path string, mode os.FileMode)
}

var _ restore.Output = (*confinedOutput)(nil)

func (o *confinedOutput) Parallelizable() bool { return true }

// checkName refuses a path whose last component is not the entry's own plain name: a snapshot
// whose directory lists "..", "a/b" or a name with NUL is forged.
func checkName(relativePath string, e fs.Entry) error {
	if relativePath == "" {
		return nil
	}
	if err := confined.CheckName(e.Name()); err != nil {
		return fmt.Errorf("the snapshot holds an entry that is not a plain name: %w", err)
	}
	return nil
}

func (o *confinedOutput) BeginDirectory(_ context.Context, relativePath string, e fs.Directory) error {
	if err := checkName(relativePath, e); err != nil {
		return err
	}
	return o.root.EnsureDir(relativePath)
}

func (o *confinedOutput) WriteDirEntry(context.Context, string, *snapshot.DirEntry, fs.Directory) error {
	return nil
}

func (o *confinedOutput) FinishDirectory(_ context.Context, relativePath string, e fs.Directory) error {
	return o.root.SetDirAttributes(relativePath, o.attributes(e, unixMode(e.Mode())))
}

func (o *confinedOutput) Close(context.Context) error { return nil }

func (o *confinedOutput) WriteFile(ctx context.Context, relativePath string, f fs.File, progress restore.FileWriteProgress) error {
	if err := checkName(relativePath, f); err != nil {
		return err
	}
	r, err := f.Open(ctx)
	if err != nil {
		return fmt.Errorf("opening %s in the snapshot: %w", relativePath, err)
	}
	defer func() { _ = r.Close() }()
	mode := o.fileMode(relativePath, f)
	_, err = o.root.WriteFile(relativePath, r, confined.FileOptions{
		Attributes: o.attributes(f, mode), Sparse: true, Budget: o.budget, Progress: progress,
	})
	return err
}

// fileMode is f's mode to write: setuid and setgid are kept only for a file the pod's own
// user (not root) owns; otherwise they are dropped, and said.
func (o *confinedOutput) fileMode(relativePath string, f fs.File) uint32 {
	mode := unixMode(f.Mode())
	if mode&(unix.S_ISUID|unix.S_ISGID) == 0 || mayKeepSetID(f.Owner().UserID, o.podUser) {
		return mode
	}
	if o.dropped != nil {
		o.dropped(relativePath, f.Mode())
	}
	return mode &^ (unix.S_ISUID | unix.S_ISGID)
}

// mayKeepSetID reports whether a regular file owned by uid may keep its setuid or setgid bit
// in a pod running as podUser: only when the pod's user is known and owns it, and is not root
// (a tenant must not get a setuid-root binary it could not have made).
func mayKeepSetID(uid uint32, podUser *int64) bool {
	return podUser != nil && *podUser != 0 && uid != 0 && int64(uid) == *podUser
}

func (o *confinedOutput) FileExists(_ context.Context, relativePath string, e fs.File) bool {
	st, err := o.root.Lstat(relativePath)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == e.Size()
}

func (o *confinedOutput) CreateSymlink(ctx context.Context, relativePath string, e fs.Symlink) error {
	if err := checkName(relativePath, e); err != nil {
		return err
	}
	target, err := e.Readlink(ctx)
	if err != nil {
		return fmt.Errorf("reading link %s in the snapshot: %w", relativePath, err)
	}
	return o.root.Symlink(relativePath, target, o.attributes(e, 0))
}

func (o *confinedOutput) SymlinkExists(_ context.Context, relativePath string, _ fs.Symlink) bool {
	st, err := o.root.Lstat(relativePath)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// attributes are e's owner (when restoring owners), mode and time.
func (o *confinedOutput) attributes(e fs.Entry, mode uint32) confined.Attributes {
	return confined.Attributes{
		UID: int(e.Owner().UserID), GID: int(e.Owner().GroupID), ChangeOwner: o.owners,
		Mode: mode, ModTime: e.ModTime().UnixNano(),
	}
}

// unixMode is m's permission, setuid, setgid and sticky bits as the kernel has them.
func unixMode(m os.FileMode) uint32 {
	out := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		out |= unix.S_ISUID
	}
	if m&os.ModeSetgid != 0 {
		out |= unix.S_ISGID
	}
	if m&os.ModeSticky != 0 {
		out |= unix.S_ISVTX
	}
	return out
}
