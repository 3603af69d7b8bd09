package lifecycle

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// Default bounds of the backoff between attempts to remove a backup's data (deletion, and the
// cleanup of a cancelled backup).
const (
	DefaultRetryBackoffMin = 10 * time.Second
	DefaultRetryBackoffMax = time.Minute
)

// RetryBackoff is the one way a reconciler spaces out the attempts it schedules itself (a
// deletion, the cleanup of a cancelled backup): per backup, the wait after a failure starts at
// min and doubles with every further failure up to max. The delays are client-go's
// flowcontrol.Backoff on the injected clock; this type adds what a reconciler needs on top: how
// long until the next attempt, and how many attempts failed. A backup that has not failed for
// twice max starts again from min (flowcontrol's rule) and its entry is dropped, so memory holds
// only the backups that failed recently, however many were ever retried. It lives in memory:
// after a restart every backup is tried again at once, which is what a restart should do. Safe
// for concurrent use.
type RetryBackoff struct {
	clock    clock.Clock
	maxDelay time.Duration

	mu      sync.Mutex
	backoff *flowcontrol.Backoff
	entries map[types.UID]retryState
}

// retryState is what RetryBackoff keeps of one backup besides flowcontrol's delay.
type retryState struct {
	failures   int
	lastFailed time.Time
	next       time.Time
}

func NewRetryBackoff(clk clock.Clock, minDelay, maxDelay time.Duration) *RetryBackoff {
	return &RetryBackoff{
		clock:    clk,
		maxDelay: maxDelay,
		backoff:  flowcontrol.NewFakeBackOff(minDelay, maxDelay, clk),
		entries:  map[types.UID]retryState{},
	}
}

// Wait is how long until the backup may be tried again; 0 means now.
func (b *RetryBackoff) Wait(uid types.UID) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.entries[uid]
	if !ok {
		return 0
	}
	return max(st.next.Sub(b.clock.Now()), 0)
}

// Failed records a failed attempt and returns the number of failures so far and when the next
// attempt may run.
func (b *RetryBackoff) Failed(uid types.UID) (failures int, next time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	b.dropExpired(now)
	b.backoff.Next(string(uid), now)
	st := b.entries[uid]
	st.failures++
	st.lastFailed = now
	st.next = now.Add(b.backoff.Get(string(uid)))
	b.entries[uid] = st
	return st.failures, st.next
}

// Forget drops what is known of a backup once its attempt succeeded or the backup is gone.
func (b *RetryBackoff) Forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backoff.DeleteEntry(string(uid))
	delete(b.entries, uid)
}

// Tracked is how many backups the backoff remembers.
func (b *RetryBackoff) Tracked() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.entries)
}

// dropExpired forgets the backups that have not failed for twice max: flowcontrol would start
// them again from min anyway, and a backup that stopped failing without being forgotten (its
// object deleted meanwhile) must not stay in memory. The caller holds mu.
func (b *RetryBackoff) dropExpired(now time.Time) {
	b.backoff.GC()
	for uid, st := range b.entries {
		if now.Sub(st.lastFailed) > 2*b.maxDelay {
			delete(b.entries, uid)
		}
	}
}
