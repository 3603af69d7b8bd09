package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"
)

// BackupMetadata is the commit marker of a backup: the object written last, without which a
// backup is never restorable nor shown as complete. It records the archive's checksum, which
// every reader verifies, and everything a cluster that syncs the location needs to show the
// backup as the cluster that wrote it did (DESIGN.md section 11): its spec and labels, its
// final status, and the UID of the Backup object that wrote it. Fields added later are
// optional: a marker written before them still loads, with them empty.
type BackupMetadata struct {
	// FormatVersion is the version of the archive format.
	FormatVersion string `json:"formatVersion"`
	Namespace     string `json:"namespace"`
	Name          string `json:"name"`
	// UID is the UID of the Backup object that wrote the backup (its origin).
	UID string `json:"uid,omitempty"`
	// Phase is the backup's terminal phase: Completed or PartiallyFailed.
	Phase string `json:"phase"`
	// ArchiveSHA256 is the hex SHA-256 of the archive object.
	ArchiveSHA256 string `json:"archiveSHA256"`
	// ArchiveSize is the archive's size in bytes.
	ArchiveSize         int64     `json:"archiveSize"`
	StartTimestamp      time.Time `json:"startTimestamp,omitzero"`
	CompletionTimestamp time.Time `json:"completionTimestamp,omitzero"`
	Warnings            int       `json:"warnings"`
	Errors              int       `json:"errors"`

	// Spec is the backup's spec as JSON (a Cairn BackupSpec; storage does not read it).
	Spec json.RawMessage `json:"spec,omitempty"`
	// Labels are the Backup object's labels (its schedule's, for one).
	Labels map[string]string `json:"labels,omitempty"`
	// Expiration is when the backup expires; zero for one that never does.
	Expiration time.Time `json:"expiration,omitzero"`
	// RetainUntil is the Object Lock retain-until date of the backup's objects (RetainUntil),
	// marker included, on a location that locks them; zero elsewhere.
	RetainUntil time.Time `json:"retainUntil,omitzero"`
	// TotalItems and ItemsBackedUp are the backup's final progress.
	TotalItems    int64 `json:"totalItems,omitempty"`
	ItemsBackedUp int64 `json:"itemsBackedUp,omitempty"`
	// OperationsAttempted, OperationsCompleted and OperationsFailed count its async plugin
	// operations.
	OperationsAttempted int `json:"operationsAttempted,omitempty"`
	OperationsCompleted int `json:"operationsCompleted,omitempty"`
	OperationsFailed    int `json:"operationsFailed,omitempty"`
	// Files are the digests of the backup's files beside its archive (logs, results, resource
	// list, item operations) by file name, as they were when the marker was written: a download
	// of one is verified against it (DigestOf). Markers written before issue 40 have none.
	Files map[string]FileDigest `json:"files,omitempty"`
}

// FileDigest is the checksum and size of one of a backup's files, as a commit marker records it.
type FileDigest struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// SideFiles are the keys of a backup's files beside its archive whose digests its commit marker
// records.
func (k BackupKeys) SideFiles() []string {
	return []string{k.Logs, k.ResourceList, k.Results, k.ItemOperations}
}

// DigestOf is what the marker m of the backup with keys records of the object at key: the
// archive's digest, or a side file's; ok is false when it records none (a marker written
// before it recorded side files, a file that was not there at the commit, another key).
func (m BackupMetadata) DigestOf(keys BackupKeys, key string) (d ArchiveDigest, ok bool) {
	if key == keys.Archive {
		return ArchiveDigest{SHA256: m.ArchiveSHA256, Size: m.ArchiveSize}, m.ArchiveSHA256 != ""
	}
	if !slices.Contains(keys.SideFiles(), key) {
		return ArchiveDigest{}, false
	}
	f, ok := m.Files[path.Base(key)]
	return ArchiveDigest{SHA256: f.SHA256, Size: f.Size}, ok && f.SHA256 != ""
}

// DigestFiles reads each of the side files of the backup with keys that is in s and returns
// their digests by file name, for its commit marker (BackupMetadata.Files).
func DigestFiles(ctx context.Context, s ObjectStore, keys BackupKeys) (map[string]FileDigest, error) {
	files := map[string]FileDigest{}
	for _, key := range keys.SideFiles() {
		rc, err := s.Get(ctx, key)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		d, err := Digest(rc)
		_ = rc.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", key, err)
		}
		files[path.Base(key)] = FileDigest{SHA256: d.SHA256, Size: d.Size}
	}
	return files, nil
}

var (
	// ErrNotCommitted means a backup has no metadata object: it never completed.
	ErrNotCommitted = errors.New("backup is not committed: it has no metadata object")
	// ErrChecksumMismatch means an archive's bytes do not match its metadata.
	ErrChecksumMismatch = errors.New("archive checksum mismatch")
	// ErrBadMetadata means the object under a backup's metadata key is not a commit marker
	// Cairn can read: not JSON of one, or larger than MaxMetadataSize.
	ErrBadMetadata = errors.New("not a readable commit marker")
)

// ArchiveDigest is the checksum and size of an uploaded archive.
type ArchiveDigest struct {
	SHA256 string
	Size   int64
	// Unverified says that no digest was recorded (a Velero backup: Velero writes none), so
	// that ReadArchive reads the archive to its end and checks its format, and nothing else;
	// SHA256 and Size are not used. The reader is told so (a restore's ArchiveVerified
	// condition).
	Unverified bool
}

