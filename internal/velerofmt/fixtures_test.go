package velerofmt_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/velerofmt"
)

// The backups hack/velero-fixtures.sh made with Velero v1.18.1, read through Store as sync and
// restore read them.
func TestStoreReadsRealVeleroBackups(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", "testdata", "velero", "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := storage.NewFilesystem(root)
	if err != nil {
		t.Fatal(err)
	}
	layout := storage.Layout{Prefix: "velero"}
	s := velerofmt.NewStore(inner, layout, "cairn-system")
	ctx := context.Background()
	committed, err := storage.ListCommitted(ctx, s, layout)
	if err != nil {
		t.Fatal(err)
	}
	phases := map[string]string{}
	for _, c := range committed {
		m, err := storage.ReadMetadata(ctx, s, layout.Backup(c.Namespace, c.Name))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		phases[c.Name] = m.Phase
		if m.UID == "" || m.StartTimestamp.IsZero() || m.CompletionTimestamp.Before(m.StartTimestamp) || m.Expiration.IsZero() || m.TotalItems == 0 {
			t.Errorf("%s: marker %+v lacks what Velero recorded", c.Name, m)
		}
		// The archive reads to its end unverified, and every item entry is in a shape the
		// restore reads (or a versioned copy it leaves out).
		var items, copies int
		err = storage.ReadArchive(ctx, s, layout.Backup(c.Namespace, c.Name).Archive, storage.ArchiveDigest{Unverified: true}, func(e archive.Entry) error {
			switch {
			case e.Name == archive.VersionPath:
				if string(e.Data) != "1.1.0\n" {
					t.Errorf("%s: metadata/version %q", c.Name, e.Data)
				}
			case restore.IsVersionedCopy(e.Name):
				copies++
			default:
				if _, _, _, err := restore.ParseItemPath(e.Name); err != nil {
					t.Errorf("%s: %v", c.Name, err)
				}
				items++
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if int64(items) != m.TotalItems || copies != items {
			t.Errorf("%s: %d items and %d versioned copies, want %d of each (Velero's count)", c.Name, items, copies, m.TotalItems)
		}
	}
	if len(phases) != 4 || phases["shop-full"] != "Completed" || phases["shop-labelled"] != "Completed" || phases["shop-broken"] != "PartiallyFailed" {
		t.Errorf("phases = %v", phases)
	}
}

// The fixtures are what the script says they are: its version file names Velero's version.
func TestFixturesRecordTheirMaking(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "velero", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hack/velero-fixtures.sh", "Velero v1.18.1"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("VERSION does not say %q:\n%s", want, data)
		}
	}
}
