package storage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// listerOnly is a store that can only list key by key, handing out keys as a generator makes
// them: List fails, so ListCommitted must keep the markers as they come, never the whole
// listing. listed counts the keys handed out.
type listerOnly struct {
	storage.ObjectStore
	keys   func(yield func(string) bool)
	listed int
}

func (s *listerOnly) List(context.Context, string) ([]string, error) {
	return nil, errors.New("List holds every key in memory: use ListFunc")
}

func (s *listerOnly) ListFunc(_ context.Context, _ string, fn func(string) error) error {
	for key := range s.keys {
		s.listed++
		if err := fn(key); err != nil {
			return err
		}
	}
	return nil
}

// A location with a great many objects is listed as it pages: only the markers are kept,
// and they come out sorted by key whatever order the store lists them in.
func TestListCommittedKeepsOnlyMarkersAsItLists(t *testing.T) {
	l := storage.Layout{Prefix: "p"}
	s := &listerOnly{keys: func(yield func(string) bool) {
		for _, key := range []string{l.Backup("ns1", "b2").Metadata, l.Backup("ns1", "b2").Archive,
			l.Backup("ns1", "b1").Metadata, l.Backup("ns-a", "b1").Metadata, l.Backup("ns1", "b3").Logs} {
			if !yield(key) {
				return
			}
		}
		for i := range 200_000 {
			if !yield(fmt.Sprintf("p/backups/junk/%d/x.tar.gz", i)) {
				return
			}
		}
	}}
	got, err := storage.ListCommitted(context.Background(), s, l)
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by key: "p/backups/ns-a/..." < "p/backups/ns1/..." ('-' < '1').
	want := []storage.CommittedBackup{{Namespace: "ns-a", Name: "b1"}, {Namespace: "ns1", Name: "b1"}, {Namespace: "ns1", Name: "b2"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ListCommitted = %v, want %v", got, want)
	}
}

// More committed backups than one pass considers fail the listing with ErrTooManyBackups as
// soon as the first one past the limit is listed, instead of holding them all.
func TestListCommittedRefusesTooManyBackups(t *testing.T) {
	l := storage.Layout{}
	s := &listerOnly{keys: func(yield func(string) bool) {
		for i := 0; ; i++ {
			if !yield(l.Backup("ns", fmt.Sprintf("b%d", i)).Metadata) || !yield(l.Backup("ns", fmt.Sprintf("b%d", i)).Archive) {
				return
			}
		}
	}}
	got, err := storage.ListCommitted(context.Background(), s, l)
	if !errors.Is(err, storage.ErrTooManyBackups) || !strings.Contains(err.Error(), "more than 100000") {
		t.Fatalf("ListCommitted = %d backups, %v; want ErrTooManyBackups naming the limit", len(got), err)
	}
	if want := 2*storage.MaxCommittedBackups + 1; s.listed != want {
		t.Errorf("the listing went on for %d keys; want it to stop at the marker past the limit, key %d", s.listed, want)
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
