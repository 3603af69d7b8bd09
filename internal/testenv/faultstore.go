package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/cairn-backup/cairn/internal/storage"
)

// FaultStore wraps an ObjectStore and injects the faults a test asks for: every operation
// failing (storage unreachable), Puts of some keys blocking until released, and Deletes
// failing a number of times or hanging until released. Blocked calls end when their context
// does, as a real store's would. Safe for concurrent use.
type FaultStore struct {
	storage.ObjectStore

	mu           sync.Mutex
	down         error
	blockPut     string // Puts of keys containing this block; "" blocks none
	putRelease   chan struct{}
	blockedPuts  int
	deleteFails  int
	deleteErr    error
	deleteHang   chan struct{}
	hangingCalls int
	deletes      []string
}

// stalledPutBytes is how much a blocked Put reads before it stalls.
const stalledPutBytes = 64 << 10

// NewFaultStore wraps s with no fault.
func NewFaultStore(s storage.ObjectStore) *FaultStore { return &FaultStore{ObjectStore: s} }

// Down makes every call fail with err until Up.
func (f *FaultStore) Down(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = err
}

// Up ends Down.
func (f *FaultStore) Up() { f.Down(nil) }

// BlockPuts makes Puts of keys that contain substr stall after their first 64 KiB until
// ReleasePuts or their context ends.
func (f *FaultStore) BlockPuts(substr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blockPut, f.putRelease = substr, make(chan struct{})
}

// ReleasePuts lets blocked and later Puts through.
func (f *FaultStore) ReleasePuts() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.putRelease != nil {
		close(f.putRelease)
	}
	f.blockPut, f.putRelease = "", nil
}

// BlockedPuts is how many Puts are blocked now.
func (f *FaultStore) BlockedPuts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blockedPuts
}

// FailDeletes makes the next n Deletes fail with err.
func (f *FaultStore) FailDeletes(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleteFails, f.deleteErr = n, err
}

// HangDeletes makes Deletes block until ReleaseDeletes or their context ends.
func (f *FaultStore) HangDeletes() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleteHang = make(chan struct{})
}

// ReleaseDeletes lets hanging and later Deletes through.
func (f *FaultStore) ReleaseDeletes() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.deleteHang != nil {
		close(f.deleteHang)
	}
	f.deleteHang = nil
}

// HangingDeletes is how many Deletes hang now.
func (f *FaultStore) HangingDeletes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hangingCalls
}

// Deletes lists the keys of every Delete that reached the wrapped store.
func (f *FaultStore) Deletes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deletes...)
}

func (f *FaultStore) isDown() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down
}

// Put implements storage.ObjectStore.
func (f *FaultStore) Put(ctx context.Context, key string, r io.Reader) error {
	if err := f.isDown(); err != nil {
		return err
	}
	f.mu.Lock()
	release := f.putRelease
	block := release != nil && strings.Contains(key, f.blockPut)
	if block {
		f.blockedPuts++
	}
	f.mu.Unlock()
	if block {
		defer func() {
			f.mu.Lock()
			f.blockedPuts--
			f.mu.Unlock()
		}()
		// Like a stalled connection: the first bytes go into buffers, then nothing moves.
		var head bytes.Buffer
		if _, err := io.CopyN(&head, r, stalledPutBytes); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("putting %s: %w", key, err)
		}
		r = io.MultiReader(&head, r)
		select {
		case <-release:
		case <-ctx.Done():
			return fmt.Errorf("putting %s: %w", key, ctx.Err())
		}
	}
	return f.ObjectStore.Put(ctx, key, r)
}

// Get implements storage.ObjectStore.
func (f *FaultStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := f.isDown(); err != nil {
		return nil, err
	}
	return f.ObjectStore.Get(ctx, key)
}

// List implements storage.ObjectStore.
func (f *FaultStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := f.isDown(); err != nil {
		return nil, err
	}
	return f.ObjectStore.List(ctx, prefix)
}

// Exists implements storage.ObjectStore.
func (f *FaultStore) Exists(ctx context.Context, key string) (bool, error) {
	if err := f.isDown(); err != nil {
		return false, err
	}
	return f.ObjectStore.Exists(ctx, key)
}

// Delete implements storage.ObjectStore.
func (f *FaultStore) Delete(ctx context.Context, key string) error {
	if err := f.isDown(); err != nil {
		return err
	}
	f.mu.Lock()
	if f.deleteFails > 0 {
		f.deleteFails--
		err := f.deleteErr
		f.mu.Unlock()
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	hang := f.deleteHang
	if hang != nil {
		f.hangingCalls++
	}
	f.mu.Unlock()
	if hang != nil {
		defer func() {
			f.mu.Lock()
			f.hangingCalls--
			f.mu.Unlock()
		}()
		select {
		case <-hang:
		case <-ctx.Done():
			return fmt.Errorf("deleting %s: %w", key, ctx.Err())
		}
	}
	f.mu.Lock()
	f.deletes = append(f.deletes, key)
	f.mu.Unlock()
	return f.ObjectStore.Delete(ctx, key)
}
