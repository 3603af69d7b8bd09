package storage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cairn-backup/cairn/internal/storage"
)

// A commit marker written before it held the spec, labels and final status (as the finalizer
// wrote it until sync from storage) still loads, with those fields empty.
func TestReadMetadataLoadsAnOldMarker(t *testing.T) {
	s, ctx := newFilesystem(t), context.Background()
	keys := storage.Layout{}.Backup("ns", "b")
	old := `{
  "formatVersion": "1.1.0",
  "namespace": "ns",
  "name": "b",
  "uid": "u-1",
  "phase": "Completed",
  "archiveSHA256": "abc",
  "archiveSize": 12,
  "startTimestamp": "2026-01-02T03:04:05Z",
  "completionTimestamp": "2026-01-02T03:05:05Z",
  "warnings": 1,
  "errors": 0
}`
	mustPut(t, s, keys.Metadata, old)
	m, err := storage.ReadMetadata(ctx, s, keys)
	if err != nil {
		t.Fatal(err)
	}
	want := storage.BackupMetadata{
		FormatVersion: "1.1.0", Namespace: "ns", Name: "b", UID: "u-1", Phase: "Completed",
		ArchiveSHA256: "abc", ArchiveSize: 12, Warnings: 1,
		StartTimestamp:      time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		CompletionTimestamp: time.Date(2026, 1, 2, 3, 5, 5, 0, time.UTC),
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("ReadMetadata = %+v, want %+v", m, want)
	}
}

// The new fields go through a write and a read unchanged, and a marker without them is written
// without them (an older Cairn reads it as before).
func TestMetadataRoundTrip(t *testing.T) {
	s, ctx := newFilesystem(t), context.Background()
	keys := storage.Layout{Prefix: "p"}.Backup("ns", "b")
	m := storage.BackupMetadata{
		FormatVersion: "1.1.0", Namespace: "ns", Name: "b", UID: "u-1", Phase: "PartiallyFailed",
		ArchiveSHA256: "abc", ArchiveSize: 12, Warnings: 2, Errors: 1,
		StartTimestamp:      time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		CompletionTimestamp: time.Date(2026, 1, 2, 3, 5, 5, 0, time.UTC),
		Expiration:          time.Date(2026, 2, 1, 3, 4, 5, 0, time.UTC),
		Spec:                json.RawMessage(`{"includedNamespaces":["ns"]}`),
		Labels:              map[string]string{"cairn.dev/schedule-name": "daily"},
		TotalItems:          10, ItemsBackedUp: 9, OperationsAttempted: 3, OperationsCompleted: 2, OperationsFailed: 1,
	}
	if err := storage.WriteMetadata(ctx, s, keys, m); err != nil {
		t.Fatal(err)
	}
	got, err := storage.ReadMetadata(ctx, s, keys)
	if err != nil {
		t.Fatal(err)
	}
	// The marker is indented as a whole; the spec's bytes may be too.
	var spec bytes.Buffer
	if err := json.Compact(&spec, got.Spec); err != nil {
		t.Fatal(err)
	}
	got.Spec = spec.Bytes()
	if !reflect.DeepEqual(got, m) {
		t.Errorf("ReadMetadata = %+v, want %+v", got, m)
	}

	bare := storage.Layout{}.Backup("ns", "bare")
	if err := storage.WriteMetadata(ctx, s, bare, storage.BackupMetadata{Namespace: "ns", Name: "bare"}); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"spec", "labels", "expiration", "totalItems", "operationsAttempted"} {
		if stored := mustGet(t, s, bare.Metadata); strings.Contains(stored, `"`+field+`"`) {
			t.Errorf("a marker without %s stores it anyway: %s", field, stored)
		}
	}
}

func TestListCommitted(t *testing.T) {
	s, ctx := newFilesystem(t), context.Background()
	l := storage.Layout{Prefix: "p"}
	committed, uncommitted := l.Backup("ns1", "b1"), l.Backup("ns1", "b2")
	other := l.Backup("ns2", "b1")
	for _, key := range []string{
		committed.Archive, committed.Metadata,
		uncommitted.Archive, uncommitted.Logs, // an archive without a marker is never listed
		other.Metadata,
		"p/backups/ns1/cairn-backup.json",           // too shallow
		"p/backups/ns1/b3/nested/cairn-backup.json", // too deep
		"p/backups/ns1/b4/other.json",               // not a marker
		"p/restores/ns1/r/cairn-backup.json",        // not under backups/
		"q/backups/ns1/b5/cairn-backup.json",        // another prefix
	} {
		mustPut(t, s, key, "{}")
	}
	got, err := storage.ListCommitted(ctx, s, l)
	if err != nil {
		t.Fatal(err)
	}
	want := []storage.CommittedBackup{{Namespace: "ns1", Name: "b1"}, {Namespace: "ns2", Name: "b1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ListCommitted = %v, want %v", got, want)
	}

	empty, err := storage.ListCommitted(ctx, newFilesystem(t), storage.Layout{})
	if err != nil || len(empty) != 0 {
		t.Errorf("ListCommitted of an empty location = %v, %v; want nothing", empty, err)
	}
}

// A marker larger than any Backup could make is refused, not read into memory; a marker that
// is not JSON is an error, never a crash.
func TestReadMetadataRefusesWhatIsNotAMarker(t *testing.T) {
	s, ctx := newFilesystem(t), context.Background()
	big, notJSON := storage.Layout{}.Backup("ns", "big"), storage.Layout{}.Backup("ns", "garbage")
	mustPut(t, s, big.Metadata, `{"name":"`+strings.Repeat("x", storage.MaxMetadataSize)+`"}`)
	mustPut(t, s, notJSON.Metadata, "not json")
	if _, err := storage.ReadMetadata(ctx, s, big); !errors.Is(err, storage.ErrBadMetadata) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("ReadMetadata of a huge marker = %v, want it refused", err)
	}
	if _, err := storage.ReadMetadata(ctx, s, notJSON); !errors.Is(err, storage.ErrBadMetadata) {
		t.Errorf("ReadMetadata of garbage = %v, want ErrBadMetadata", err)
	}
}
