package testenv

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// VolumeTree describes dir as hack/velero-volume-fixtures.sh's <volume>.tree does: one line
// per entry, "path type mode sha256-or-link-target" (mode with the setuid, setgid and sticky
// bits), sorted. A restored volume compares line for line with VeleroFixtureTree.
func VolumeTree(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		m := info.Mode()
		mode := uint32(m.Perm())
		for bit, v := range map[fs.FileMode]uint32{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
			if m&bit != 0 {
				mode |= v
			}
		}
		switch {
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			out = append(out, fmt.Sprintf("%s symlink %04o %s", rel, mode, target))
			return err
		case m.IsDir():
			out = append(out, fmt.Sprintf("%s dir %04o -", rel, mode))
		default:
			b, err := os.ReadFile(p)
			out = append(out, fmt.Sprintf("%s file %04o %x", rel, mode, sha256.Sum256(b)))
			return err
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// VeleroFixtureTree is the tree of volume in the committed Velero file-system backup
// (testdata/velero/volumes/<volume>.tree), sorted: the volume as Velero copied it.
func VeleroFixtureTree(volume string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "testdata", "velero", "volumes", volume+".tree"))
	if err != nil {
		return nil, err
	}
	out := strings.Split(strings.TrimSpace(string(b)), "\n")
	slices.Sort(out)
	return out, nil
}
