package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Default bounds of the backoff between attempts to remove a backup's data (deletion, and the
// cleanup of a cancelled backup).
const (
	DefaultRetryBackoffMin = 10 * time.Second
	DefaultRetryBackoffMax = time.Minute
)

// backoffDelay is the wait after the given number of failed attempts (1 or more): min, doubled
// with every further failure, never more than max.
func backoffDelay(failures int, minDelay, maxDelay time.Duration) time.Duration {
	d := minDelay
	for i := 1; i < failures && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

// retryBackoff remembers, per backup, how often an attempt failed and when the next may run.
// It lives in memory: after a restart every backup is tried again at once, which is what a
// restart should do. Safe for concurrent use.
type retryBackoff struct {
	clock              clock.PassiveClock
	minDelay, maxDelay time.Duration

	mu       sync.Mutex
	failures map[types.UID]retryState
}

type retryState struct {
	failures int
	next     time.Time
}

func newRetryBackoff(clk clock.PassiveClock, minDelay, maxDelay time.Duration) *retryBackoff {
	return &retryBackoff{clock: clk, minDelay: minDelay, maxDelay: maxDelay, failures: map[types.UID]retryState{}}
}

// wait is how long until the backup may be tried again; 0 means now.
func (b *retryBackoff) wait(uid types.UID) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.failures[uid]
	if !ok {
		return 0
	}
	return max(st.next.Sub(b.clock.Now()), 0)
}

// failed records a failed attempt and returns the number of failures so far and when the next
// attempt may run.
func (b *retryBackoff) failed(uid types.UID) (failures int, next time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.failures[uid]
	st.failures++
	st.next = b.clock.Now().Add(backoffDelay(st.failures, b.minDelay, b.maxDelay))
	b.failures[uid] = st
	return st.failures, st.next
}

// forget drops what is known of a backup once its attempt succeeded.
func (b *retryBackoff) forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.failures, uid)
}
