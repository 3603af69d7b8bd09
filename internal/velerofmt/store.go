package velerofmt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/cairn-backup/cairn/internal/storage"
)

// ErrVeleroLocation is returned (wrapped, with storage.ErrReadOnly) by every write to a Velero
// location: Cairn never changes a Velero bucket.
var ErrVeleroLocation = errors.New("the storage location holds Velero's backups, which Cairn never changes")

// VeleroBackupFile is the name of the Velero Backup object in each backup's directory.
const VeleroBackupFile = "velero-backup.json"

// Store shows a Velero bucket and prefix in Cairn's layout (docs/format.md), read only: Velero's
// backups/<name>/ appears as backups/<namespace>/<name>/ of the operator's namespace, its
// velero-backup.json as the commit marker cairn-backup.json (Marker: no archive digest), and
// each of its files under Cairn's name for it (<name>-results.gz as <name>-results.json.gz, in
// Cairn's shape: ConvertResults; the archive, log, resource list and item operations have the
// same names in both). A Velero
// backup renamed in the cluster (Rename) is found under its new name too. Every other key
// (restores/, kopia/) is read as it is. Every Put and Delete fails with storage.ErrReadOnly.
//
// What the files hold is Velero's, as Velero wrote it; only the commit marker and the results
// are made here.
type Store struct {
	inner storage.ObjectStore
	// layout is Cairn's layout of the location (its prefix is Velero's BSL prefix).
	layout storage.Layout
	// namespace is the operator's namespace, where the Velero backups appear.
	namespace string
}

// NewStore shows the Velero backups in inner under the location's layout, in namespace.
func NewStore(inner storage.ObjectStore, layout storage.Layout, namespace string) *Store {
	return &Store{inner: inner, layout: layout, namespace: namespace}
}

// veleroDir is Velero's directory of backup name: <prefix>/backups/<name>/.
func (s *Store) veleroDir(name string) string {
	return strings.TrimSuffix(s.layout.BackupsDir(), "/") + "/" + name + "/"
}

// cairnKey is what a key of Cairn's layout names: a file of a backup of the namespace, and
// which one (the file's name with the backup's name cut off its front: "cairn-backup.json",
// ".tar.gz", "-logs.gz", ...). ok is false for a key outside backups/.
func (s *Store) cairnKey(key string) (namespace, name, file string, ok bool) {
	rest, found := strings.CutPrefix(key, s.layout.BackupsDir())
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// veleroFile is the name in Velero's directory of the Cairn file named file of a backup that
// Velero calls vname and the cluster name: "" for the commit marker, which is made, not read.
func veleroFile(file, name, vname string) (string, bool) {
	if file == storage.MetadataFileName {
		return "", true
	}
	suffix, ok := strings.CutPrefix(file, name)
	if !ok || suffix == "" {
		return "", false
	}
	if suffix == "-results.json.gz" {
		suffix = "-results.gz"
	}
	return vname + suffix, true
}

// cairnFile is the Cairn name of Velero's file named file in the directory of backup vname.
func cairnFile(file, vname string) (string, bool) {
	if file == VeleroBackupFile {
		return storage.MetadataFileName, true
	}
	suffix, ok := strings.CutPrefix(file, vname)
	if !ok || suffix == "" || strings.Contains(suffix, "/") {
		return "", false
	}
	if suffix == "-results.gz" {
		suffix = "-results.json.gz"
	}
	return vname + suffix, true
}

// resolve is the Velero name of the backup the cluster calls name: name itself when Velero
// has a backup of that name, else the name Rename made it from when Velero has that one.
func (s *Store) resolve(ctx context.Context, name string) (string, bool, error) {
	found, err := s.inner.Exists(ctx, s.veleroDir(name)+VeleroBackupFile)
	if err != nil || found {
		return name, found, err
	}
	if base, renamed := strings.CutPrefix(name, RenamePrefix); renamed && base != "" {
		found, err = s.inner.Exists(ctx, s.veleroDir(base)+VeleroBackupFile)
		return base, found, err
	}
	return "", false, nil
}

// Get opens the object at key: a file of a Velero backup under its Cairn key, the commit
// marker made from velero-backup.json, or any key outside backups/ as it is.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	namespace, name, file, ok := s.cairnKey(key)
	if !ok {
		return s.inner.Get(ctx, key)
	}
	if namespace != s.namespace {
		return nil, fmt.Errorf("%s: %w", key, storage.ErrNotFound)
	}
	vname, found, err := s.resolve(ctx, name)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%s: %w", key, storage.ErrNotFound)
	}
	vfile, ok := veleroFile(file, name, vname)
	if !ok {
		return nil, fmt.Errorf("%s: %w", key, storage.ErrNotFound)
	}
	if vfile != "" && strings.HasSuffix(file, "-results.json.gz") {
		return s.results(ctx, s.veleroDir(vname)+vfile)
	}
	if vfile != "" {
		return s.inner.Get(ctx, s.veleroDir(vname)+vfile)
	}
	m, err := s.marker(ctx, vname, name)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// results reads Velero's results file at key and hands it out in Cairn's shape
