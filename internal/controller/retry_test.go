package controller

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestBackoffDelay(t *testing.T) {
	tests := []struct {
		failures int
		want     time.Duration
	}{
		{1, 10 * time.Second},
		{2, 20 * time.Second},
		{3, 40 * time.Second},
		{4, time.Minute},
		{5, time.Minute},
		{100, time.Minute},
	}
	for _, tt := range tests {
		if got := backoffDelay(tt.failures, 10*time.Second, time.Minute); got != tt.want {
			t.Errorf("backoffDelay(%d) = %s, want %s", tt.failures, got, tt.want)
		}
	}
	if got := backoffDelay(3, time.Second, time.Second); got != time.Second {
		t.Errorf("equal bounds: got %s", got)
	}
}

func TestRetryBackoff(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newRetryBackoff(clk, 10*time.Second, time.Minute)
	if w := b.wait("a"); w != 0 {
		t.Fatalf("an unknown backup waits %s", w)
	}
	n, next := b.failed("a")
	if n != 1 || !next.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("first failure: %d, %s", n, next)
	}
	if w := b.wait("a"); w != 10*time.Second {
		t.Fatalf("wait after the first failure: %s", w)
	}
	if w := b.wait("b"); w != 0 {
		t.Fatalf("another backup waits %s", w)
	}
	clk.SetTime(clk.Now().Add(4 * time.Second))
	if w := b.wait("a"); w != 6*time.Second {
		t.Fatalf("wait 4s later: %s", w)
	}
	clk.SetTime(clk.Now().Add(6 * time.Second))
	if w := b.wait("a"); w != 0 {
		t.Fatalf("wait when due: %s", w)
	}
	n, next = b.failed("a")
	if n != 2 || !next.Equal(clk.Now().Add(20*time.Second)) {
		t.Fatalf("second failure: %d, %s", n, next)
	}
	b.failed("a")
	n, next = b.failed("a")
	if n != 4 || !next.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("fourth failure: %d, %s (capped at 1m)", n, next)
	}
	b.forget("a")
	if w := b.wait("a"); w != 0 {
		t.Fatalf("after forget: %s", w)
	}
}
