package storage_test

import (
	"strings"
	"testing"

	"github.com/cairn-backup/cairn/internal/storage"
)

func TestDigestOf(t *testing.T) {
	keys := storage.Layout{Prefix: "p"}.Backup("team-a", "b1")
	m := storage.BackupMetadata{
		ArchiveSHA256: "aa", ArchiveSize: 10,
		Files: map[string]storage.FileDigest{"b1-logs.gz": {SHA256: "bb", Size: 3}, "b1-results.json.gz": {}},
	}
	for _, tc := range []struct {
		name   string
		m      storage.BackupMetadata
		key    string
		want   storage.ArchiveDigest
		wantOK bool
	}{
		{"the archive", m, keys.Archive, storage.ArchiveDigest{SHA256: "aa", Size: 10}, true},
		{"a side file", m, keys.Logs, storage.ArchiveDigest{SHA256: "bb", Size: 3}, true},
		{"a side file recorded without a digest", m, keys.Results, storage.ArchiveDigest{}, false},
		{"a side file not recorded", m, keys.ResourceList, storage.ArchiveDigest{}, false},
		{"a marker that records no side files", storage.BackupMetadata{ArchiveSHA256: "aa", ArchiveSize: 10}, keys.Logs, storage.ArchiveDigest{}, false},
		{"a marker that records no archive digest", storage.BackupMetadata{}, keys.Archive, storage.ArchiveDigest{}, false},
		{"another backup's file of the same name", m, storage.Layout{Prefix: "p"}.Backup("team-b", "b1").Logs, storage.ArchiveDigest{}, false},
		{"the marker itself", m, keys.Metadata, storage.ArchiveDigest{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.m.DigestOf(keys, tc.key)
			if ok != tc.wantOK || (ok && got != tc.want) {
				t.Fatalf("DigestOf(%s) = %+v, %v; want %+v, %v", tc.key, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestDigestFiles: the digests of the side files that are there, by file name.
func TestDigestFiles(t *testing.T) {
	s := newFilesystem(t)
	keys := storage.Layout{}.Backup("team-a", "b1")
	side := map[string]string{"b1-logs.gz": "log", "b1-results.json.gz": "results!"}
	for key, data := range map[string]string{keys.Logs: side["b1-logs.gz"], keys.Results: side["b1-results.json.gz"], keys.Archive: "not a side file"} {
		if err := s.Put(t.Context(), key, strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	files, err := storage.DigestFiles(t.Context(), s, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(side) {
		t.Fatalf("DigestFiles = %+v, want the digests of %v only", files, side)
	}
	for name, data := range side {
		d, _ := storage.Digest(strings.NewReader(data))
		if got := files[name]; got != (storage.FileDigest{SHA256: d.SHA256, Size: d.Size}) {
			t.Fatalf("%s: %+v, want %+v", name, got, d)
		}
	}
}
