package finalizer

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/controller/unittest"
	"github.com/cairn-backup/cairn/internal/storage"
)

func TestFinalizedRestorePhase(t *testing.T) {
	want := map[cairnv1.RestorePhase]cairnv1.RestorePhase{
		cairnv1.RestorePhaseFinalizing:                cairnv1.RestorePhaseCompleted,
		cairnv1.RestorePhaseFinalizingPartiallyFailed: cairnv1.RestorePhasePartiallyFailed,
		cairnv1.RestorePhaseFinalizingCancelled:       cairnv1.RestorePhaseFailed,
	}
	for _, p := range append([]cairnv1.RestorePhase{""}, cairnv1.AllRestorePhases...) {
		next, ok := finalizedRestorePhase(p)
		if w, finalizing := want[p]; next != w || ok != finalizing {
			t.Errorf("finalizedRestorePhase(%q) = %q, %v; want %q, %v", p, next, ok, w, finalizing)
		}
		if ok && !next.IsTerminal() {
			t.Errorf("finalizedRestorePhase(%q) = %q, which is not terminal", p, next)
		}
	}
}

func newRestoreFinalizer(c client.Client, clk *clocktesting.FakeClock) *RestoreReconciler {
	return &RestoreReconciler{Client: c, Namespace: "cairn-system", Stores: stores.Stores{Client: c, Namespace: "cairn-system"},
		Clock: clk, Recorder: events.NewFakeRecorder(100), Gate: openGate{}}
}

func TestRestoreFinalizerEndsFinalizingRestores(t *testing.T) {
	for _, tt := range []struct {
		phase      cairnv1.RestorePhase
		want       cairnv1.RestorePhase
		wantReason string
	}{
		{phase: cairnv1.RestorePhaseFinalizing, want: cairnv1.RestorePhaseCompleted},
		{phase: cairnv1.RestorePhaseFinalizingPartiallyFailed, want: cairnv1.RestorePhasePartiallyFailed},
		{phase: cairnv1.RestorePhaseFinalizingCancelled, want: cairnv1.RestorePhaseFailed, wantReason: cairnv1.FailureReasonRestoreCancelled},
	} {
		t.Run(string(tt.phase), func(t *testing.T) {
			clk := clocktesting.NewFakeClock(unittest.Epoch.Add(time.Hour))
			rs := unittest.Restore("team-a", "r", 0, tt.phase)
			rs.Status.Progress, rs.Status.Warnings, rs.Status.Errors = cairnv1.NewRestoreProgress(5, 6), 1, 2
			c := unittest.NewClient(t, interceptor.Funcs{}, rs)
			r := newRestoreFinalizer(c, clk)
			if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
				t.Fatal(err)
			}
			got := unittest.GetRestore(t, c, "team-a", "r")
			if got.Status.Phase != tt.want || got.Status.FailureReason != tt.wantReason {
				t.Errorf("phase %s, failureReason %q; want %s, %q", got.Status.Phase, got.Status.FailureReason, tt.want, tt.wantReason)
			}
			if got.Status.CompletionTimestamp == nil || !got.Status.CompletionTimestamp.Time.Equal(clk.Now()) ||
				got.Status.PhaseTransitionTime == nil || !got.Status.PhaseTransitionTime.Time.Equal(clk.Now()) {
				t.Errorf("completionTimestamp %v, phaseTransitionTime %v; want both %v", got.Status.CompletionTimestamp, got.Status.PhaseTransitionTime, clk.Now())
			}
			cancelled := meta.FindStatusCondition(got.Status.Conditions, cairnv1.BackupConditionCancelled)
			if wantCancelled := tt.wantReason != ""; wantCancelled != (cancelled != nil && cancelled.Status == metav1.ConditionTrue && cancelled.Reason == cairnv1.ReasonCancelledByUser) {
				t.Errorf("Cancelled condition %+v, want one: %v", cancelled, wantCancelled)
			}
			// The phase change's event is PhaseWatcher's: none from the finalizer itself.
			if evs := unittest.DrainEvents(r.Recorder); len(evs) != 0 {
				t.Errorf("events %q, want none", evs)
			}
		})
	}
	t.Run("other phases are not its own", func(t *testing.T) {
		for _, phase := range cairnv1.AllRestorePhases {
			if _, ok := finalizedRestorePhase(phase); ok {
				continue
			}
			var writes unittest.WriteCounter
			c := unittest.NewClient(t, writes.Funcs(interceptor.Funcs{}), unittest.Restore("team-a", "r", 0, phase))
			if _, err := newRestoreFinalizer(c, clocktesting.NewFakeClock(unittest.Epoch)).Reconcile(context.Background(), restoreRequest); err != nil {
				t.Fatal(err)
			}
			if n := writes.N.Load(); n != 0 {
				t.Errorf("%s: %d writes, want none", phase, n)
			}
		}
	})
}

