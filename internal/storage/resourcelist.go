package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
)

// MaxResourceListSize bounds a backup's resource list (-resource-list.json.gz) as a reader
// unpacks it: about a million item names, far above a real backup's, so that a file someone
// who can write the bucket put there cannot make the manager's memory grow.
const MaxResourceListSize = 64 << 20

// ErrTooLarge means an object read from storage unpacks to more than its reader accepts.
var ErrTooLarge = errors.New("larger than the reader accepts")

// ReadResourceList reads a backup's resource list: "resource.group" → the "namespace/name" (or
// "name", cluster-scoped) of every item the archive holds.
func ReadResourceList(ctx context.Context, s ObjectStore, key string) (map[string][]string, error) {
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	gz, err := gzip.NewReader(rc)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	defer gz.Close()
	data, err := io.ReadAll(io.LimitReader(gz, MaxResourceListSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	if len(data) > MaxResourceListSize {
		return nil, fmt.Errorf("%s: %w (%d bytes unpacked)", key, ErrTooLarge, MaxResourceListSize)
	}
	var list map[string][]string
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s is not a resource list: %w", key, err)
	}
	return list, nil
}
