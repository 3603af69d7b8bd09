package operations

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// pollAction answers by operation ID: "done" completed, "running" still running, "hang" hangs
// (Progress and Cancel) until its call's context ends. It records the Cancel calls that
// returned, and whether their context was still live when they were made.
type pollAction struct {
	mu        sync.Mutex
	cancelled []string
	expired   []string
}

func (*pollAction) Name() string                      { return "test/poll" }
func (*pollAction) AppliesTo() []schema.GroupResource { return nil }
func (*pollAction) Execute(context.Context, *unstructured.Unstructured, *cairnv1.Backup) (backup.ExecuteResult, error) {
	return backup.ExecuteResult{}, nil
}
func (*pollAction) Progress(ctx context.Context, id string, _ *cairnv1.Backup) (backup.OperationProgress, error) {
	switch id {
	case "hang":
		<-ctx.Done()
		return backup.OperationProgress{}, ctx.Err()
	case "running":
		return backup.OperationProgress{NCompleted: 1, NTotal: 2}, nil
	}
	return backup.OperationProgress{Completed: true}, nil
}
func (a *pollAction) Cancel(ctx context.Context, id string, _ *cairnv1.Backup) error {
	if id == "hang" {
		<-ctx.Done()
		return ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancelled = append(a.cancelled, id)
	if ctx.Err() != nil {
		a.expired = append(a.expired, id)
	}
	return nil
}

func (a *pollAction) calls() (cancelled, expired []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.cancelled), slices.Clone(a.expired)
}

// storeFaults makes the test's store fail reads or writes while set; puts may fail only a
// number of times.
type storeFaults struct {
	mu       sync.Mutex
	get, put error
	// hangGets makes reads hang until their context ends, as on a store that stopped answering.
	hangGets bool
	// puts is how many more Puts fail with put; negative is every one.
	puts int
}

func (f *storeFaults) set(get, put error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.get, f.put, f.puts = get, put, -1
}

// failPuts makes the next n Puts fail with err.
func (f *storeFaults) failPuts(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.put, f.puts = err, n
}

func (f *storeFaults) getErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.get
}

func (f *storeFaults) putErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.put == nil || f.puts == 0 {
		return nil
	}
	if f.puts > 0 {
		f.puts--
	}
	return f.put
}

// faultyStore fails calls as its faults say.
type faultyStore struct {
	storage.ObjectStore
	faults *storeFaults
}

var errStorageDown = errors.New("connection refused")

func (s faultyStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	s.faults.mu.Lock()
	hang := s.faults.hangGets
	s.faults.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err := s.faults.getErr(); err != nil {
		return nil, err
	}
	return s.ObjectStore.Get(ctx, key)
}

func (s faultyStore) Put(ctx context.Context, key string, r io.Reader) error {
	if err := s.faults.putErr(); err != nil {
		return err
	}
	return s.ObjectStore.Put(ctx, key, r)
}

// openGate lets a reconciler made by a test run at once.
type openGate struct{}

func (openGate) Wait(context.Context) error { return nil }

// operationsTest is one backup in WaitingForPluginOperations with two operations attempted,
// its operations object in a filesystem location, and the operations reconciler (fake client,
// fake clock, 100 ms per call, 1h phase timeout).
type operationsTest struct {
	r        *Reconciler[*cairnv1.Backup, cairnv1.BackupPhase]
	c        client.Client
	req      ctrl.Request
	clk      *clocktesting.FakeClock
	action   *pollAction
	faults   *storeFaults
	recorder *events.FakeRecorder
	store    storage.ObjectStore
	keys     storage.BackupKeys
}

func newOperationsTest(t *testing.T, opsData []byte, mutate func(*cairnv1.Backup)) *operationsTest {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "cairn-system"},
		Spec:   cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true, Config: map[string]string{cairnv1.ConfigKeyPath: dir}},
		Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}}
	entered := metav1.NewTime(clk.Now())
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cairn-system", UID: "uid-b", CreationTimestamp: entered},
		Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseWaitingForPluginOperations, StorageLocation: "default",
			PhaseTransitionTime: &entered, BackupItemOperationsAttempted: 2}}
	if mutate != nil {
		mutate(b)
	}
	fs, err := storage.NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	keys := storage.Layout{}.Backup("cairn-system", "b")
	if err := fs.Put(context.Background(), keys.ItemOperations, bytes.NewReader(opsData)); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl, b).WithStatusSubresource(&cairnv1.Backup{}).Build()
	tt := &operationsTest{c: c, clk: clk, action: &pollAction{}, faults: &storeFaults{}, recorder: events.NewFakeRecorder(100),
		store: fs, keys: keys, req: ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "cairn-system", Name: "b"}}}
	tt.r = &Reconciler[*cairnv1.Backup, cairnv1.BackupPhase]{Client: c, Kind: Backups(backup.NewRegistry(nil, tt.action)), Clock: clk,
		Recorder: tt.recorder, Gate: openGate{}, SyncFrequency: time.Second, CallTimeout: 100 * time.Millisecond, PhaseTimeout: time.Hour,
		Stores: stores.Stores{Client: c, Namespace: "cairn-system", Wrap: func(_ *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
			return faultyStore{ObjectStore: s, faults: tt.faults}
		}}}
	return tt
}

