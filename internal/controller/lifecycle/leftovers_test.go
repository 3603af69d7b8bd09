package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/unittest"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/storage"
)

type deleter struct {
	got []string
	err error
}

func (d *deleter) DeleteSnapshots(_ context.Context, snaps []podvolume.Snapshot) error {
	for _, s := range snaps {
		d.got = append(d.got, s.Repository.Key()+"/"+s.SnapshotID)
	}
	return d.err
}

func copyOf(name, uid string, phase cairnv1.PodVolumePhase, snapshot string) *cairnv1.PodVolumeBackup {
	return &cairnv1.PodVolumeBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "cairn-system", Labels: map[string]string{cairnv1.PodVolumeBackupUIDLabel: uid}},
		Spec:       cairnv1.PodVolumeBackupSpec{Volume: name, Repository: cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "shop"}},
		Status:     cairnv1.PodVolumeStatus{Phase: phase, SnapshotID: snapshot},
	}
}

// TestLeftovers: the snapshots of the operations file and of the backup's completed copies are
// deleted once each; its copies still running are cancelled; another backup's are untouched.
func TestLeftovers(t *testing.T) {
	repo := cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "shop"}
	result, _ := json.Marshal(podvolume.Snapshot{Volume: "data", Repository: repo, SnapshotID: "k-data"})
	ops := []backup.Operation{
		{Action: podvolume.ActionName, OperationID: "b-data", Phase: backup.OperationCompleted, Result: result},
		{Action: "cairn.dev/csi-snapshot", OperationID: "shop/vs", Phase: backup.OperationCompleted},
	}
	dir := t.TempDir()
	store, err := storage.NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.PutOperations(t.Context(), store, "ops.json.gz", ops); err != nil {
		t.Fatal(err)
	}
	c := unittest.NewClient(t, interceptor.Funcs{},
		copyOf("b-data", "uid-b", cairnv1.PodVolumePhaseCompleted, "k-data"), // also in the file: once
		copyOf("b-late", "uid-b", cairnv1.PodVolumePhaseCompleted, "k-late"), // completed as the backup was cancelled
		copyOf("b-running", "uid-b", cairnv1.PodVolumePhaseInProgress, ""),
		copyOf("b-failed", "uid-b", cairnv1.PodVolumePhaseFailed, ""),
		copyOf("other", "uid-other", cairnv1.PodVolumePhaseCompleted, "k-other"),
	)
	d := &deleter{}
	l := lifecycle.Leftovers{Volumes: d, Client: c, Namespace: "cairn-system"}
	n, err := l.Remove(t.Context(), "uid-b", store, "ops.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(d.got)
	if want := []string{"default_shop/k-data", "default_shop/k-late"}; !slices.Equal(d.got, want) || n != 2 {
		t.Fatalf("deleted %v (%d), want %v", d.got, n, want)
	}
	var running cairnv1.PodVolumeBackup
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "cairn-system", Name: "b-running"}, &running); err != nil || !running.Spec.Cancel {
		t.Fatalf("the running copy was not cancelled: %v, cancel=%v", err, running.Spec.Cancel)
	}

	t.Run("a missing operations file is no error", func(t *testing.T) {
		d := &deleter{}
		l := lifecycle.Leftovers{Volumes: d, Client: c, Namespace: "cairn-system"}
		if _, err := l.Remove(t.Context(), "uid-other", store, "missing.json.gz"); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(d.got, []string{"default_shop/k-other"}) {
			t.Fatalf("deleted %v", d.got)
		}
	})
	t.Run("a failed deletion is the caller's to retry", func(t *testing.T) {
		l := lifecycle.Leftovers{Volumes: &deleter{err: errors.New("storage down")}, Client: c, Namespace: "cairn-system"}
		if _, err := l.Remove(t.Context(), "uid-b", store, "ops.json.gz"); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("a corrupt operations file is an error: no snapshot is forgotten", func(t *testing.T) {
		if err := store.Put(t.Context(), "bad.json.gz", strings.NewReader("not gzip")); err != nil {
			t.Fatal(err)
		}
		l := lifecycle.Leftovers{Volumes: &deleter{}, Client: c, Namespace: "cairn-system"}
		if _, err := l.Remove(t.Context(), "uid-b", store, "bad.json.gz"); err == nil {
			t.Fatal("no error")
		}
	})
}
