package lifecycle

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestRetryBackoff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := NewRetryBackoff(clk, 10*time.Second, time.Minute)
	if w := b.Wait("a"); w != 0 {
		t.Fatalf("an unknown backup waits %s", w)
	}
	n, next := b.Failed("a")
	if n != 1 || !next.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("first failure: %d, %s", n, next)
	}
	if w := b.Wait("a"); w != 10*time.Second {
		t.Fatalf("wait after the first failure: %s", w)
	}
	if w := b.Wait("b"); w != 0 {
		t.Fatalf("another backup waits %s", w)
	}
	clk.Step(4 * time.Second)
	if w := b.Wait("a"); w != 6*time.Second {
		t.Fatalf("wait 4s later: %s", w)
	}
	clk.Step(6 * time.Second)
	if w := b.Wait("a"); w != 0 {
		t.Fatalf("wait when due: %s", w)
	}
	// Each failure when due doubles the wait, up to the maximum.
	for i, want := range []time.Duration{20 * time.Second, 40 * time.Second, time.Minute, time.Minute} {
		n, next = b.Failed("a")
		if n != i+2 || !next.Equal(clk.Now().Add(want)) {
			t.Fatalf("failure %d: %d, next in %s; want in %s", i+2, n, next.Sub(clk.Now()), want)
		}
		clk.Step(want)
	}
	b.Forget("a")
	if w := b.Wait("a"); w != 0 || b.Tracked() != 0 {
		t.Fatalf("after forget: wait %s, %d tracked", w, b.Tracked())
	}
	if n, next = b.Failed("a"); n != 1 || !next.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("after forget the backoff starts again: %d, next in %s", n, next.Sub(clk.Now()))
	}
}

// TestRetryBackoffExpires: a backup that has not failed for twice the maximum starts again from
// the minimum, and backups that stopped failing without being forgotten (their object was
// deleted meanwhile) are dropped from memory.
func TestRetryBackoffExpires(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := NewRetryBackoff(clk, 10*time.Second, time.Minute)
	for _, uid := range []string{"a", "b", "c"} {
		b.Failed(types.UID(uid))
		b.Failed(types.UID(uid))
	}
	if b.Tracked() != 3 {
		t.Fatalf("%d tracked, want 3", b.Tracked())
	}
	clk.Step(2*time.Minute + time.Second)
	n, next := b.Failed("a")
	if n != 1 || !next.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("after a quiet spell: failure %d, next in %s; want 1, 10s", n, next.Sub(clk.Now()))
	}
	if b.Tracked() != 1 {
		t.Fatalf("%d tracked after the others went quiet, want 1", b.Tracked())
	}
}
