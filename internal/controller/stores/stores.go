package stores

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/download"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
)

// Stores opens storage locations for the reconcilers: every read or write of backup data goes
// through a store that came from here.
type Stores struct {
	Client    client.Reader
	Namespace string
	// Wrap, when set, wraps every store opened (Config.WrapStore).
	Wrap func(*cairnv1.BackupStorageLocation, storage.ObjectStore) storage.ObjectStore
	// Timeout bounds the calls that bounded guards.
	Timeout time.Duration
}

// DefaultStorageTimeout bounds a reconciler's small storage calls (logs, metadata, operations,
// listings, deletions): a storage service that hangs fails them, and they are retried, instead
// of holding a reconciler forever. The archive upload is bounded by its backup's cancellation.
const DefaultStorageTimeout = 30 * time.Second

// ListTimeoutFactor makes the timeout of a listing of a whole location (the sync's, which pages
// through every object under backups/) that many times the small calls' (5 minutes by default):
// a large location is listed to its end, and a hung service still fails the pass.
const ListTimeoutFactor = 10

// CallTimeout is the storage timeout, DefaultStorageTimeout unless set.
func (s Stores) CallTimeout() time.Duration {
	if s.Timeout <= 0 {
		return DefaultStorageTimeout
	}
	return s.Timeout
}

// Bounded is ctx limited to the storage timeout.
func (s Stores) Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.CallTimeout())
}

// Listing is ctx limited to the timeout of a whole location's listing.
func (s Stores) Listing(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, ListTimeoutFactor*s.CallTimeout())
}

// Open opens a location's store.
func (s Stores) Open(ctx context.Context, bsl *cairnv1.BackupStorageLocation) (*location.Store, error) {
	store, err := location.Open(ctx, s.Client, bsl)
	if err != nil {
		return nil, err
	}
	if s.Wrap != nil {
		store.ObjectStore = s.Wrap(bsl, store.ObjectStore)
	}
	return store, nil
}

// Location finds the location a backup was queued for.
func (s Stores) Location(ctx context.Context, b *cairnv1.Backup) (*cairnv1.BackupStorageLocation, error) {
	var locations cairnv1.BackupStorageLocationList
	if err := s.Client.List(ctx, &locations, client.InNamespace(s.Namespace)); err != nil {
		return nil, err
	}
	return location.Resolve(locations.Items, s.Namespace, b.Status.StorageLocation)
}

// ForBackup opens the store of the location a backup was queued for.
func (s Stores) ForBackup(ctx context.Context, b *cairnv1.Backup) (*location.Store, error) {
	bsl, err := s.Location(ctx, b)
	if err != nil {
		return nil, err
	}
	return s.Open(ctx, bsl)
}

// Call runs one storage call (or a few small ones) bounded by the storage timeout.
func (s Stores) Call(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := s.Bounded(ctx)
	defer cancel()
	return f(ctx)
}

// DeleteObjects deletes the listed objects of a backup but those keep names (nil keeps none):
// the metadata first, since without it the backup is not restorable whatever else is left, and
// each call bounded. It returns how many it deleted.
func (s Stores) DeleteObjects(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys, objects []string, keep func(key string) bool) (int, error) {
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
		if err := s.Call(ctx, func(ctx context.Context) error { return store.Delete(ctx, key) }); err != nil {
			return removed, fmt.Errorf("deleting %s: %w", key, err)
		}
		removed++
	}
	return removed, nil
}

// OpenForDownload opens an object of a location in the operator's namespace for the download
// server, which serves every location's downloads (DESIGN.md section 21). The server has verified the signature: the location and key are the ones
// this manager signed. Anything that is not there (location, object, a key the store refuses)
// is download.ErrNotFound.
func (s Stores) OpenForDownload(ctx context.Context, locationName, key string) (io.ReadCloser, error) {
	var bsl cairnv1.BackupStorageLocation
	err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: locationName}, &bsl)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("storage location %s: %w", locationName, download.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	store, err := s.Open(ctx, &bsl)
	if err != nil {
		return nil, err
	}
	rc, err := store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrInvalidKey) {
		return nil, fmt.Errorf("%s: %w", key, download.ErrNotFound)
	}
	return rc, err
}
