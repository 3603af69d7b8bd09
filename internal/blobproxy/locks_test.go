package blobproxy

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

var errConnRefused = syscall.ECONNREFUSED

func clocktesting(t time.Time) *testingclock.FakeClock { return testingclock.NewFakeClock(t) }

// maintain starts Maintain in the background; the channel gets its outcome.
func maintain(ctx context.Context, l *Locks) <-chan func() {
	const key = "default/shop"
	got := make(chan func(), 1)
	go func() {
		release, err := l.Maintain(ctx, key)
		if err != nil {
			close(got)
			return
		}
		got <- release
	}()
	return got
}

func waiting(t *testing.T, got <-chan func()) {
	t.Helper()
	select {
	case r, ok := <-got:
		if ok {
			r()
		}
		t.Fatal("maintenance started while the repository was in use")
	case <-time.After(50 * time.Millisecond):
	}
}

func started(t *testing.T, got <-chan func()) func() {
	t.Helper()
	select {
	case r, ok := <-got:
		if !ok {
			t.Fatal("Maintain failed")
		}
		return r
	case <-time.After(2 * time.Second):
		t.Fatal("maintenance did not start")
	}
	return nil
}

func TestMaintainWaitsForSessionsAndHoldsTheRepository(t *testing.T) {
	fc := clocktesting(time.Now())
	l := NewLocks(time.Minute, fc)
	const key = "default/shop"
	ctx := context.Background()

	s, err := l.Open(key)
	if err != nil {
		t.Fatal(err)
	}
	got := maintain(ctx, l)
	waiting(t, got)
	// Sessions are still admitted while maintenance waits: backups go first.
	s2, err := l.Open(key)
	if err != nil {
		t.Fatalf("Open while maintenance waits: %v", err)
	}
	l.Close(key, s.ID)
	waiting(t, got)
	l.Close(key, s2.ID)
	release := started(t, got)

	// Held: sessions are refused, with a reason that says to come back.
	if _, err := l.Open(key); !errors.Is(err, ErrMaintenanceRunning) {
		t.Errorf("Open during maintenance = %v", err)
	}
	// Only this repository is held.
	if _, err := l.Open("default/other"); err != nil {
		t.Errorf("another repository: %v", err)
	}
	// A second maintenance waits for the first.
	second := maintain(ctx, l)
	waiting(t, second)
	release()
	release() // idempotent
	started(t, second)()
	if _, err := l.Open(key); err != nil {
		t.Errorf("Open after maintenance: %v", err)
	}
}

func TestExpiredSessionNoLongerBlocks(t *testing.T) {
	fc := clocktesting(time.Now())
	l := NewLocks(time.Minute, fc)
	const key = "default/shop"

	s, _ := l.Open(key)
	fc.Step(40 * time.Second)
	if err := l.Refresh(key, s.ID); err != nil {
		t.Fatal(err)
	}
	got := maintain(context.Background(), l)
	eventually(t, "Maintain waits on the session's expiry", fc.HasWaiters)
	fc.Step(59 * time.Second) // the refresh gave it 60 more seconds
	waiting(t, got)
	eventually(t, "Maintain waits on the session's expiry", fc.HasWaiters)
	fc.Step(time.Second)
	release := started(t, got)
	defer release()

	// The expired session is gone for good: no request, no refresh.
	if err := l.Refresh(key, s.ID); !errors.Is(err, ErrNoSession) {
		t.Errorf("Refresh of an expired session = %v", err)
	}
	if _, err := l.begin(key, s.ID); !errors.Is(err, ErrNoSession) {
		t.Errorf("a request of an expired session = %v", err)
	}
}

func TestMaintainWaitsForRequestsInFlight(t *testing.T) {
	l := NewLocks(time.Minute, clocktesting(time.Now()))
	const key = "default/shop"
	s, _ := l.Open(key)
	done, err := l.begin(key, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.begin(key, "unknown"); !errors.Is(err, ErrNoSession) {
		t.Errorf("a request without a session = %v", err)
	}
	l.Close(key, s.ID)
	got := maintain(context.Background(), l)
	waiting(t, got)
	done()
	started(t, got)()
}

func TestMaintainIsBoundedByItsContext(t *testing.T) {
	l := NewLocks(time.Minute, clocktesting(time.Now()))
	const key = "default/shop"
	if _, err := l.Open(key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Maintain(ctx, key); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Maintain = %v", err)
	}
}

func TestMaintainable(t *testing.T) {
	for _, tt := range []struct {
		sessions, inFlight int
		maintaining, want  bool
	}{
		{0, 0, false, true}, {1, 0, false, false}, {0, 1, false, false}, {0, 0, true, false},
	} {
		if got := maintainable(tt.sessions, tt.inFlight, tt.maintaining); got != tt.want {
			t.Errorf("maintainable(%d, %d, %v) = %v", tt.sessions, tt.inFlight, tt.maintaining, got)
		}
	}
}
