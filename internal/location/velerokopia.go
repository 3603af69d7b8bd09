package location

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kopia/kopia/repo/blob"
)

// veleroFiles is a Velero kopia repository in a filesystem location, read only. Velero writes
// its repositories to object storage (its BackupStorageLocations are buckets), one object per
// kopia blob directly under <prefix>/kopia/<namespace>/; a Velero bucket copied into a
// directory keeps that flat layout, which kopia's own filesystem storage does not read (it
// shards blobs into subdirectories, and writes a .shards file where none is). So a velero
// location's repository is read here, one file per blob, and never written.
type veleroFiles struct {
	blob.DefaultProviderImplementation
	dir string
}

// veleroFilesystem opens the repository directory root/dir of a velero filesystem location.
func veleroFilesystem(root, dir string) (blob.Storage, error) {
	if err := refuseSymlinks(root, dir); err != nil {
		return nil, err
	}
	full := filepath.Join(root, filepath.FromSlash(dir))
	fi, err := os.Stat(full)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("it holds no volume data repository at %s: Velero copied no volume of this namespace there", full)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", full)
	}
	return &veleroFiles{dir: full}, nil
}

// path is the file of blob id: a name directly in the directory, never a path.
func (s *veleroFiles) path(id blob.ID) (string, error) {
	name := string(id)
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("%w: invalid blob ID %q", blob.ErrBlobNotFound, name)
	}
	return filepath.Join(s.dir, name), nil
}

func (s *veleroFiles) GetBlob(_ context.Context, id blob.ID, offset, length int64, output blob.OutputBuffer) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return blob.ErrBlobNotFound
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return blob.ErrBlobNotFound
	}
	output.Reset()
	if length < 0 { // to the end, as the blob proxy asks
		length = fi.Size() - offset
	}
	if offset < 0 || length < 0 || offset+length > fi.Size() {
		return blob.ErrInvalidRange
	}
	_, err = io.Copy(output, io.NewSectionReader(f, offset, length))
	return err
}

func (s *veleroFiles) GetMetadata(_ context.Context, id blob.ID) (blob.Metadata, error) {
	p, err := s.path(id)
	if err != nil {
		return blob.Metadata{}, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.Mode().IsRegular()) {
		return blob.Metadata{}, blob.ErrBlobNotFound
	}
	if err != nil {
		return blob.Metadata{}, err
	}
	return blob.Metadata{BlobID: id, Length: fi.Size(), Timestamp: fi.ModTime()}, nil
}

func (s *veleroFiles) ListBlobs(_ context.Context, prefix blob.ID, cb func(blob.Metadata) error) error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || !strings.HasPrefix(e.Name(), string(prefix)) {
			continue
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := cb(blob.Metadata{BlobID: blob.ID(e.Name()), Length: fi.Size(), Timestamp: fi.ModTime()}); err != nil {
			return err
		}
	}
	return nil
}

// errVeleroReadOnly refuses every write: Cairn never changes a Velero bucket.
var errVeleroReadOnly = errors.New("a Velero repository is read only: Cairn never changes a Velero bucket")

func (s *veleroFiles) PutBlob(context.Context, blob.ID, blob.Bytes, blob.PutOptions) error {
	return errVeleroReadOnly
}

func (s *veleroFiles) DeleteBlob(context.Context, blob.ID) error { return errVeleroReadOnly }

func (s *veleroFiles) IsReadOnly() bool { return true }

func (s *veleroFiles) ConnectionInfo() blob.ConnectionInfo {
	return blob.ConnectionInfo{Type: "cairn-velero-files", Config: s.dir}
}

func (s *veleroFiles) DisplayName() string { return "Velero repository " + s.dir }
