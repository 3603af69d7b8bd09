package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/cairn-backup/cairn/internal/failure"
	"github.com/cairn-backup/cairn/internal/storage"
)

// The operations file (<name>-itemoperations.json.gz, storage.BackupKeys.ItemOperations and
// storage.RestoreKeys.ItemOperations) keeps a backup's or a restore's async operations between
// the run that started them and the operations reconciler that follows them, and is what a
// restarted manager resumes them from (DESIGN.md sections 6, 7 and 9). PutOperations and
// ReadOperations are its one codec: the backup and restore runs write it, the operations
// reconciler reads and rewrites it, the finalizer reads the post-operation items from it.

// ErrCorruptOperations marks an operations file that cannot be decoded: permanent, as reading
// it again gives the same bytes.
var ErrCorruptOperations = failure.Permanent(errors.New("the operations object is corrupt"))

// PutOperations writes ops as the operations file key of store.
func PutOperations(ctx context.Context, store storage.ObjectStore, key string, ops []Operation) error {
	data, err := GzipJSON(ops)
	if err != nil {
		return err
	}
	return store.Put(ctx, key, bytes.NewReader(data))
}

// ReadOperations reads the operations file key of store. A file that cannot be decoded is
// ErrCorruptOperations; a missing one is storage.ErrNotFound.
func ReadOperations(ctx context.Context, store storage.ObjectStore, key string) ([]Operation, error) {
	rc, err := store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading the operations: %w", err)
	}
	defer rc.Close()
	// Storage is untrusted input: the object is capped (DESIGN.md section 15).
	var ops []Operation
	if err := storage.DecodeGzipJSON(rc, key, storage.DefaultMaxFileSize, &ops); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptOperations, err)
	}
	return ops, nil
}
