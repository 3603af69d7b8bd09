package storage_test

import (
	"testing"

	"github.com/cairn-backup/cairn/internal/storage"
)

func TestLayout(t *testing.T) {
	tests := []struct {
		prefix string
		want   storage.BackupKeys
	}{
		{prefix: "", want: storage.BackupKeys{
			Dir:            "backups/team-a/nightly/",
			Archive:        "backups/team-a/nightly/nightly.tar.gz",
			Logs:           "backups/team-a/nightly/nightly-logs.gz",
			ResourceList:   "backups/team-a/nightly/nightly-resource-list.json.gz",
			Results:        "backups/team-a/nightly/nightly-results.json.gz",
			ItemOperations: "backups/team-a/nightly/nightly-itemoperations.json.gz",
			Metadata:       "backups/team-a/nightly/cairn-backup.json",
		}},
		{prefix: "/cluster-a/", want: storage.BackupKeys{
			Dir:            "cluster-a/backups/team-a/nightly/",
			Archive:        "cluster-a/backups/team-a/nightly/nightly.tar.gz",
			Logs:           "cluster-a/backups/team-a/nightly/nightly-logs.gz",
			ResourceList:   "cluster-a/backups/team-a/nightly/nightly-resource-list.json.gz",
			Results:        "cluster-a/backups/team-a/nightly/nightly-results.json.gz",
			ItemOperations: "cluster-a/backups/team-a/nightly/nightly-itemoperations.json.gz",
			Metadata:       "cluster-a/backups/team-a/nightly/cairn-backup.json",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.prefix, func(t *testing.T) {
			if got := (storage.Layout{Prefix: tt.prefix}).Backup("team-a", "nightly"); got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if got := (storage.Layout{Prefix: "p/q"}).BackupsDir(); got != "p/q/backups/" {
		t.Errorf("BackupsDir = %q", got)
	}
}

func TestRestoreLayout(t *testing.T) {
	want := storage.RestoreKeys{
		Dir:            "p/restores/team-a/r1/",
		Logs:           "p/restores/team-a/r1/r1-logs.gz",
		Results:        "p/restores/team-a/r1/r1-results.gz",
		ResourceList:   "p/restores/team-a/r1/r1-resource-list.json.gz",
		ItemOperations: "p/restores/team-a/r1/r1-itemoperations.json.gz",
	}
	if got := (storage.Layout{Prefix: "/p/"}).Restore("team-a", "r1"); got != want {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got := (storage.Layout{}).Restore("ns", "x").Dir; got != "restores/ns/x/" {
		t.Errorf("a restore's directory without a prefix = %q", got)
	}
	// A restore's files never share a directory with a backup's of the same name.
	if b, r := (storage.Layout{}).Backup("ns", "x"), (storage.Layout{}).Restore("ns", "x"); b.Dir == r.Dir {
		t.Errorf("backup and restore share %s", b.Dir)
	}
}
