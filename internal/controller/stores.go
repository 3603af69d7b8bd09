package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
)

// stores opens storage locations for the reconcilers: every read or write of backup data goes
// through a store that came from here.
type stores struct {
	client    client.Reader
	namespace string
	// wrap, when set, wraps every store opened (Config.WrapStore).
	wrap func(*cairnv1.BackupStorageLocation, storage.ObjectStore) storage.ObjectStore
	// timeout bounds the calls that bounded guards.
	timeout time.Duration
}

// DefaultStorageTimeout bounds a reconciler's small storage calls (logs, metadata, operations,
// listings, deletions): a storage service that hangs fails them, and they are retried, instead
// of holding a reconciler forever. The archive upload is bounded by its backup's cancellation.
const DefaultStorageTimeout = 30 * time.Second

// listTimeoutFactor makes the timeout of a listing of a whole location (the sync's, which pages
// through every object under backups/) that many times the small calls' (5 minutes by default):
// a large location is listed to its end, and a hung service still fails the pass.
const listTimeoutFactor = 10

// callTimeout is the storage timeout, DefaultStorageTimeout unless set.
func (s stores) callTimeout() time.Duration {
	if s.timeout <= 0 {
		return DefaultStorageTimeout
	}
	return s.timeout
}

// bounded is ctx limited to the storage timeout.
func (s stores) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.callTimeout())
}

// listing is ctx limited to the timeout of a whole location's listing.
func (s stores) listing(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, listTimeoutFactor*s.callTimeout())
}

// open opens a location's store.
func (s stores) open(ctx context.Context, bsl *cairnv1.BackupStorageLocation) (*location.Store, error) {
	store, err := location.Open(ctx, s.client, bsl)
	if err != nil {
		return nil, err
	}
	if s.wrap != nil {
		store.ObjectStore = s.wrap(bsl, store.ObjectStore)
	}
	return store, nil
}

// location finds the location a backup was queued for.
func (s stores) location(ctx context.Context, b *cairnv1.Backup) (*cairnv1.BackupStorageLocation, error) {
	var locations cairnv1.BackupStorageLocationList
	if err := s.client.List(ctx, &locations, client.InNamespace(s.namespace)); err != nil {
		return nil, err
	}
	return location.Resolve(locations.Items, s.namespace, b.Status.StorageLocation)
}

// forBackup opens the store of the location a backup was queued for.
func (s stores) forBackup(ctx context.Context, b *cairnv1.Backup) (*location.Store, error) {
	bsl, err := s.location(ctx, b)
	if err != nil {
		return nil, err
	}
	return s.open(ctx, bsl)
}

// call runs one storage call (or a few small ones) bounded by the storage timeout.
func (s stores) call(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	return f(ctx)
}

// deleteObjects deletes the listed objects of a backup but those keep names (nil keeps none):
// the metadata first, since without it the backup is not restorable whatever else is left, and
// each call bounded. It returns how many it deleted.
func (s stores) deleteObjects(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys, objects []string, keep func(key string) bool) (int, error) {
	ordered := make([]string, 0, len(objects))
	if slices.Contains(objects, keys.Metadata) {
		ordered = append(ordered, keys.Metadata)
	}
	for _, key := range objects {
		if key != keys.Metadata {
			ordered = append(ordered, key)
		}
	}
	removed := 0
	for _, key := range ordered {
		if keep != nil && keep(key) {
			continue
		}
		if err := s.call(ctx, func(ctx context.Context) error { return store.Delete(ctx, key) }); err != nil {
			return removed, fmt.Errorf("deleting %s: %w", key, err)
		}
		removed++
	}
	return removed, nil
}