// (ConvertResults), so that `cairn backup describe` shows its warnings and errors.
func (s *Store) results(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.inner.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := ConvertResults(rc, key)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// marker reads velero-backup.json of Velero backup vname and makes the commit marker of the
// backup the cluster calls name from it.
func (s *Store) marker(ctx context.Context, vname, name string) (storage.BackupMetadata, error) {
	key := s.veleroDir(vname) + VeleroBackupFile
	rc, err := s.inner.Get(ctx, key)
	if err != nil {
		return storage.BackupMetadata{}, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, MaxBackupObjectSize+1))
	if err != nil {
		return storage.BackupMetadata{}, fmt.Errorf("reading %s: %w", key, err)
	}
	vb, err := Parse(data)
	if err != nil {
		return storage.BackupMetadata{}, fmt.Errorf("%s: %w", key, err)
	}
	if vb.Metadata.Name != "" && vb.Metadata.Name != vname {
		return storage.BackupMetadata{}, fmt.Errorf("%s: %w: it names backup %s", key, ErrNotVeleroBackup, vb.Metadata.Name)
	}
	return Marker(vb, s.namespace, name)
}

// Exists reports whether there is an object at key.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	namespace, name, file, ok := s.cairnKey(key)
	if !ok {
		return s.inner.Exists(ctx, key)
	}
	if namespace != s.namespace {
		return false, nil
	}
	vname, found, err := s.resolve(ctx, name)
	if err != nil || !found {
		return false, err
	}
	vfile, ok := veleroFile(file, name, vname)
	switch {
	case !ok:
		return false, nil
	case vfile == "":
		return true, nil
	}
	return s.inner.Exists(ctx, s.veleroDir(vname)+vfile)
}

// List returns the keys under prefix, sorted, in Cairn's layout.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	if err := s.ListFunc(ctx, prefix, func(key string) error { keys = append(keys, key); return nil }); err != nil {
		return nil, err
	}
	sort.Strings(keys)
	return keys, nil
}

// ListFunc calls fn with each key under prefix in Cairn's layout: the files of Velero's
// backups under backups/<namespace>/<name>/ (velero-backup.json as the commit marker), every
// other key as it is.
func (s *Store) ListFunc(ctx context.Context, prefix string, fn func(key string) error) error {
	backups := s.layout.BackupsDir()
	if !strings.HasPrefix(prefix, backups) && !strings.HasPrefix(backups, prefix) {
		return listEach(ctx, s.inner, prefix, fn)
	}
	return listEach(ctx, s.inner, backups, func(key string) error {
		parts := strings.Split(strings.TrimPrefix(key, backups), "/")
		if len(parts) != 2 || parts[0] == "" {
			return nil
		}
		file, ok := cairnFile(parts[1], parts[0])
		if !ok {
			return nil
		}
		mapped := path.Join(strings.TrimSuffix(backups, "/"), s.namespace, parts[0], file)
		if !strings.HasPrefix(mapped, prefix) {
			return nil
		}
		return fn(mapped)
	})
}

// Put refuses: a Velero location is never written.
func (s *Store) Put(_ context.Context, key string, _ io.Reader) error {
	return fmt.Errorf("writing %s: %w: %w", key, storage.ErrReadOnly, ErrVeleroLocation)
}

// Delete refuses: a Velero location is never written.
func (s *Store) Delete(_ context.Context, key string) error {
	return fmt.Errorf("deleting %s: %w: %w", key, storage.ErrReadOnly, ErrVeleroLocation)
}

// listEach calls fn with each key under prefix, through inner's ListFunc when it has one.
func listEach(ctx context.Context, inner storage.ObjectStore, prefix string, fn func(key string) error) error {
	if l, ok := inner.(storage.Lister); ok {
		return l.ListFunc(ctx, prefix, fn)
	}
	keys, err := inner.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, key := range keys {
		if err := fn(key); err != nil {
			return err
		}
	}
	return nil
}
