package controller

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
