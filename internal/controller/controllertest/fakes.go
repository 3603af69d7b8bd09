package controllertest

// Fake stores and backup item actions whose calls the specs steer and count.

import (
	"context"
	"io"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/storage"
)

// HangingStore is a storage service that stops answering: while hung, every call — reads and
// writes alike — waits until it is released or its context ends, as a stopped S3 server does.
// With onlyPuts, only the Puts hang.
type HangingStore struct {
	storage.ObjectStore
	mu       sync.Mutex
	release  chan struct{}
	onlyPuts bool
	waiting  int
}

// AsyncSecretAction starts an (imaginary) async operation for every secret in a namespace
// starting with "ops"; the test decides how each operation goes with SetOperation.
type AsyncSecretAction struct{}

func CancelledOperations() []string {
	AsyncOperations.Lock()
	defer AsyncOperations.Unlock()
	return append([]string(nil), AsyncOperations.Cancelled...)
}

// PoolRecorder records the worker pools the runner starts and stops.
type PoolRecorder struct {
	mu      sync.Mutex
	started []string
	running int
}

func SetOperation(id, state string) {
	AsyncOperations.Lock()
	defer AsyncOperations.Unlock()
	AsyncOperations.State[id] = state
}

func (p *PoolRecorder) Record(backup string, delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if delta > 0 {
		p.started = append(p.started, backup)
	}
	p.running += delta
}

func (p *PoolRecorder) Snapshot() ([]string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.started...), p.running
}

func (h *HangingStore) Hang(onlyPuts bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.release == nil {
		h.release = make(chan struct{})
	}
	h.onlyPuts = onlyPuts
}

func (h *HangingStore) Answer() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.release != nil {
		close(h.release)
		h.release = nil
	}
}

func (h *HangingStore) WaitingCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}

func (h *HangingStore) wait(ctx context.Context, put bool) error {
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

func (h *HangingStore) Put(ctx context.Context, key string, r io.Reader) error {
	if err := h.wait(ctx, true); err != nil {
		return err
	}
	return h.ObjectStore.Put(ctx, key, r)
}

func (h *HangingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := h.wait(ctx, false); err != nil {
		return nil, err
	}
	return h.ObjectStore.Get(ctx, key)
}

func (h *HangingStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := h.wait(ctx, false); err != nil {
		return nil, err
	}
	return h.ObjectStore.List(ctx, prefix)
}

func (h *HangingStore) Exists(ctx context.Context, key string) (bool, error) {
	if err := h.wait(ctx, false); err != nil {
		return false, err
	}
	return h.ObjectStore.Exists(ctx, key)
}

func (h *HangingStore) Delete(ctx context.Context, key string) error {
	if err := h.wait(ctx, false); err != nil {
		return err
	}
	return h.ObjectStore.Delete(ctx, key)
}

var AsyncOperations = struct {
	sync.Mutex
	State     map[string]string // operation ID → "", "done" or an error message
	Cancelled []string
}{State: map[string]string{}}

func (AsyncSecretAction) Name() string { return "test/async-secret" }

func (AsyncSecretAction) AppliesTo() []schema.GroupResource {
	return []schema.GroupResource{{Resource: "secrets"}}
}

func (AsyncSecretAction) Execute(_ context.Context, item *unstructured.Unstructured, _ *cairnv1.Backup) (backup.ExecuteResult, error) {
	res := backup.ExecuteResult{Item: item}
	if strings.HasPrefix(item.GetNamespace(), "ops") {
		res.OperationIDs = []string{"op-" + item.GetNamespace() + "-" + item.GetName()}
		// What the operation makes (think VolumeSnapshotContent) joins the backup when it is done.
		res.PostOperationItems = []backup.ItemID{{GroupResource: schema.GroupResource{Resource: "configmaps"},
			Namespace: item.GetNamespace(), Name: item.GetName() + "-result"}}
	}
	return res, nil
}

func (AsyncSecretAction) Progress(_ context.Context, id string, _ *cairnv1.Backup) (backup.OperationProgress, error) {
	AsyncOperations.Lock()
	defer AsyncOperations.Unlock()
	switch state := AsyncOperations.State[id]; state {
	case "":
		return backup.OperationProgress{NCompleted: 1, NTotal: 2, Description: "copying"}, nil
	case "done":
		return backup.OperationProgress{Completed: true, NCompleted: 2, NTotal: 2}, nil
	default:
		return backup.OperationProgress{Err: state}, nil
	}
}

func (AsyncSecretAction) Cancel(_ context.Context, id string, _ *cairnv1.Backup) error {
	AsyncOperations.Lock()
	defer AsyncOperations.Unlock()
	AsyncOperations.Cancelled = append(AsyncOperations.Cancelled, id)
	return nil
}
