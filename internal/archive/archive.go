// Package archive writes and reads Cairn's backup archive: a tar.gz stream in Velero's layout
// (docs/format.md). One Writer per backup; it is not safe for concurrent use, so a backup
// feeds it from a single goroutine.
package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
)

// FormatVersion is the version written to metadata/version and to the backup's status.
const FormatVersion = "1.1.0"

// VersionPath is the archive entry that holds FormatVersion.
const VersionPath = "metadata/version"

// ItemPath is the archive entry of one item: resources/<resource>[.<group>]/namespaces/<ns>/<name>.json
// for a namespaced item and resources/<resource>[.<group>]/cluster/<name>.json for a
// cluster-scoped one. The core group has no suffix.
func ItemPath(resource, group, namespace, name string) string {
	dir := resource
	if group != "" {
		dir += "." + group
	}
	if namespace == "" {
		return path.Join("resources", dir, "cluster", name+".json")
	}
	return path.Join("resources", dir, "namespaces", namespace, name+".json")
}

// Writer writes a backup archive.
type Writer struct {
	gz      *gzip.Writer
	tw      *tar.Writer
	modTime time.Time
	closed  bool
}

// NewWriter starts an archive on w and writes its version entry. modTime stamps every entry.
func NewWriter(w io.Writer, modTime time.Time) (*Writer, error) {
	gz := gzip.NewWriter(w)
	aw := &Writer{gz: gz, tw: tar.NewWriter(gz), modTime: modTime}
	if err := aw.add(VersionPath, []byte(FormatVersion+"\n")); err != nil {
		return nil, err
	}
	return aw, nil
}

// AddEntry writes an entry as it is, such as one copied from another archive.
func (w *Writer) AddEntry(name string, data []byte) error {
	return w.add(name, data)
}

// AddItem writes one item's JSON.
func (w *Writer) AddItem(resource, group, namespace, name string, data []byte) error {
	return w.add(ItemPath(resource, group, namespace, name), data)
}

func (w *Writer) add(name string, data []byte) error {
	if w.closed {
		return errors.New("archive: write after close")
	}
	hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: w.modTime, Typeflag: tar.TypeReg}
	if err := w.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("archive: writing the header of %s: %w", name, err)
	}
	if _, err := w.tw.Write(data); err != nil {
		return fmt.Errorf("archive: writing %s: %w", name, err)
	}
	return nil
}

// Close finishes the tar and gzip streams; it does not close the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.tw.Close(); err != nil {
		return fmt.Errorf("archive: closing tar: %w", err)
	}
	if err := w.gz.Close(); err != nil {
		return fmt.Errorf("archive: closing gzip: %w", err)
	}
	return nil
}

// Entry is one file of an archive.
type Entry struct {
	Name string
	Data []byte
}

// Each calls fn with every entry of an archive, in order, one at a time.
func Each(r io.Reader, fn func(Entry) error) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return fmt.Errorf("archive: reading %s: %w", hdr.Name, err)
		}
		if err := fn(Entry{Name: hdr.Name, Data: data}); err != nil {
			return err
		}
	}
}

// ReadAll reads every entry of an archive (for tests and small archives).
func ReadAll(r io.Reader) ([]Entry, error) {
	var entries []Entry
	err := Each(r, func(e Entry) error {
		entries = append(entries, e)
		return nil
	})
	return entries, err
}

// ItemNames returns the item entries' names (without metadata), for comparisons.
func ItemNames(entries []Entry) []string {
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name, "resources/") {
			names = append(names, e.Name)
		}
	}
	return names
}
