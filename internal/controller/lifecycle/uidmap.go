package lifecycle

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// UIDMap is what a reconciler remembers of backups in memory between reconciles, keyed by
// backup UID; the zero value is empty and ready. After a restart it is empty, which is itself
// information (a deletion with no entry was interrupted). Safe for concurrent use.
type UIDMap[V any] struct {
	mu sync.Mutex
	m  map[types.UID]V
}

func (u *UIDMap[V]) Get(uid types.UID) (V, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	v, ok := u.m[uid]
	return v, ok
}

func (u *UIDMap[V]) Set(uid types.UID, v V) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[types.UID]V{}
	}
	u.m[uid] = v
}

// Take returns the entry and removes it.
func (u *UIDMap[V]) Take(uid types.UID) (V, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	v, ok := u.m[uid]
	delete(u.m, uid)
	return v, ok
}

func (u *UIDMap[V]) Forget(uid types.UID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.m, uid)
}

// Update changes the entry with fn only if there is one, and reports whether it did: work
// that outlives a reconcile reports through it, so that an entry forgotten meanwhile (its
// object is gone) stays forgotten.
func (u *UIDMap[V]) Update(uid types.UID, fn func(*V)) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	v, ok := u.m[uid]
	if !ok {
		return false
	}
	fn(&v)
	u.m[uid] = v
	return true
}

// Len is the number of entries.
func (u *UIDMap[V]) Len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.m)
}
