// Package archive writes and reads Cairn's backup archive: a tar.gz stream in Velero's layout
// (docs/format.md). One Writer per backup; it is not safe for concurrent use, so a backup
// feeds it from a single goroutine.
package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
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

// DefaultMaxEntrySize is the largest entry a reader accepts unless told otherwise (the manager's
// --max-archive-entry-size). An entry is one Kubernetes object as JSON: etcd refuses a request
// over 1.5 MiB by default and the API server a request body over 3 MiB, so no object the API
// server served, nor one it could take back, comes near. 16 MiB is ten times etcd's limit
// (room for a cluster whose etcd allows more, and for JSON's overhead over etcd's protobuf)
// while one entry held in memory, with its copies while it is spooled, stays far below the
// manager's memory limit.
const DefaultMaxEntrySize int64 = 16 << 20

// ErrEntryTooLarge means an archive entry is larger than the reader's cap: by its tar header,
// or by the bytes it turned out to hold.
var ErrEntryTooLarge = errors.New("archive entry larger than the cap")

// Each calls fn with every entry of an archive, in order, one at a time; an entry larger than
// DefaultMaxEntrySize ends the read with ErrEntryTooLarge. It is EachMax with the default cap.
func Each(r io.Reader, fn func(Entry) error) error {
	return EachMax(r, DefaultMaxEntrySize, fn)
}

// EachMax calls fn with every entry of an archive, in order, one at a time. An archive comes
// from storage, which whoever can write the bucket controls: an entry larger than maxEntrySize
// (DefaultMaxEntrySize when 0 or less) ends the read with ErrEntryTooLarge, before any of it is
// read when its tar header says so, and as soon as it passes the cap when its bytes do. At
// most one entry is in memory at a time, so what reading holds is bounded by the cap, however
// much the archive decompresses to.
func EachMax(r io.Reader, maxEntrySize int64, fn func(Entry) error) error {
	if maxEntrySize <= 0 {
		maxEntrySize = DefaultMaxEntrySize
	}
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return drainGzip(gz)
		}
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		data, err := readEntry(hdr.Name, hdr.Size, tr, maxEntrySize)
		if err != nil {
			return err
		}
		if err := fn(Entry{Name: hdr.Name, Data: data}); err != nil {
			return err
		}
	}
}

// MaxTrailer bounds what the gzip stream may hold after the tar's end (a tar writer pads its
// last record to at most 10 KiB): EachMax reads that far, and no further, to reach the gzip
// trailer.
const MaxTrailer = 1 << 20

// drainGzip reads the gzip stream past the tar's end to its own end, so that its trailer (the
// CRC-32 and size of what it holds) is checked: a reader with no recorded digest of the
// archive (a Velero backup's) catches a damaged stream there. More than MaxTrailer bytes after
// the tar's end is an error, never read on.
func drainGzip(gz io.Reader) error {
	n, err := io.Copy(io.Discard, io.LimitReader(gz, MaxTrailer+1))
	switch {
	case err != nil:
		return fmt.Errorf("archive: after the tar's end: %w", err)
	case n > MaxTrailer:
		return fmt.Errorf("archive: more than %d bytes after the tar's end", MaxTrailer)
	}
	return nil
}

// readEntry reads one entry of declared size from r, refusing one over maxSize by its
// declared size before reading, and by its bytes (a reader that gives more than its header
// said) as soon as they pass the cap.
func readEntry(name string, declared int64, r io.Reader, maxSize int64) ([]byte, error) {
	if declared > maxSize {
		return nil, fmt.Errorf("archive: %s: %w: its header says %d bytes, the cap is %d", name, ErrEntryTooLarge, declared, maxSize)
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(declared, 0)+bytes.MinRead))
	n, err := buf.ReadFrom(io.LimitReader(r, maxSize+1))
	switch {
	case n > maxSize:
		return nil, fmt.Errorf("archive: %s: %w: it holds more than %d bytes", name, ErrEntryTooLarge, maxSize)
	case err != nil:
		return nil, fmt.Errorf("archive: reading %s: %w", name, err)
	}
	return buf.Bytes(), nil
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
