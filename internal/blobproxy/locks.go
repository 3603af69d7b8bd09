package blobproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultSessionTTL is how long a session lives without a refresh. Clients refresh every
// third of it, so two lost refreshes are forgiven, and a killed agent holds maintenance back
// for at most this long.
const DefaultSessionTTL = 60 * time.Second

// maintenanceRetryAfter is the Retry-After of a session refused during maintenance.
const maintenanceRetryAfter = 30 * time.Second

// sessionIDBytes is the size of a session ID's random part.
const sessionIDBytes = 16

// Locks are the sessions of each repository (by RepositoryKey) and its maintenance lock; see
// the package comment for why. Safe for concurrent use; share one between the Server and the
// manager's own users of repositories.
type Locks struct {
	ttl   time.Duration
	clock clock.Clock

	mu    sync.Mutex
	repos map[string]*repoState
}

// repoState is one repository's sessions, requests in flight and maintenance.
type repoState struct {
	sessions    map[string]time.Time // session ID → expiry
	inFlight    int
	maintaining bool
	// changed is closed (and replaced) when a session ends, the last request in flight
	// ends, or maintenance is released: what a waiting Maintain waits for.
	changed chan struct{}
}

// Session is an open session.
type Session struct {
	ID  string
	TTL time.Duration
}

// NewLocks returns Locks whose sessions live ttl without a refresh (DefaultSessionTTL when
// 0), timed by clk (the real clock when nil).
func NewLocks(ttl time.Duration, clk clock.Clock) *Locks {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Locks{ttl: ttl, clock: clk, repos: map[string]*repoState{}}
}

// state is key's repoState, with its expired sessions dropped. l.mu is held.
func (l *Locks) state(key string) *repoState {
	r := l.repos[key]
	if r == nil {
		r = &repoState{sessions: map[string]time.Time{}, changed: make(chan struct{})}
		l.repos[key] = r
	}
	now := l.clock.Now()
	dropped := false
	for id, expiry := range r.sessions {
		if !live(expiry, now) {
			delete(r.sessions, id)
			dropped = true
		}
	}
	if dropped {
		r.signal()
	}
	return r
}

func (r *repoState) signal() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// live reports whether a session expiring at expiry is alive at now.
func live(expiry, now time.Time) bool { return now.Before(expiry) }

// maintainable reports whether maintenance may start: nobody else can touch the repository.
func maintainable(sessions, inFlight int, maintaining bool) bool {
	return sessions == 0 && inFlight == 0 && !maintaining
}

// earliest is the first of the expiries, zero when there are none.
func earliest(expiries map[string]time.Time) time.Time {
	var first time.Time
	for _, e := range expiries {
		if first.IsZero() || e.Before(first) {
			first = e
		}
	}
	return first
}

// Open opens a session of the repository key. While its maintenance runs, the error wraps
// ErrMaintenanceRunning.
func (l *Locks) Open(key string) (Session, error) {
	b := make([]byte, sessionIDBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	id := hex.EncodeToString(b)

	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.state(key)
	if r.maintaining {
		return Session{}, fmt.Errorf("%w on %s: try again later", ErrMaintenanceRunning, key)
	}
	r.sessions[id] = l.clock.Now().Add(l.ttl)
	return Session{ID: id, TTL: l.ttl}, nil
}

// isSessionID reports whether s has the form of the IDs Open makes.
func isSessionID(s string) bool {
	if len(s) != 2*sessionIDBytes {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// Refresh extends a live session by the TTL. An expired or unknown session is not revived:
// the error wraps ErrNoSession.
func (l *Locks) Refresh(key, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.state(key)
	if _, ok := r.sessions[id]; !ok {
		return noSession(key)
	}
	r.sessions[id] = l.clock.Now().Add(l.ttl)
	return nil
}

func noSession(key string) error {
	return fmt.Errorf("%w of repository %s: it expired or was never opened (a session that lapsed is not renewed; open the repository again)", ErrNoSession, key)
}

// Close ends a session; an unknown one is ignored.
func (l *Locks) Close(key, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.state(key)
	if _, ok := r.sessions[id]; ok {
		delete(r.sessions, id)
		r.signal()
	}
}

// begin admits one request of session id to repository key; done must be called when the
// request has stopped touching the storage (not merely when its client stopped waiting).
func (l *Locks) begin(key, id string) (done func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.state(key)
	if _, ok := r.sessions[id]; !ok {
		return nil, noSession(key)
	}
	r.inFlight++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			r.inFlight--
			if r.inFlight == 0 {
				r.signal()
			}
		})
	}, nil
}

// Maintain waits until repository key has no live session and no request in flight, then
// holds it: sessions are refused until release is called. Waiting ends with ctx (then err is
// ctx's). New sessions are admitted while it waits: backups go first, and a maintenance that
// cannot start within its ctx tries again at its next run.
func (l *Locks) Maintain(ctx context.Context, key string) (release func(), err error) {
	for {
		l.mu.Lock()
		r := l.state(key)
		if maintainable(len(r.sessions), r.inFlight, r.maintaining) {
			r.maintaining = true
			l.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					l.mu.Lock()
					defer l.mu.Unlock()
					r.maintaining = false
					r.signal()
				})
			}, nil
		}
		changed := r.changed
		var expiry <-chan time.Time
		var timer clock.Timer
		if first := earliest(r.sessions); !first.IsZero() {
			timer = l.clock.NewTimer(first.Sub(l.clock.Now()))
			expiry = timer.C()
		}
		sessions, inFlight := len(r.sessions), r.inFlight
		l.mu.Unlock()

		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil, fmt.Errorf("waiting for repository %s to be free (%d sessions, %d requests in flight): %w",
				key, sessions, inFlight, context.Cause(ctx))
		case <-changed:
		case <-expiry:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}