func operationsData(t *testing.T, started time.Time, ids ...string) []byte {
	t.Helper()
	ops := make([]backup.Operation, len(ids))
	for i, id := range ids {
		ops[i] = backup.Operation{Action: "test/poll", OperationID: id, Started: started}
	}
	data, err := backup.GzipJSON(ops)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (tt *operationsTest) reconcile(t *testing.T) error {
	t.Helper()
	_, err := tt.r.Reconcile(context.Background(), tt.req)
	return err
}

func (tt *operationsTest) backup(t *testing.T) *cairnv1.Backup {
	t.Helper()
	var b cairnv1.Backup
	if err := tt.c.Get(context.Background(), tt.req.NamespacedName, &b); err != nil {
		t.Fatal(err)
	}
	return &b
}

// storedOperations reads the operations object around the faults.
func (tt *operationsTest) storedOperations(t *testing.T) []backup.Operation {
	t.Helper()
	ops, err := backup.ReadOperations(context.Background(), tt.store, tt.keys.ItemOperations)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// events drains the recorded events.
func (tt *operationsTest) events() []string {
	var out []string
	for {
		select {
		case e := <-tt.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestOperationsOneHangingCallFailsOnlyItself(t *testing.T) {
	started := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	tt := newOperationsTest(t, operationsData(t, started, "hang", "done"), nil)
	if err := tt.reconcile(t); err != nil {
		t.Fatal(err)
	}
	b := tt.backup(t)
	if b.Status.BackupItemOperationsCompleted != 1 || b.Status.BackupItemOperationsFailed != 1 {
		t.Errorf("completed %d, failed %d: the hanging call fails alone, the other is still polled",
			b.Status.BackupItemOperationsCompleted, b.Status.BackupItemOperationsFailed)
	}
	if b.Status.Phase != cairnv1.BackupPhaseFinalizingPartiallyFailed {
		t.Errorf("phase = %s", b.Status.Phase)
	}
}

func TestOperationsStorageFailing(t *testing.T) {
	started := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	tt := newOperationsTest(t, operationsData(t, started, "running", "running"), nil)
	tt.faults.set(errStorageDown, errStorageDown)
	// Storage down: retried with backoff, the phase unchanged.
	if err := tt.reconcile(t); !errors.Is(err, errStorageDown) {
		t.Fatalf("Reconcile = %v, want the storage error (retried with backoff)", err)
	}
	if b := tt.backup(t); b.Status.Phase != cairnv1.BackupPhaseWaitingForPluginOperations {
		t.Fatalf("phase = %s, want it unchanged while storage is down", b.Status.Phase)
	}
	// Still down just before the phase timeout: still retried.
	tt.clk.Step(time.Hour - time.Minute)
	if err := tt.reconcile(t); !errors.Is(err, errStorageDown) {
		t.Fatalf("Reconcile = %v before the timeout, want the storage error", err)
	}
	// Down for longer than the phase timeout: the backup goes on without its operations.
	tt.clk.Step(2 * time.Minute)
	if err := tt.reconcile(t); err != nil {
		t.Fatal(err)
	}
	b := tt.backup(t)
	if b.Status.Phase != cairnv1.BackupPhaseFinalizingPartiallyFailed || b.Status.BackupItemOperationsFailed != 2 {
		t.Errorf("phase %s, failed %d; want FinalizingPartiallyFailed with the unfinished operations failed", b.Status.Phase, b.Status.BackupItemOperationsFailed)
	}
	if evs := tt.events(); !slices.ContainsFunc(evs, func(e string) bool {
		return strings.Contains(e, "OperationsLost") && strings.Contains(e, "phase timed out after 1h0m0s: reading the operations: connection refused")
	}) {
		t.Errorf("no OperationsLost event with the last error: %q", evs)
	}
}

// TestOperationsStorageRecovers: a storage outage shorter than the phase timeout only delays
// the poll; the backup then finishes as usual.
func TestOperationsStorageRecovers(t *testing.T) {
	started := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	tt := newOperationsTest(t, operationsData(t, started, "done", "done"), nil)
	tt.faults.set(nil, errStorageDown) // the reads work, the write of the results fails
	if err := tt.reconcile(t); !errors.Is(err, errStorageDown) {
		t.Fatalf("Reconcile = %v, want the storage error", err)
	}
	if b := tt.backup(t); b.Status.Phase != cairnv1.BackupPhaseWaitingForPluginOperations || b.Status.BackupItemOperationsCompleted != 0 {
		t.Fatalf("phase %s, completed %d: nothing may be recorded before the operations object is",
			b.Status.Phase, b.Status.BackupItemOperationsCompleted)
	}
	tt.clk.Step(30 * time.Minute)
	tt.faults.set(nil, nil)
	if err := tt.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if b := tt.backup(t); b.Status.Phase != cairnv1.BackupPhaseFinalizing || b.Status.BackupItemOperationsCompleted != 2 {
		t.Errorf("phase %s, completed %d; want Finalizing with both completed", b.Status.Phase, b.Status.BackupItemOperationsCompleted)
	}
}

func TestOperationsCorruptObjectIsPermanent(t *testing.T) {
	tt := newOperationsTest(t, []byte("not gzip"), nil)
	if err := tt.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if b := tt.backup(t); b.Status.Phase != cairnv1.BackupPhaseFinalizingPartiallyFailed || b.Status.BackupItemOperationsFailed != 2 {
		t.Errorf("phase %s, failed %d; want FinalizingPartiallyFailed at once: waiting will not mend a corrupt object",
			b.Status.Phase, b.Status.BackupItemOperationsFailed)
	}
}

// TestOperationsGiveUpCancelsUnfinished: when the operations can no longer be followed but are
// known (here the write fails), the unfinished ones are cancelled and failed with the reason;
// the completed one stays completed.
func TestOperationsGiveUpCancelsUnfinished(t *testing.T) {
	started := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		putErr   error
		wait     time.Duration
		inReason string
	}{
		{name: "storage failing past the phase timeout", putErr: errStorageDown, wait: time.Hour + time.Minute,
			inReason: "phase timed out after 1h0m0s: writing the operations: connection refused"},
		{name: "location made ReadOnly", putErr: fmt.Errorf("putting: %w", storage.ErrReadOnly),
			inReason: "the storage location is read-only"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tt := newOperationsTest(t, operationsData(t, started, "done", "running"), nil)
			tt.faults.set(nil, tc.putErr)
			if tc.wait > 0 {
				if err := tt.reconcile(t); err == nil {
					t.Fatal("a transient failure was not retried")
				}
				tt.clk.Step(tc.wait)
			}
			if err := tt.reconcile(t); err != nil {
				t.Fatal(err)
			}
			b := tt.backup(t)
			if b.Status.Phase != cairnv1.BackupPhaseFinalizingPartiallyFailed ||
				b.Status.BackupItemOperationsAttempted != 2 || b.Status.BackupItemOperationsCompleted != 1 || b.Status.BackupItemOperationsFailed != 1 {
				t.Errorf("phase %s, attempted %d, completed %d, failed %d; want FinalizingPartiallyFailed, 2, 1, 1", b.Status.Phase,
					b.Status.BackupItemOperationsAttempted, b.Status.BackupItemOperationsCompleted, b.Status.BackupItemOperationsFailed)
			}
			if b.Status.Errors < 1 {
				t.Errorf("errors = %d", b.Status.Errors)
			}
			if cancelled, _ := tt.action.calls(); !slices.Equal(cancelled, []string{"running"}) {
				t.Errorf("cancelled %v, want [running]: nothing is left to wait for", cancelled)
			}
			if evs := tt.events(); !slices.ContainsFunc(evs, func(e string) bool {
				return strings.Contains(e, "Warning OperationsLost") && strings.Contains(e, "1 unfinished") && strings.Contains(e, tc.inReason)
			}) {
				t.Errorf("no OperationsLost event saying %q: %q", tc.inReason, evs)
			}
		})
	}
}

// TestOperationsGiveUpRecordsTheReason: the operations given up on are written back, each
// failed with the reason, when the store takes the write.
func TestOperationsGiveUpRecordsTheReason(t *testing.T) {
	started := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	tt := newOperationsTest(t, operationsData(t, started, "done", "running"), nil)
	tt.faults.failPuts(2, errStorageDown) // the poll's writes fail until the timeout
	if err := tt.reconcile(t); !errors.Is(err, errStorageDown) {
		t.Fatalf("Reconcile = %v, want the storage error", err)
	}
	tt.clk.Step(time.Hour + time.Minute)
	if err := tt.reconcile(t); err != nil {
		t.Fatal(err)
	}
	ops := tt.storedOperations(t)
	if len(ops) != 2 || ops[0].Phase != backup.OperationCompleted || ops[1].Phase != backup.OperationFailed ||
		ops[1].Error != "phase timed out after 1h0m0s: writing the operations: connection refused" {
		t.Errorf("stored operations %+v; want done Completed, and running Failed with the reason", ops)
	}
}

// TestOperationsCancelBoundsEachCall: a cancelled backup has every unfinished operation
// cancelled, each call with its own deadline: one Cancel that hangs does not use up the others'.
func TestOperationsCancelBoundsEachCall(t *testing.T) {
	started := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	tt := newOperationsTest(t, operationsData(t, started, "hang", "running", "running"), func(b *cairnv1.Backup) {
		b.Spec.Cancel = true
		b.Status.BackupItemOperationsAttempted = 3
	})
	if err := tt.reconcile(t); err != nil {
		t.Fatal(err)
	}
	b := tt.backup(t)
	if b.Status.Phase != cairnv1.BackupPhaseFinalizingCancelled || b.Status.BackupItemOperationsFailed != 3 {
		t.Errorf("phase %s, failed %d; want FinalizingCancelled, 3", b.Status.Phase, b.Status.BackupItemOperationsFailed)
	}
	cancelled, expired := tt.action.calls()
	if len(cancelled) != 2 || len(expired) != 0 {
		t.Errorf("cancelled %v, of which %v with an expired context; want both others cancelled in time", cancelled, expired)
	}
	for _, op := range tt.storedOperations(t) {
		if op.OperationID == "hang" && !strings.Contains(op.Error, "cancelling it failed: context deadline exceeded") {
			t.Errorf("the hanging cancel is not recorded: %q", op.Error)
		}
	}
}

// TestOperationsCancelWhileStorageHangs: a cancel never waits on storage, even one whose reads
// hang instead of failing: its operations are read for cancelReadTimeout, not the storage
// timeout, and counted failed from status.
func TestOperationsCancelWhileStorageHangs(t *testing.T) {
	started := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	tt := newOperationsTest(t, operationsData(t, started, "running", "running"), func(b *cairnv1.Backup) { b.Spec.Cancel = true })
	tt.faults.mu.Lock()
	tt.faults.hangGets = true
	tt.faults.mu.Unlock()
	began := time.Now()
	if err := tt.reconcile(t); err != nil {
		t.Fatalf("Reconcile = %v; a cancel must not wait for storage", err)
	}
	if took := time.Since(began); took > cancelReadTimeout+5*time.Second || tt.r.Stores.CallTimeout() <= cancelReadTimeout+5*time.Second {
		t.Errorf("the cancel took %s with a storage timeout of %s; want about %s", took, tt.r.Stores.CallTimeout(), cancelReadTimeout)
	}
	if b := tt.backup(t); b.Status.Phase != cairnv1.BackupPhaseFinalizingCancelled || b.Status.BackupItemOperationsFailed != 2 {
		t.Errorf("phase %s, failed %d; want FinalizingCancelled, 2", b.Status.Phase, b.Status.BackupItemOperationsFailed)
	}
}

// TestOperationsCancelWhileStorageDown: a cancel never waits on storage; the operations that
// cannot be read are counted failed from status.
func TestOperationsCancelWhileStorageDown(t *testing.T) {
	started := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	tt := newOperationsTest(t, operationsData(t, started, "running", "running"), func(b *cairnv1.Backup) { b.Spec.Cancel = true })
	tt.faults.set(errStorageDown, errStorageDown)
	if err := tt.reconcile(t); err != nil {
		t.Fatalf("Reconcile = %v; a cancel must not wait for storage", err)
	}
	b := tt.backup(t)
	if b.Status.Phase != cairnv1.BackupPhaseFinalizingCancelled || b.Status.BackupItemOperationsAttempted != 2 || b.Status.BackupItemOperationsFailed != 2 {
		t.Errorf("phase %s, attempted %d, failed %d; want FinalizingCancelled, 2, 2",
			b.Status.Phase, b.Status.BackupItemOperationsAttempted, b.Status.BackupItemOperationsFailed)
	}
}
