package queue_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/deletion"
	"github.com/cairn-backup/cairn/internal/controller/queue"
)

// TestQueueTrigger: the backup updates that wake the queue, with the deletion's rule for a
// location's deletion lock as setup.go passes it.
func TestQueueTrigger(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC))
	backup := func(phase cairnv1.BackupPhase, edit func(*cairnv1.Backup)) *cairnv1.Backup {
		b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cairn-system", Finalizers: []string{cairnv1.BackupDataFinalizer}},
			Status: cairnv1.BackupStatus{Phase: phase, StartTimestamp: &now, StorageLocation: "default"}}
		if edit != nil {
			edit(b)
		}
		return b
	}
	deleted := func(b *cairnv1.Backup) { b.DeletionTimestamp = &now }
	blocked := func(b *cairnv1.Backup) {
		deleted(b)
		b.Status.Conditions = []metav1.Condition{{Type: cairnv1.BackupConditionDeletionBlocked, Status: metav1.ConditionTrue}}
	}
	tests := []struct {
		name     string
		old, cur *cairnv1.Backup
		want     bool
	}{
		{"a phase change", backup(cairnv1.BackupPhaseInProgress, nil), backup(cairnv1.BackupPhaseCompleted, nil), true},
		{"a progress write", backup(cairnv1.BackupPhaseInProgress, nil), backup(cairnv1.BackupPhaseInProgress, func(b *cairnv1.Backup) {
			b.Status.Progress = &cairnv1.BackupProgress{ItemsBackedUp: 3}
		}), false},
		{"deleted: takes its location's deletion lock", backup(cairnv1.BackupPhaseCompleted, nil), backup(cairnv1.BackupPhaseCompleted, deleted), true},
		{"its deletion comes to wait for a restore: releases the lock", backup(cairnv1.BackupPhaseCompleted, deleted), backup(cairnv1.BackupPhaseCompleted, blocked), true},
		{"the restore ended, Deleting: takes it again", backup(cairnv1.BackupPhaseCompleted, blocked), backup(cairnv1.BackupPhaseDeleting, deleted), true},
		{"keep-data set while waiting for a restore: nothing changes for the queue", backup(cairnv1.BackupPhaseCompleted, blocked), backup(cairnv1.BackupPhaseCompleted, func(b *cairnv1.Backup) {
			blocked(b)
			b.Annotations = map[string]string{cairnv1.KeepDataAnnotation: "true"}
		}), false},
		{"a condition of a deleted backup that changes no lock", backup(cairnv1.BackupPhaseDeleting, deleted), backup(cairnv1.BackupPhaseDeleting, func(b *cairnv1.Backup) {
			deleted(b)
			b.Status.Conditions = []metav1.Condition{{Type: cairnv1.ConditionReady, Status: metav1.ConditionFalse}}
		}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := queue.BackupTrigger(deletion.RemovingData).Update(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.cur}); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
