package operations

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// restorePollAction is pollAction as a RestoreItemAction.
type restorePollAction struct{ *pollAction }

func (restorePollAction) Execute(context.Context, restore.ActionInput) (restore.ActionOutput, error) {
	return restore.ActionOutput{}, nil
}
func (a restorePollAction) Progress(ctx context.Context, id string, _ *cairnv1.Restore) (backup.OperationProgress, error) {
	return a.pollAction.Progress(ctx, id, nil)
}
func (a restorePollAction) Cancel(ctx context.Context, id string, _ *cairnv1.Restore) error {
	return a.pollAction.Cancel(ctx, id, nil)
}

// TestRestoreOperationsWhereKept: the restore operations reconciler is the same loop over the
// restore's operations, read from its operations file when it has a location for its files
// (so a restarted manager resumes them), else from what the restore reconciler handed over in
// this process; those are lost with a restart, and the restore then goes on without them.
func TestRestoreOperationsWhereKept(t *testing.T) {
	started := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		// stored: the restore has a location for its files; held: its run handed its
		// operations over in this process (no location).
		stored, held              bool
		ids                       []string
		cancel                    bool
		putErr                    error
		wantPhase                 cairnv1.RestorePhase
		wantCompleted, wantFailed int32
		wantCancelled             []string
		wantEvent                 string
	}{
		{name: "stored: resumed from the file, as after a restart", stored: true, ids: []string{"done", "done"},
			wantPhase: cairnv1.RestorePhaseFinalizing, wantCompleted: 2},
		{name: "stored: still running", stored: true, ids: []string{"done", "running"},
			wantPhase: cairnv1.RestorePhaseWaitingForPluginOperations, wantCompleted: 1},
		{name: "stored, the location made ReadOnly: goes on without the unfinished one", stored: true, ids: []string{"done", "running"},
			putErr:    fmt.Errorf("putting: %w", storage.ErrReadOnly),
			wantPhase: cairnv1.RestorePhaseFinalizingPartiallyFailed, wantCompleted: 1, wantFailed: 1, wantCancelled: []string{"running"},
			wantEvent: "Restore goes on without its 1 unfinished async operations: writing the operations: putting: the storage location is read-only"},
		{name: "held in this process", held: true, ids: []string{"done", "done"},
			wantPhase: cairnv1.RestorePhaseFinalizing, wantCompleted: 2},
		{name: "held by a manager that restarted since: goes on without them", ids: []string{"done", "done"},
			wantPhase: cairnv1.RestorePhaseFinalizingPartiallyFailed, wantFailed: 2,
			wantEvent: "Restore goes on without its 2 unfinished async operations: " + lifecycle.ErrOperationsLost.Error()},
		{name: "held, cancelled", held: true, ids: []string{"running", "running"}, cancel: true,
			wantPhase: cairnv1.RestorePhaseFinalizingCancelled, wantFailed: 2, wantCancelled: []string{"running", "running"},
			wantEvent: "Restore cancelled by user while waiting for async operations: 2 cancelled; the objects it created stay"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(started)
			dir := t.TempDir()
			bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "cairn-system"},
				Spec:   cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true, Config: map[string]string{cairnv1.ConfigKeyPath: dir}},
				Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}}
			rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "cairn-system", UID: "uid-r"},
				Spec: cairnv1.RestoreSpec{BackupName: "b", Cancel: tc.cancel},
				Status: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseWaitingForPluginOperations,
					RestoreItemOperationsAttempted: int32(len(tc.ids))}}
			ops := make([]backup.Operation, len(tc.ids))
			for i, id := range tc.ids {
				ops[i] = backup.Operation{Action: "test/poll", OperationID: id, Started: started}
			}
			fs, err := storage.NewFilesystem(dir)
			if err != nil {
				t.Fatal(err)
			}
			key := storage.Layout{}.Restore("cairn-system", "r").ItemOperations
			held := &Held{}
			switch {
			case tc.stored:
				rs.Status.StorageLocation = "default"
				if err := backup.PutOperations(context.Background(), fs, key, ops); err != nil {
					t.Fatal(err)
				}
			case tc.held:
				held.Hold(rs.UID, ops)
			}
			c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl, rs).WithStatusSubresource(&cairnv1.Restore{}).Build()
			action, faults, recorder := &pollAction{}, &storeFaults{}, events.NewFakeRecorder(100)
			faults.set(nil, tc.putErr)
			r := &Reconciler[*cairnv1.Restore, cairnv1.RestorePhase]{Client: c,
				Kind:  Restores(restore.NewActions(restorePollAction{action}), held),
				Clock: clk, Recorder: recorder, Gate: openGate{}, SyncFrequency: time.Second, CallTimeout: 100 * time.Millisecond, PhaseTimeout: time.Hour,
				Stores: stores.Stores{Client: c, Namespace: "cairn-system", Wrap: func(_ *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
					return faultyStore{ObjectStore: s, faults: faults}
				}}}
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rs)}); err != nil {
				t.Fatal(err)
			}
			var got cairnv1.Restore
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(rs), &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != tc.wantPhase || got.Status.RestoreItemOperationsAttempted != int32(len(tc.ids)) ||
				got.Status.RestoreItemOperationsCompleted != tc.wantCompleted || got.Status.RestoreItemOperationsFailed != tc.wantFailed {
				t.Errorf("phase %s, attempted %d, completed %d, failed %d; want %s, %d, %d, %d", got.Status.Phase,
					got.Status.RestoreItemOperationsAttempted, got.Status.RestoreItemOperationsCompleted, got.Status.RestoreItemOperationsFailed,
					tc.wantPhase, len(tc.ids), tc.wantCompleted, tc.wantFailed)
			}
			if cancelled, _ := action.calls(); !slices.Equal(cancelled, tc.wantCancelled) {
				t.Errorf("cancelled %v, want %v", cancelled, tc.wantCancelled)
			}
			var evs []string
			for len(recorder.Events) > 0 {
				evs = append(evs, <-recorder.Events)
			}
			if tc.wantEvent != "" && !slices.ContainsFunc(evs, func(e string) bool { return strings.HasSuffix(e, tc.wantEvent) }) {
				t.Errorf("no event %q: %q", tc.wantEvent, evs)
			}
			if waiting := got.Status.Phase == cairnv1.RestorePhaseWaitingForPluginOperations; !waiting && held.m.Len() > 0 {
				t.Error("the held operations of a restore that moved on were not forgotten")
			}
		})
	}
}
