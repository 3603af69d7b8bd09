package deletion

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestDeletionSlotsCapConcurrentDeletions(t *testing.T) {
	var mu sync.Mutex
	running, most, done := 0, 0, 0
	release := make(chan struct{})
	entered := make(chan struct{}, 10)
	finished := make(chan struct{}, 10)
	s := &deletionSlots{limit: 2, run: func(context.Context, *cairnv1.Backup) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		entered <- struct{}{}
		<-release
		mu.Lock()
		running--
		done++
		mu.Unlock()
		finished <- struct{}{}
	}}
	started := 0
	for i := range 6 {
		b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: types.UID(rune('a' + i))}}
		if s.submit(context.Background(), b) {
			started++
		}
	}
	if started != 2 {
		t.Errorf("started at once = %d, want 2 (the others wait in line, without a goroutine)", started)
	}
	for range 2 {
		<-entered // both slots busy before anything ends
	}
	close(release)
	for range 6 {
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Fatal("not every deletion ran")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 2 || done != 6 {
		t.Errorf("at most %d at once, %d done; want 2 and 6", most, done)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != 0 || len(s.waiting) != 0 {
		t.Errorf("slots left running %d, waiting %d", s.running, len(s.waiting))
	}
}

func TestDeletionSlotsWithdraw(t *testing.T) {
	release := make(chan struct{})
	ran := make(chan types.UID, 3)
	s := &deletionSlots{limit: 1, run: func(_ context.Context, b *cairnv1.Backup) {
		ran <- b.UID
		<-release
	}}
	for _, uid := range []types.UID{"a", "b", "c"} {
		s.submit(context.Background(), &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{UID: uid}})
	}
	if got := <-ran; got != "a" {
		t.Fatalf("first to run: %s", got)
	}
	if s.withdraw("a") {
		t.Error("withdrew a running deletion")
	}
	if !s.withdraw("b") || s.withdraw("b") {
		t.Error("a waiting deletion is withdrawn once")
	}
	close(release)
	if got := <-ran; got != "c" {
		t.Errorf("after a: %s, want c (b was withdrawn)", got)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		idle := s.running == 0
		s.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot was never freed")
		}
	}
	if len(ran) != 0 {
		t.Errorf("%s ran although withdrawn", <-ran)
	}
}