// PutArchive streams r into the archive key and returns its digest, computed on the way. An
// upload that moves no bytes for the idle timeout (DefaultIdleTimeout unless WithIdleTimeout
// says otherwise) fails with ErrStalled: the store stopped reading, or r stopped producing. A
// reader that can be closed with an error (an io.PipeReader) is closed then, so that a Read
// blocked on a silent writer returns too.
func PutArchive(ctx context.Context, s ObjectStore, key string, r io.Reader, opts ...TransferOption) (ArchiveDigest, error) {
	h := sha256.New()
	w, stop := watchIdle(ctx, newTransferOptions(opts), "uploading "+key, closerWithError(r))
	defer stop()
	cr := &countingReader{r: io.TeeReader(w.reader(r), h)}
	if err := s.Put(w.ctx, key, cr); err != nil {
		return ArchiveDigest{}, w.err(err)
	}
	return ArchiveDigest{SHA256: hex.EncodeToString(h.Sum(nil)), Size: cr.n}, nil
}

// Digest reads r to the end and returns its checksum and size.
func Digest(r io.Reader) (ArchiveDigest, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return ArchiveDigest{}, err
	}
	return ArchiveDigest{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// WriteMetadata writes the commit marker. Call it after every other object of the backup.
func WriteMetadata(ctx context.Context, s ObjectStore, keys BackupKeys, m BackupMetadata) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the metadata of %s/%s: %w", m.Namespace, m.Name, err)
	}
	return s.Put(ctx, keys.Metadata, bytes.NewReader(data))
}

// MaxMetadataSize bounds the commit marker a reader accepts: the largest a Backup's spec and
// labels can make it is far below, and a larger object under that key (written by something
// else than Cairn) is refused rather than read into memory.
const MaxMetadataSize = 1 << 20

// ReadMetadata reads the commit marker; ErrNotCommitted when the backup has none.
func ReadMetadata(ctx context.Context, s ObjectStore, keys BackupKeys) (BackupMetadata, error) {
	var m BackupMetadata
	rc, err := s.Get(ctx, keys.Metadata)
	if errors.Is(err, ErrNotFound) {
		return m, fmt.Errorf("%s: %w", keys.Dir, ErrNotCommitted)
	}
	if err != nil {
		return m, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, MaxMetadataSize+1))
	switch {
	case err != nil:
		return m, fmt.Errorf("reading %s: %w", keys.Metadata, err)
	case len(data) > MaxMetadataSize:
		return m, fmt.Errorf("%s: %w: larger than %d bytes", keys.Metadata, ErrBadMetadata, MaxMetadataSize)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%s: %w: %w", keys.Metadata, ErrBadMetadata, err)
	}
	return m, nil
}

// CommittedBackup names a backup whose commit marker is in a location.
type CommittedBackup struct {
	Namespace, Name string
}

// MaxCommittedBackups bounds the committed backups ListCommitted returns: past it, the listing
// fails with ErrTooManyBackups rather than hold (and have the sync act on) every one. It is far
// above what one location holds for a cluster, and it keeps the manager's memory bounded when
// someone who can write to the bucket adds markers by the million.
const MaxCommittedBackups = 100_000

// ErrTooManyBackups means a location holds more than MaxCommittedBackups committed backups.
var ErrTooManyBackups = errors.New("too many committed backups")

// ListCommitted lists the backups committed in a location: those whose directory
// (<prefix>/backups/<namespace>/<name>/) holds the commit marker, sorted by key. It makes one
// listing, whatever the number of backups, and keeps only the markers as the store hands out
// keys (a page at a time from a Lister), so the archives, logs and anything else under
// backups/ never sit in memory. An archive without a marker is never listed. Keys of any other
// shape under backups/ are not backups and are left out. More than MaxCommittedBackups fails
// with ErrTooManyBackups. The names are as stored: a caller that makes objects of them checks
// them first.
func ListCommitted(ctx context.Context, s ObjectStore, l Layout) ([]CommittedBackup, error) {
	dir := l.BackupsDir()
	var committed []CommittedBackup
	err := listEach(ctx, s, dir, func(key string) error {
		c, ok := committedBackup(l, key)
		if !ok {
			return nil
		}
		if len(committed) == MaxCommittedBackups {
			return fmt.Errorf("%w: %s holds more than %d; Cairn considers at most that many in one location",
				ErrTooManyBackups, dir, MaxCommittedBackups)
		}
		committed = append(committed, c)
		return nil
	})
	switch {
	case errors.Is(err, ErrTooManyBackups):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	// A Lister need not list in key order (the filesystem's walk does not). The keys differ
	// only in "<namespace>/<name>/", neither of which holds a slash.
	slices.SortFunc(committed, func(a, b CommittedBackup) int {
		return strings.Compare(a.Namespace+"/"+a.Name+"/", b.Namespace+"/"+b.Name+"/")
	})
	return committed, nil
}

// committedBackup is the backup whose commit marker key is, if it is one: exactly
// <prefix>/backups/<namespace>/<name>/cairn-backup.json, as the layout would make it.
func committedBackup(l Layout, key string) (CommittedBackup, bool) {
	parts := strings.Split(strings.TrimPrefix(key, l.BackupsDir()), "/")
	if len(parts) != 3 || parts[2] != MetadataFileName || parts[0] == "" || parts[1] == "" {
		return CommittedBackup{}, false
	}
	if l.Backup(parts[0], parts[1]).Metadata != key {
		return CommittedBackup{}, false // a segment such as ".." that the layout would not make
	}
	return CommittedBackup{Namespace: parts[0], Name: parts[1]}, true
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
