package blobproxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kopia/kopia/repo/blob"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
)

// Backends opens the real storage of namespace's repository in a storage location. Its
// errors are told to the client as they are: they must say what is wrong for a person. The
// proxy holds what a read returns in memory, so the storage's reads must be bounded, as
// location.KopiaStorage's are (location.MaxBlobSize).
type Backends interface {
	Open(ctx context.Context, location, namespace string) (st blob.Storage, readOnly bool, err error)
}

// LocationBackends opens repositories in the BackupStorageLocations of one namespace (the
// operator's), with location.KopiaStorage.
type LocationBackends struct {
	Reader    client.Reader
	Namespace string
}

// Open implements Backends.
func (b LocationBackends) Open(ctx context.Context, name, namespace string) (blob.Storage, bool, error) {
	var bsl cairnv1.BackupStorageLocation
	err := b.Reader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, &bsl)
	if apierrors.IsNotFound(err) {
		return nil, false, fmt.Errorf("storage location %s does not exist in namespace %s", name, b.Namespace)
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading storage location %s: %w", name, err)
	}
	return location.KopiaStorage(ctx, b.Reader, &bsl, namespace)
}

// DefaultBackendTTL is how long an opened storage is reused. Opening reads the location and
// its Secret again, so an edited location or rotated credentials are used within it.
const DefaultBackendTTL = 5 * time.Minute

// backendOpenTimeout bounds opening a storage. The open is shared by every request that needs
// it, so it does not end with the request that started it; each request still stops waiting
// when its own context ends.
const backendOpenTimeout = time.Minute

// backendCloseTimeout bounds closing a storage that is no longer used.
const backendCloseTimeout = 30 * time.Second

// backendCache keeps each repository's opened storage for a while and closes it once it is
// both stale and unused. Failed opens are not kept: the next request tries again.
type backendCache struct {
	backends Backends
	ttl      time.Duration
	clock    clock.PassiveClock

	mu      sync.Mutex
	entries map[string]*backendEntry
}

type backendEntry struct {
	ready    chan struct{} // closed when the open ended
	st       blob.Storage
	readOnly bool
	err      error
	opened   time.Time
	users    int
	stale    bool // out of the map: closed when the last user is done
}

func newBackendCache(b Backends, ttl time.Duration, clk clock.PassiveClock) *backendCache {
	return &backendCache{backends: b, ttl: ttl, clock: clk, entries: map[string]*backendEntry{}}
}

// expired reports whether a storage opened at opened must no longer be handed out at now.
func expired(opened, now time.Time, ttl time.Duration) bool { return now.Sub(opened) >= ttl }

// acquire returns the storage of (loc, ns) and a release to call when the caller is done
// with it.
func (c *backendCache) acquire(ctx context.Context, loc, ns string) (blob.Storage, bool, func(), error) {
	key := RepositoryKey(loc, ns)
	c.mu.Lock()
	c.sweep()
	e := c.entries[key]
	if e == nil {
		e = &backendEntry{ready: make(chan struct{})}
		c.entries[key] = e
		go c.open(ctx, key, e, loc, ns)
	}
	e.users++
	c.mu.Unlock()

	release := func() { c.release(e) }
	select {
	case <-ctx.Done():
		release()
		return nil, false, nil, context.Cause(ctx)
	case <-e.ready:
	}
	if e.err != nil {
		release()
		return nil, false, nil, e.err
	}
	return e.st, e.readOnly, sync.OnceFunc(release), nil
}

func (c *backendCache) open(ctx context.Context, key string, e *backendEntry, loc, ns string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backendOpenTimeout)
	defer cancel()
	st, ro, err := c.backends.Open(ctx, loc, ns)
	if err == nil && st == nil {
		err = errors.New("the storage location has no storage")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e.st, e.readOnly, e.err, e.opened = st, ro, err, c.clock.Now()
	if err != nil && c.entries[key] == e {
		delete(c.entries, key)
	}
	close(e.ready)
}

// sweep retires the storages opened longer than the TTL ago. c.mu is held.
func (c *backendCache) sweep() {
	now := c.clock.Now()
	for key, e := range c.entries {
		select {
		case <-e.ready:
		default:
			continue
		}
		if e.err == nil && expired(e.opened, now, c.ttl) {
			c.retire(key, e)
		}
	}
}

// retire takes e out of the map and closes it if nobody uses it. c.mu is held.
func (c *backendCache) retire(key string, e *backendEntry) {
	delete(c.entries, key)
	e.stale = true
	if e.users == 0 {
		go closeStorage(e.st)
	}
}

func (c *backendCache) release(e *backendEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.users--
	if e.stale && e.users == 0 && e.st != nil {
		go closeStorage(e.st)
	}
}

// closeAll retires every storage.
func (c *backendCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, e := range c.entries {
		select {
		case <-e.ready:
			if e.err == nil {
				c.retire(key, e)
			}
		default:
		}
	}
}

func closeStorage(st blob.Storage) {
	if st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), backendCloseTimeout)
	defer cancel()
	_ = st.Close(ctx)
}
