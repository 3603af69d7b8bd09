package backup

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cairn-backup/cairn/internal/failure"
	"github.com/cairn-backup/cairn/internal/storage"
)

func TestOperationsFile(t *testing.T) {
	ctx := context.Background()
	fs, err := storage.NewFilesystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const key = "backups/ns/b/b-itemoperations.json.gz"
	started := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ops := []Operation{
		{Action: "a", OperationID: "1", Item: ItemID{GroupResource: schema.GroupResource{Resource: "persistentvolumeclaims"}, Namespace: "ns", Name: "data"}, Started: started, Phase: OperationCompleted,
			PostOperationItems: []ItemID{{GroupResource: schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshots"}, Namespace: "ns", Name: "snap"}}},
		{Action: "a", OperationID: "2", Started: started, Phase: OperationInProgress, NCompleted: 1, NTotal: 2},
	}
	if err := PutOperations(ctx, fs, key, ops); err != nil {
		t.Fatal(err)
	}
	got, err := ReadOperations(ctx, fs, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].OperationID != "1" || len(got[0].PostOperationItems) != 1 || got[1].NCompleted != 1 || !got[1].Started.Equal(started) {
		t.Errorf("read back %+v, want %+v", got, ops)
	}

	// What cannot be read is permanent: reading again gives the same answer.
	var big bytes.Buffer
	gz := gzip.NewWriter(&big)
	_, _ = gz.Write([]byte("[" + strings.Repeat(" ", int(storage.DefaultMaxFileSize)) + "]"))
	_ = gz.Close()
	for name, data := range map[string][]byte{"not gzip": []byte("not gzip"), "a gzip bomb": big.Bytes()} {
		if err := fs.Put(ctx, key, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		_, err := ReadOperations(ctx, fs, key)
		if !errors.Is(err, ErrCorruptOperations) || !failure.IsPermanent(err) {
			t.Errorf("%s: error %v, want ErrCorruptOperations (permanent)", name, err)
		}
	}
	if _, err := ReadOperations(ctx, fs, "backups/ns/none/none-itemoperations.json.gz"); !errors.Is(err, storage.ErrNotFound) || !failure.IsPermanent(err) ||
		!strings.HasPrefix(err.Error(), "reading the operations: ") {
		t.Errorf("missing file: error %v, want storage.ErrNotFound (permanent)", err)
	}
}
