package controller

import (
	"bytes"
	"context"
	"errors"
	"io"
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
	"github.com/cairn-backup/cairn/internal/storage"
)

// pollAction reports operation "done" completed and lets operation "hang" hang until its call
// is cancelled.
type pollAction struct{}

func (pollAction) Name() string                      { return "test/poll" }
func (pollAction) AppliesTo() []schema.GroupResource { return nil }
func (pollAction) Execute(context.Context, *unstructured.Unstructured, *cairnv1.Backup) (backup.ExecuteResult, error) {
	return backup.ExecuteResult{}, nil
}
func (pollAction) Progress(ctx context.Context, id string, _ *cairnv1.Backup) (backup.OperationProgress, error) {
	if id == "hang" {
		<-ctx.Done()
		return backup.OperationProgress{}, ctx.Err()
	}
	return backup.OperationProgress{Completed: true}, nil
}
func (pollAction) Cancel(context.Context, string, *cairnv1.Backup) error { return nil }

func newOperationsTest(t *testing.T, clk *clocktesting.FakeClock, opsData []byte, down *bool) (*OperationsReconciler, client.Client, ctrl.Request) {
	t.Helper()
	dir := t.TempDir()
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "cairn-system"},
		Spec:   cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true, Config: map[string]string{cairnv1.ConfigKeyPath: dir}},
		Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}}
	entered := metav1.NewTime(clk.Now())
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cairn-system", UID: "uid-b", CreationTimestamp: entered},
		Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseWaitingForPluginOperations, StorageLocation: "default",
			PhaseTransitionTime: &entered, BackupItemOperationsAttempted: 2}}
	fs, err := storage.NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	keys := storage.Layout{}.Backup("cairn-system", "b")
	if err := fs.Put(context.Background(), keys.ItemOperations, bytes.NewReader(opsData)); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(bsl, b).WithStatusSubresource(&cairnv1.Backup{}).Build()
	r := &OperationsReconciler{Client: c, Namespace: "cairn-system", Registry: backup.NewRegistry(nil, pollAction{}), Clock: clk,
		Recorder: events.NewFakeRecorder(100), Gate: openGate{}, SyncFrequency: time.Second, CallTimeout: 100 * time.Millisecond, PhaseTimeout: time.Hour,
		stores: stores{client: c, namespace: "cairn-system", wrap: func(_ *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
			return downStore{ObjectStore: s, down: down}
		}}}
	return r, c, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "cairn-system", Name: "b"}}
}

// downStore fails every call while *down.
type downStore struct {
	storage.ObjectStore
	down *bool
}

var errStorageDown = errors.New("connection refused")

func (d downStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if *d.down {
		return nil, errStorageDown
	}
	return d.ObjectStore.Get(ctx, key)
}

func TestOperationsOneHangingCallFailsOnlyItself(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	started := clk.Now()
	ops, _ := backup.GzipJSON([]backup.Operation{
		{Action: "test/poll", OperationID: "hang", Started: started},
		{Action: "test/poll", OperationID: "done", Started: started},
	})
	down := false
	r, c, req := newOperationsTest(t, clk, ops, &down)
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var b cairnv1.Backup
	if err := c.Get(context.Background(), req.NamespacedName, &b); err != nil {
		t.Fatal(err)
	}
	if b.Status.BackupItemOperationsCompleted != 1 || b.Status.BackupItemOperationsFailed != 1 {
		t.Errorf("completed %d, failed %d: the hanging call fails alone, the other is still polled",
			b.Status.BackupItemOperationsCompleted, b.Status.BackupItemOperationsFailed)
	}
	if b.Status.Phase != cairnv1.BackupPhaseFinalizingPartiallyFailed {
		t.Errorf("phase = %s", b.Status.Phase)
	}
}

func TestOperationsStorageFailing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	ops, _ := backup.GzipJSON([]backup.Operation{{Action: "test/poll", OperationID: "hang", Started: clk.Now()}})
	down := true
	r, c, req := newOperationsTest(t, clk, ops, &down)
	// Storage down: retried with backoff, the phase unchanged.
	if _, err := r.Reconcile(context.Background(), req); !errors.Is(err, errStorageDown) {
		t.Fatalf("Reconcile = %v, want the storage error (retried with backoff)", err)
	}
	var b cairnv1.Backup
	if err := c.Get(context.Background(), req.NamespacedName, &b); err != nil {
		t.Fatal(err)
	}
	if b.Status.Phase != cairnv1.BackupPhaseWaitingForPluginOperations {
		t.Fatalf("phase = %s, want it unchanged while storage is down", b.Status.Phase)
	}
	// Down for longer than the phase timeout: the backup goes on without its operations.
	clk.Step(time.Hour + time.Minute)
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), req.NamespacedName, &b); err != nil {
		t.Fatal(err)
	}
	if b.Status.Phase != cairnv1.BackupPhaseFinalizingPartiallyFailed || b.Status.BackupItemOperationsFailed != 2 {
		t.Errorf("phase %s, failed %d; want FinalizingPartiallyFailed with the unfinished operations failed", b.Status.Phase, b.Status.BackupItemOperationsFailed)
	}
}

func TestOperationsCorruptObjectIsPermanent(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	down := false
	r, c, req := newOperationsTest(t, clk, []byte("not gzip"), &down)
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var b cairnv1.Backup
	if err := c.Get(context.Background(), req.NamespacedName, &b); err != nil {
		t.Fatal(err)
	}
	if b.Status.Phase != cairnv1.BackupPhaseFinalizingPartiallyFailed {
		t.Errorf("phase = %s, want FinalizingPartiallyFailed at once: waiting will not mend a corrupt object", b.Status.Phase)
	}
}
