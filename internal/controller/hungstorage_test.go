package controller_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
)

// hangingStore is a storage service that stops answering: while hung, every call — reads and
// writes alike — waits until it is released or its context ends, as a stopped S3 server does.
// With onlyPuts, only the Puts hang.
type hangingStore struct {
	storage.ObjectStore
	mu       sync.Mutex
	release  chan struct{}
	onlyPuts bool
	waiting  int
}

func (h *hangingStore) hang(onlyPuts bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.release == nil {
		h.release = make(chan struct{})
	}
	h.onlyPuts = onlyPuts
}

func (h *hangingStore) answer() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.release != nil {
		close(h.release)
		h.release = nil
	}
}

func (h *hangingStore) waitingCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}

func (h *hangingStore) wait(ctx context.Context, put bool) error {
	h.mu.Lock()
	release, onlyPuts := h.release, h.onlyPuts
	if release == nil || (onlyPuts && !put) {
		h.mu.Unlock()
		return nil
	}
	h.waiting++
	h.mu.Unlock()
	defer func() { h.mu.Lock(); h.waiting--; h.mu.Unlock() }()
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *hangingStore) Put(ctx context.Context, key string, r io.Reader) error {
	if err := h.wait(ctx, true); err != nil {
		return err
	}
	return h.ObjectStore.Put(ctx, key, r)
}

func (h *hangingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := h.wait(ctx, false); err != nil {
		return nil, err
	}
	return h.ObjectStore.Get(ctx, key)
}

func (h *hangingStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := h.wait(ctx, false); err != nil {
		return nil, err
	}
	return h.ObjectStore.List(ctx, prefix)
}

func (h *hangingStore) Exists(ctx context.Context, key string) (bool, error) {
	if err := h.wait(ctx, false); err != nil {
		return false, err
	}
	return h.ObjectStore.Exists(ctx, key)
}

func (h *hangingStore) Delete(ctx context.Context, key string) error {
	if err := h.wait(ctx, false); err != nil {
		return err
	}
	return h.ObjectStore.Delete(ctx, key)
}

var _ = Describe("A storage service that stops answering", Ordered, func() {
	var hung *hangingStore

	BeforeAll(func() {
		fs, loc := createDefaultLocation("hung-default")
		hung = &hangingStore{ObjectStore: fs}
		ensureNamespace("hung-data")
		for _, name := range []string{"a", "b", "c"} {
			createObject(configMap("hung-data", name, nil))
		}
		// A storage timeout far longer than the test: anything that waited on the hung
		// storage before writing the cancel would hold the backup InProgress for an hour.
		stop := startManager(controller.Config{ConcurrentBackups: 1, ItemBlockWorkerCount: 2, StorageTimeout: time.Hour,
			RetryBackoffMin: 100 * time.Millisecond, RetryBackoffMax: 500 * time.Millisecond,
			WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				if bsl.Name == "hung-default" {
					return hung
				}
				return s
			}})
		DeferCleanup(func() { stop() })
		DeferCleanup(deleteAllBackups)
		DeferCleanup(hung.answer)
		eventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
	})

	It("cannot hold a cancel: the backup reaches FinalizingCancelled while every storage call hangs, and is cleaned up once storage answers", func() {
		hung.hang(true) // the archive upload hangs, so the backup stays InProgress
		createBackup(operatorNamespace, "hung-cancel", cairnv1.BackupSpec{IncludedNamespaces: []string{"hung-data"}})
		waitPhase("hung-cancel", cairnv1.BackupPhaseInProgress)
		Eventually(hung.waitingCalls).Should(BeNumerically(">=", 1))
		hung.hang(false) // now reads hang too: the whole service is gone

		cancelBackup("hung-cancel")
		waitPhase("hung-cancel", cairnv1.BackupPhaseFinalizingCancelled)
		// The cleanup waits for storage; it never claims to be done meanwhile.
		Consistently(func() cairnv1.BackupPhase { return getBackup(operatorNamespace, "hung-cancel").Status.Phase }).
			WithTimeout(time.Second).Should(Equal(cairnv1.BackupPhaseFinalizingCancelled))

		hung.answer()
		expectCancelled(hung.ObjectStore, "hung-cancel")
		// The run's own log lines survived the finalizer's append, and the other way round.
		log := readLog(hung.ObjectStore, storage.Layout{}.Backup(operatorNamespace, "hung-cancel"))
		Expect(log).To(ContainSubstring("Backup cancelled while running"))
		Expect(strings.Count(log, cairnv1.FailureReasonCancelled)).To(BeNumerically(">=", 1))
	})
})
