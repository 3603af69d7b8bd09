package location

import (
	"sync"

	"k8s.io/utils/lru"

	"github.com/cairn-backup/cairn/internal/storage"
)

// s3ClientCacheSize bounds how many S3 clients are kept: a handful of locations, each with its
// current and perhaps its previous credentials.
const s3ClientCacheSize = 64

// s3ClientCache keeps one S3 client per configuration. A configuration is everything a client
// is made from — the location's bucket, endpoint, region and options, and the credentials read
// from its Secret — so a location keeps its client (and its connections) from one storage call
// to the next, and an edited location or a rotated Secret gets a new one at its next call. The
// least recently used clients beyond s3ClientCacheSize are dropped. Safe for concurrent use.
type s3ClientCache struct {
	mu      sync.Mutex
	clients *lru.Cache
}

var s3Clients = &s3ClientCache{clients: newLRU(s3ClientCacheSize)}

func newLRU(size int) *lru.Cache { return lru.New(size) }

// get returns the client for cfg, making it on first use.
func (c *s3ClientCache) get(cfg storage.S3Config) (*storage.S3, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s3, ok := c.clients.Get(cfg); ok {
		return s3.(*storage.S3), nil
	}
	s3, err := storage.NewS3(cfg)
	if err != nil {
		return nil, err
	}
	c.clients.Add(cfg, s3)
	return s3, nil
}
