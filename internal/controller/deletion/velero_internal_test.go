package deletion

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// A Backup synced from a Velero location is deleted as with cairn.dev/keep-data: the object
// goes, Velero's bucket is never touched.
func TestDeletionInputOfVeleroBackup(t *testing.T) {
	now := time.Now()
	deleted := metav1.NewTime(now)
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{name: "a Cairn backup", annotations: nil, want: false},
		{name: "keep-data", annotations: map[string]string{cairnv1.KeepDataAnnotation: "true"}, want: true},
		{name: "synced from Velero", annotations: map[string]string{cairnv1.SyncedFromAnnotation: "velero", cairnv1.VeleroBackupNameAnnotation: "nightly"}, want: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := &cairnv1.Backup{
				ObjectMeta: metav1.ObjectMeta{Name: "b", Annotations: tt.annotations, DeletionTimestamp: &deleted, Finalizers: []string{cairnv1.BackupDataFinalizer}},
				Status:     cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StartTimestamp: &deleted},
			}
			in := deletionInputOf(b, now)
			if in.KeepData != tt.want {
				t.Fatalf("KeepData = %v, want %v", in.KeepData, tt.want)
			}
			if step, _ := nextDeletionStep(in); tt.want && step != stepRelease {
				t.Errorf("next step = %v, want the release of the object alone", step)
			}
		})
	}
}
