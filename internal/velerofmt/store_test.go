package velerofmt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/cairn-backup/cairn/internal/storage"
)

func put(t *testing.T, s storage.ObjectStore, key, value string) {
	t.Helper()
	if err := s.Put(context.Background(), key, strings.NewReader(value)); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, s storage.ObjectStore, key string) (string, error) {
	t.Helper()
	rc, err := s.Get(context.Background(), key)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	return string(data), err
}

func veleroJSON(name, phase string) string {
	return `{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"` + name + `","uid":"uid-` + name + `"},"status":{"phase":"` + phase + `","formatVersion":"1.1.0","startTimestamp":"2026-11-01T10:00:00Z"}}`
}

// newVeleroBucket is a filesystem store holding, under prefix "velero", the keys Velero writes
// for backups a (Completed) and b (Failed), a restore and a kopia repository.
func newVeleroBucket(t *testing.T) (storage.ObjectStore, *Store) {
	t.Helper()
	inner, err := storage.NewFilesystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{
		"velero/backups/a/velero-backup.json":        veleroJSON("a", "Completed"),
		"velero/backups/a/a.tar.gz":                  "archive of a",
		"velero/backups/a/a-logs.gz":                 "logs of a",
		"velero/backups/a/a-results.gz":              "results of a",
		"velero/backups/a/a-resource-list.json.gz":   "list of a",
		"velero/backups/a/a-volumesnapshots.json.gz": "snapshots of a",
		"velero/backups/b/velero-backup.json":        veleroJSON("b", "Failed"),
		"velero/backups/b/b-logs.gz":                 "logs of b",
		"velero/restores/r/restore-r-logs.gz":        "restore logs",
		"velero/kopia/shop/kopia.repository.f":       "repository",
		"velero/backups/a/unrelated":                 "not a file of a",
		"elsewhere/backups/c/velero-backup.json":     veleroJSON("c", "Completed"),
	} {
		put(t, inner, key, value)
	}
	return inner, NewStore(inner, storage.Layout{Prefix: "velero"}, "cairn-system")
}

func TestStoreListsVeleroBackupsInCairnsLayout(t *testing.T) {
	_, s := newVeleroBucket(t)
	got, err := s.List(context.Background(), "velero/backups/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"velero/backups/cairn-system/a/a-logs.gz",
		"velero/backups/cairn-system/a/a-resource-list.json.gz",
		"velero/backups/cairn-system/a/a-results.json.gz",
		"velero/backups/cairn-system/a/a-volumesnapshots.json.gz",
		"velero/backups/cairn-system/a/a.tar.gz",
		"velero/backups/cairn-system/a/cairn-backup.json",
		"velero/backups/cairn-system/b/b-logs.gz",
		"velero/backups/cairn-system/b/cairn-backup.json",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("List =\n%q\nwant\n%q", got, want)
	}
	committed, err := storage.ListCommitted(context.Background(), s, storage.Layout{Prefix: "velero"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []storage.CommittedBackup{{Namespace: "cairn-system", Name: "a"}, {Namespace: "cairn-system", Name: "b"}}; !reflect.DeepEqual(committed, want) {
		t.Errorf("ListCommitted = %v, want %v", committed, want)
	}
	one, err := s.List(context.Background(), "velero/backups/cairn-system/b/")
	if err != nil || !reflect.DeepEqual(one, want[6:]) {
		t.Errorf("List of one backup's directory = %q, %v; want %q", one, err, want[6:])
	}
	outside, err := s.List(context.Background(), "velero/kopia/")
	if err != nil || !reflect.DeepEqual(outside, []string{"velero/kopia/shop/kopia.repository.f"}) {
		t.Errorf("List outside backups/ = %q, %v; want the key as it is", outside, err)
	}
}

func TestStoreGet(t *testing.T) {
	_, s := newVeleroBucket(t)
	l := storage.Layout{Prefix: "velero"}
	keys := l.Backup("cairn-system", "a")
	for key, want := range map[string]string{
		keys.Archive:                                 "archive of a",
		keys.Logs:                                    "logs of a",
		keys.ResourceList:                            "list of a",
		"velero/kopia/shop/kopia.repository.f":       "repository",
		"velero/restores/r/restore-r-logs.gz":        "restore logs",
		l.Backup("cairn-system", "velero-a").Archive: "archive of a", // the rename
	} {
		if got, err := get(t, s, key); err != nil || got != want {
			t.Errorf("Get(%s) = %q, %v; want %q", key, got, err, want)
		}
	}
	if _, err := get(t, s, keys.Results); err == nil || !strings.Contains(err.Error(), "velero/backups/a/a-results.gz") {
		t.Errorf("Get(results) of a file that is not Velero's results = %v, want an error naming it", err)
	}
	m, err := storage.ReadMetadata(context.Background(), s, keys)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "a" || m.Namespace != "cairn-system" || m.UID != "uid-a" || m.Phase != "Completed" {
		t.Errorf("marker = %+v", m)
	}
	renamed, err := storage.ReadMetadata(context.Background(), s, l.Backup("cairn-system", "velero-a"))
	if err != nil || renamed.Name != "velero-a" || renamed.UID != "uid-a" {
		t.Errorf("marker under the rename = %+v, %v; want backup velero-a of Velero's a", renamed, err)
	}
	for _, key := range []string{
		l.Backup("other-namespace", "a").Archive,         // another namespace
		l.Backup("cairn-system", "c").Metadata,           // another prefix's
		l.Backup("cairn-system", "nope").Metadata,        // no such backup
		l.Backup("cairn-system", "velero-nope").Metadata, // no such backup renamed
		l.Backup("cairn-system", "a").ItemOperations,     // a file Velero did not write
		"velero/backups/cairn-system/a/unrelated",        // not a file of the backup
	} {
		if _, err := get(t, s, key); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Get(%s) = %v, want ErrNotFound", key, err)
		}
		if ok, err := s.Exists(context.Background(), key); ok || err != nil {
			t.Errorf("Exists(%s) = %v, %v; want false", key, ok, err)
		}
	}
	if _, err := storage.ReadMetadata(context.Background(), s, l.Backup("cairn-system", "b")); !errors.Is(err, ErrPhaseSkipped) {
		t.Errorf("marker of a Failed Velero backup: %v, want ErrPhaseSkipped", err)
	}
	if ok, err := s.Exists(context.Background(), keys.Metadata); !ok || err != nil {
		t.Errorf("Exists(marker) = %v, %v", ok, err)
	}
}

func TestStoreRefusesEveryWrite(t *testing.T) {
	inner, s := newVeleroBucket(t)
	for _, key := range []string{"velero/backups/cairn-system/a/a.tar.gz", "velero/backups/a/a.tar.gz", "velero/restores/x/x-logs.gz"} {
		if err := s.Put(context.Background(), key, bytes.NewReader([]byte("x"))); !errors.Is(err, storage.ErrReadOnly) || !errors.Is(err, ErrVeleroLocation) {
			t.Errorf("Put(%s) = %v, want ErrReadOnly and ErrVeleroLocation", key, err)
		}
		if err := s.Delete(context.Background(), key); !errors.Is(err, storage.ErrReadOnly) {
			t.Errorf("Delete(%s) = %v, want ErrReadOnly", key, err)
		}
	}
	if got, _ := get(t, inner, "velero/backups/a/a.tar.gz"); got != "archive of a" {
		t.Errorf("the bucket changed: %q", got)
	}
}
