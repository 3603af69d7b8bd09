package storage

import (
	"path"
	"strings"
)

// Layout builds every object key of a location. All backups of a location live under
// <prefix>/backups/<namespace>/<name>/.
type Layout struct {
	// Prefix is the location's objectStorage.prefix; empty means the root.
	Prefix string
}

// BackupKeys are the keys of one backup's objects.
type BackupKeys struct {
	// Dir is the backup's directory, with a trailing slash so that it never matches another
	// backup whose name it prefixes (b1 vs b10).
	Dir            string
	Archive        string
	Logs           string
	ResourceList   string
	Results        string
	ItemOperations string
	// Metadata is written last: it commits the backup.
	Metadata string
}

// MetadataFileName is the name of the commit-marker object in every backup's directory.
const MetadataFileName = "cairn-backup.json"

// BackupsDir is the directory that holds every backup of the location, with a trailing slash.
func (l Layout) BackupsDir() string {
	return l.join("backups") + "/"
}

// Backup returns the keys of the backup namespace/name.
func (l Layout) Backup(namespace, name string) BackupKeys {
	dir := l.join("backups", namespace, name)
	return BackupKeys{
		Dir:            dir + "/",
		Archive:        path.Join(dir, name+".tar.gz"),
		Logs:           path.Join(dir, name+"-logs.gz"),
		ResourceList:   path.Join(dir, name+"-resource-list.json.gz"),
		Results:        path.Join(dir, name+"-results.json.gz"),
		ItemOperations: path.Join(dir, name+"-itemoperations.json.gz"),
		Metadata:       path.Join(dir, MetadataFileName),
	}
}

func (l Layout) join(parts ...string) string {
	if prefix := strings.Trim(l.Prefix, "/"); prefix != "" {
		parts = append([]string{prefix}, parts...)
	}
	return path.Clean(path.Join(parts...))
}

// RestoreKeys are the keys of one restore's objects.
type RestoreKeys struct {
	// Dir is the restore's directory, with a trailing slash.
	Dir            string
	Logs           string
	Results        string
	ResourceList   string
	ItemOperations string
}

// Restore returns the keys of the restore namespace/name: <prefix>/restores/<namespace>/<name>/.
func (l Layout) Restore(namespace, name string) RestoreKeys {
	dir := l.join("restores", namespace, name)
	return RestoreKeys{
		Dir:            dir + "/",
		Logs:           path.Join(dir, name+"-logs.gz"),
		Results:        path.Join(dir, name+"-results.gz"),
		ResourceList:   path.Join(dir, name+"-resource-list.json.gz"),
		ItemOperations: path.Join(dir, name+"-itemoperations.json.gz"),
	}
}