// restoreFilesFixture is a filesystem location (prefix cluster-a) whose store holds the files of
// restore team-a/r and, around them, objects that are not its own.
type restoreFilesFixture struct {
	root   string
	bsl    *cairnv1.BackupStorageLocation
	mine   []string
	others []string
}

func newRestoreFilesFixture(t *testing.T) restoreFilesFixture {
	t.Helper()
	f := restoreFilesFixture{root: t.TempDir()}
	f.bsl = unittest.DefaultLocation(f.root)
	f.bsl.Spec.ObjectStorage = &cairnv1.ObjectStorage{Prefix: "cluster-a"}
	layout := storage.Layout{Prefix: "cluster-a"}
	restoreKeys := func(k storage.RestoreKeys) []string {
		return []string{k.Logs, k.Results, k.ResourceList, k.ItemOperations}
	}
	f.mine = restoreKeys(layout.Restore("team-a", "r"))
	f.others = append(f.others, restoreKeys(layout.Restore("team-a", "r2"))...)
	f.others = append(f.others, restoreKeys(layout.Restore("team-b", "r"))...)
	f.others = append(f.others, restoreKeys(storage.Layout{Prefix: "cluster-b"}.Restore("team-a", "r"))...)
	f.others = append(f.others, restoreKeys(storage.Layout{}.Restore("team-a", "r"))...)
	backup := layout.Backup("team-a", "r")
	f.others = append(f.others, backup.Archive, backup.Logs, backup.Metadata)
	fs, err := storage.NewFilesystem(f.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range append(append([]string{}, f.mine...), f.others...) {
		if err := fs.Put(context.Background(), key, strings.NewReader("data of "+key)); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// keys lists every object in the fixture's store.
func (f restoreFilesFixture) keys(t *testing.T) []string {
	t.Helper()
	fs, err := storage.NewFilesystem(f.root)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := fs.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// deletedRestore is a terminal restore team-a/r being deleted, its files in location loc; it
// has a second finalizer so that it stays to be looked at.
func deletedRestore(phase cairnv1.RestorePhase, loc string) *cairnv1.Restore {
	rs := unittest.Restore("team-a", "r", 0, phase)
	rs.DeletionTimestamp = &metav1.Time{Time: unittest.Epoch.Add(time.Hour)}
	rs.Finalizers = []string{cairnv1.RestoreDataFinalizer, "example.com/keep"}
	rs.Status.StorageLocation = loc
	return rs
}

func sorted(keys []string) []string {
	out := append([]string{}, keys...)
	sort.Strings(out)
	return out
}

func TestRestoreFinalizerRemovesOnlyItsFiles(t *testing.T) {
	for _, phase := range []cairnv1.RestorePhase{cairnv1.RestorePhaseCompleted, cairnv1.RestorePhasePartiallyFailed, cairnv1.RestorePhaseFailed, cairnv1.RestorePhaseFailedValidation} {
		t.Run(string(phase), func(t *testing.T) {
			f := newRestoreFilesFixture(t)
			c := unittest.NewClient(t, interceptor.Funcs{}, f.bsl, deletedRestore(phase, "default"))
			r := newRestoreFinalizer(c, clocktesting.NewFakeClock(unittest.Epoch.Add(2*time.Hour)))
			if _, err := r.Reconcile(context.Background(), restoreRequest); err != nil {
				t.Fatal(err)
			}
			if got, want := f.keys(t), sorted(f.others); !reflect.DeepEqual(got, want) {
				t.Errorf("objects left:\n%s\nwant every object but the restore's own:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			got := unittest.GetRestore(t, c, "team-a", "r")
			if !reflect.DeepEqual(got.Finalizers, []string{"example.com/keep"}) {
				t.Errorf("finalizers %q, want only the restore-data finalizer removed", got.Finalizers)
			}
			if evs := unittest.DrainEvents(r.Recorder); len(evs) != 1 || evs[0] != "Normal FilesRemoved Removed 4 files of the restore from storage location default" {
				t.Errorf("events %q", evs)
			}
		})
	}
}

// failingListStore fails every List, as a storage service that is away does.
type failingListStore struct{ storage.ObjectStore }

func (failingListStore) List(context.Context, string) ([]string, error) {
	return nil, errors.New("connection refused")
}

func TestRestoreFinalizerNeverHoldsARestoreForItsFiles(t *testing.T) {
	for _, tt := range []struct {
		name string
		// change alters the fixture's location; wrap its store.
		change func(bsl *cairnv1.BackupStorageLocation)
		wrap   func(*cairnv1.BackupStorageLocation, storage.ObjectStore) storage.ObjectStore
		loc    string
		phase  cairnv1.RestorePhase
		// wantFinalizer: whether the restore-data finalizer stays; wantErr: whether the reconcile fails.
		wantFinalizer, wantErr bool
		wantEvent              string
		wantFilesLeft          bool
	}{
		{name: "the location is gone", loc: "gone", phase: cairnv1.RestorePhaseCompleted, wantFilesLeft: true,
			wantEvent: "Warning FilesLeft Storage location gone is gone: the restore's files, if any, were left there"},
		{name: "the location is ReadOnly now", loc: "default", phase: cairnv1.RestorePhaseCompleted, wantFilesLeft: true,
			change:    func(bsl *cairnv1.BackupStorageLocation) { bsl.Spec.AccessMode = cairnv1.AccessModeReadOnly },
			wantEvent: "Warning FilesLeft The restore's files were left in storage location default: "},
		{name: "the location's configuration is broken", loc: "default", phase: cairnv1.RestorePhaseCompleted, wantFilesLeft: true,
			change:    func(bsl *cairnv1.BackupStorageLocation) { bsl.Spec.Config[cairnv1.ConfigKeyPath] = "relative/path" },
			wantEvent: "Warning FilesLeft The restore's files were left in storage location default: "},
		{name: "no location held its files", loc: "", phase: cairnv1.RestorePhaseFailed, wantFilesLeft: true},
		{name: "the storage is away: retried, the finalizer kept", loc: "default", phase: cairnv1.RestorePhaseCompleted, wantFilesLeft: true,
			wrap: func(_ *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				return failingListStore{s}
			},
			wantFinalizer: true, wantErr: true},
		{name: "not terminal yet: not its own", loc: "default", phase: cairnv1.RestorePhaseInProgress, wantFilesLeft: true, wantFinalizer: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newRestoreFilesFixture(t)
			if tt.change != nil {
				tt.change(f.bsl)
			}
			c := unittest.NewClient(t, interceptor.Funcs{}, f.bsl, deletedRestore(tt.phase, tt.loc))
			r := newRestoreFinalizer(c, clocktesting.NewFakeClock(unittest.Epoch.Add(2*time.Hour)))
			r.Stores.Wrap = tt.wrap
			_, err := r.Reconcile(context.Background(), restoreRequest)
			if (err != nil) != tt.wantErr {
				t.Errorf("Reconcile = %v, want an error: %v", err, tt.wantErr)
			}
			got := unittest.GetRestore(t, c, "team-a", "r")
			if has := controllerutil.ContainsFinalizer(got, cairnv1.RestoreDataFinalizer); has != tt.wantFinalizer {
				t.Errorf("finalizers %q: restore-data finalizer kept = %v, want %v", got.Finalizers, has, tt.wantFinalizer)
			}
			if !controllerutil.ContainsFinalizer(got, "example.com/keep") {
				t.Errorf("finalizers %q: another's finalizer was removed", got.Finalizers)
			}
			if left := sorted(f.keys(t)); tt.wantFilesLeft && !reflect.DeepEqual(left, sorted(append(append([]string{}, f.mine...), f.others...))) {
				t.Errorf("objects left %q, want all of them", left)
			}
			evs := unittest.DrainEvents(r.Recorder)
			switch {
			case tt.wantEvent == "" && len(evs) != 0:
				t.Errorf("events %q, want none", evs)
			case tt.wantEvent != "" && (len(evs) != 1 || !strings.HasPrefix(evs[0], tt.wantEvent)):
				t.Errorf("events %q, want %q", evs, tt.wantEvent)
			}
		})
	}
}

// TestRestoreFinalizerCancelsVolumeRestoresLeftRunning: a restore that ends without completing
// (its operations could not be read to cancel them one by one) has its volume restores that
// have not ended stopped: a bound one cancelled, an unbound one deleted; ended ones and other
// restores' are left alone, and a completed restore touches none.
func TestRestoreFinalizerCancelsVolumeRestoresLeftRunning(t *testing.T) {
	pvr := func(name, restoreUID, node string, phase cairnv1.PodVolumePhase) *cairnv1.PodVolumeRestore {
		return &cairnv1.PodVolumeRestore{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "cairn-system", Labels: map[string]string{cairnv1.PodVolumeRestoreUIDLabel: restoreUID}},
			Spec:       cairnv1.PodVolumeRestoreSpec{Node: node, Volume: "data"},
			Status:     cairnv1.PodVolumeStatus{Phase: phase},
		}
	}
	type state struct {
		exists, cancel bool
	}
	for _, tt := range []struct {
		phase cairnv1.RestorePhase
		want  map[string]state
	}{
		{phase: cairnv1.RestorePhaseFinalizingCancelled, want: map[string]state{
			"running": {true, true}, "unbound": {false, false}, "ended": {true, false}, "other": {true, false}}},
		{phase: cairnv1.RestorePhaseFinalizingPartiallyFailed, want: map[string]state{
			"running": {true, true}, "unbound": {false, false}, "ended": {true, false}, "other": {true, false}}},
		{phase: cairnv1.RestorePhaseFinalizing, want: map[string]state{
			"running": {true, false}, "unbound": {true, false}, "ended": {true, false}, "other": {true, false}}},
	} {
		t.Run(string(tt.phase), func(t *testing.T) {
			rs := unittest.Restore("team-a", "r", 0, tt.phase)
			uid := string(rs.UID)
			c := unittest.NewClient(t, interceptor.Funcs{}, rs,
				pvr("running", uid, "node-1", cairnv1.PodVolumePhaseInProgress),
				pvr("unbound", uid, "", cairnv1.PodVolumePhaseNew),
				pvr("ended", uid, "node-1", cairnv1.PodVolumePhaseCompleted),
				pvr("other", "uid-of-another", "node-1", cairnv1.PodVolumePhaseInProgress))
			if _, err := newRestoreFinalizer(c, clocktesting.NewFakeClock(unittest.Epoch)).Reconcile(context.Background(), restoreRequest); err != nil {
				t.Fatal(err)
			}
			for name, want := range tt.want {
				var got cairnv1.PodVolumeRestore
				err := c.Get(context.Background(), client.ObjectKey{Namespace: "cairn-system", Name: name}, &got)
				if exists := err == nil; exists != want.exists || (exists && got.Spec.Cancel != want.cancel) {
					t.Errorf("%s: exists %v (%v), cancel %v; want %+v", name, exists, err, got.Spec.Cancel, want)
				}
			}
			if got := unittest.GetRestore(t, c, "team-a", "r"); !got.Status.Phase.IsTerminal() {
				t.Errorf("phase %s, want a terminal one", got.Status.Phase)
			}
		})
	}
}
