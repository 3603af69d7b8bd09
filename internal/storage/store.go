// Package storage keeps backup data in object stores: the ObjectStore interface, its
// filesystem and s3 providers, the layout of a backup's objects, and the metadata object that
// commits a backup (DESIGN.md section 5). It knows nothing of Kubernetes objects beyond the
// namespace and name that make a key.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// ObjectStore is a flat namespace of objects addressed by slash-separated keys.
type ObjectStore interface {
	// Put streams r into the object at key. The object appears under key only once it is
	// complete: a failed or interrupted Put never leaves a partial object there.
	Put(ctx context.Context, key string, r io.Reader) error
	// Get opens the object at key; ErrNotFound when there is none.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns the keys that start with prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes the object at key; deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// Exists reports whether there is an object at key.
	Exists(ctx context.Context, key string) (bool, error)
}

// Lister is a store that hands out the keys under a prefix as it lists them, a page at a time,
// instead of all at once: ListCommitted uses it, so that a location holding millions of objects
// costs memory for the keys kept, not for every key listed. Both providers are Listers.
type Lister interface {
	// ListFunc calls fn with each key that starts with prefix, in the order the store lists
	// them (not necessarily sorted). An error from fn ends the listing and is returned as is.
	ListFunc(ctx context.Context, prefix string, fn func(key string) error) error
}

// listEach calls fn with each key under prefix: through s's ListFunc when s is a Lister, else
// from one List call (a store wrapped by something that is not a Lister, as tests wrap them).
func listEach(ctx context.Context, s ObjectStore, prefix string, fn func(key string) error) error {
	if l, ok := s.(Lister); ok {
		return l.ListFunc(ctx, prefix, fn)
	}
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, key := range keys {
		if err := fn(key); err != nil {
			return err
		}
	}
	return nil
}

// listAll is every key under prefix that l's ListFunc lists: the List of a store whose
// listing is paged.
func listAll(ctx context.Context, l Lister, prefix string) ([]string, error) {
	var keys []string
	if err := l.ListFunc(ctx, prefix, func(key string) error { keys = append(keys, key); return nil }); err != nil {
		return nil, err
	}
	return keys, nil
}

var (
	// ErrNotFound is returned (wrapped) by Get for a missing object.
	ErrNotFound = errors.New("object not found")
	// ErrReadOnly is returned (wrapped) by every write to a ReadOnly location.
	ErrReadOnly = errors.New("the storage location is read-only")
	// ErrInvalidKey is returned (wrapped) for a key that is empty, absolute or climbs out with "..".
	ErrInvalidKey = errors.New("invalid object key")
)

// checkKey rejects keys that are empty, absolute, not clean, or climb out with "..", so that no
// key can reach outside a location.
func checkKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || path.Clean(key) != key || key == ".." ||
		strings.HasPrefix(key, "../") || strings.Contains(key, "/../") || strings.HasSuffix(key, "/..") {
		return fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	return nil
}

// ReadOnly wraps a store so that every Put and Delete fails with ErrReadOnly.
func ReadOnly(s ObjectStore) ObjectStore { return readOnlyStore{s} }

type readOnlyStore struct{ ObjectStore }

func (readOnlyStore) Put(_ context.Context, key string, _ io.Reader) error {
	return fmt.Errorf("writing %s: %w", key, ErrReadOnly)
}

func (readOnlyStore) Delete(_ context.Context, key string) error {
	return fmt.Errorf("deleting %s: %w", key, ErrReadOnly)
}

// ListFunc implements Lister: a read-only store lists as the store it wraps does.
func (r readOnlyStore) ListFunc(ctx context.Context, prefix string, fn func(key string) error) error {
	return listEach(ctx, r.ObjectStore, prefix, fn)
}
