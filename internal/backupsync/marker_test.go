package backupsync

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

const operatorNamespace = "cairn-system"

var (
	started   = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	completed = started.Add(time.Minute)
	expires   = started.Add(720 * time.Hour)
	now       = completed.Add(time.Hour)
)

// finished is a backup as the finalizer sees it when it commits.
func finished() *cairnv1.Backup {
	start, expiration := metav1.NewTime(started), metav1.NewTime(expires)
	return &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "daily-1", UID: "uid-a",
			Labels: map[string]string{cairnv1.ScheduleNameLabel: "daily"}},
		Spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"team"}, StorageLocation: "primary", TTL: &metav1.Duration{Duration: 720 * time.Hour}},
		Status: cairnv1.BackupStatus{
			Phase: cairnv1.BackupPhaseFinalizing, StorageLocation: "primary",
			StartTimestamp: &start, Expiration: &expiration, Progress: cairnv1.NewBackupProgress(9, 10),
			Warnings: 1, Errors: 0, BackupItemOperationsAttempted: 2, BackupItemOperationsCompleted: 2,
		},
	}
}

// A backup committed by one cluster is shown by another as the first one showed it: the marker
// carries what the object needs, and Object and Status read it back.
func TestMarkerRoundTrip(t *testing.T) {
	m, err := Marker(finished(), cairnv1.BackupPhaseCompleted, "1.1.0", storage.ArchiveDigest{SHA256: "abc", Size: 42}, completed, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Through JSON, as it is stored.
	data, _ := json.Marshal(m)
	var stored storage.BackupMetadata
	if err := json.Unmarshal(data, &stored); err != nil {
		t.Fatal(err)
	}

	b, err := Object(storage.CommittedBackup{Namespace: "team", Name: "daily-1"}, stored, "dr", operatorNamespace)
	if err != nil {
		t.Fatal(err)
	}
	wantSpec := cairnv1.BackupSpec{IncludedNamespaces: []string{"team"}, StorageLocation: "dr", TTL: &metav1.Duration{Duration: 720 * time.Hour}}
	if !reflect.DeepEqual(b.Spec, wantSpec) {
		t.Errorf("spec = %+v, want %+v", b.Spec, wantSpec)
	}
	wantLabels := map[string]string{cairnv1.ScheduleNameLabel: "daily", cairnv1.StorageLocationLabel: "dr"}
	if !reflect.DeepEqual(b.Labels, wantLabels) || b.Annotations[cairnv1.SyncedFromAnnotation] != "dr" ||
		!reflect.DeepEqual(b.Finalizers, []string{cairnv1.BackupDataFinalizer}) || b.Namespace != "team" || b.Name != "daily-1" {
		t.Errorf("object metadata = %+v", b.ObjectMeta)
	}
	if !b.IsSyncPending() {
		t.Error("a synced object is not waiting for the sync to write its status")
	}

	s, err := Status(stored, "dr", 1, now)
	if err != nil {
		t.Fatal(err)
	}
	if s.Phase != cairnv1.BackupPhaseCompleted || s.StorageLocation != "dr" || !s.StartTimestamp.Time.Equal(started) ||
		!s.CompletionTimestamp.Time.Equal(completed) || !s.Expiration.Time.Equal(expires) || s.Warnings != 2 || s.Errors != 0 ||
		s.Progress.Summary != "9/10" || s.BackupItemOperationsAttempted != 2 || s.BackupItemOperationsCompleted != 2 ||
		s.ArchiveSHA256 != "abc" || s.ArchiveSize != 42 || s.FormatVersion != "1.1.0" || s.OriginUID != "uid-a" {
		t.Errorf("status = %+v", s)
	}
	if len(s.Conditions) != 1 || s.Conditions[0].Type != cairnv1.BackupConditionDataAvailable || s.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("conditions = %+v", s.Conditions)
	}
}

// A synced backup committed again (it cannot be, but its marker is rewritten by a retried
// finalize) keeps its origin's UID: DataUID.
func TestMarkerOfASyncedBackupKeepsItsOrigin(t *testing.T) {
	b := finished()
	b.UID = "uid-b"
	b.Status.OriginUID = "uid-a"
	m, err := Marker(b, cairnv1.BackupPhaseCompleted, "1.1.0", storage.ArchiveDigest{}, completed, 0)
	if err != nil || m.UID != "uid-a" {
		t.Errorf("Marker UID = %q, %v; want uid-a", m.UID, err)
	}
}

// A marker written before it carried spec, labels and final status still makes an object:
// the start falls back to the completion (so deleting it deletes its data), no expiration.
func TestObjectFromAnOldMarker(t *testing.T) {
	old := storage.BackupMetadata{FormatVersion: "1.0.0", Namespace: "team", Name: "b", UID: "u", Phase: "PartiallyFailed",
		ArchiveSHA256: "abc", ArchiveSize: 1, CompletionTimestamp: completed, Errors: 3}
	b, err := Object(storage.CommittedBackup{Namespace: "team", Name: "b"}, old, "dr", operatorNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b.Spec, cairnv1.BackupSpec{StorageLocation: "dr"}) {
		t.Errorf("spec = %+v", b.Spec)
	}
	s, err := Status(old, "dr", 1, now)
	if err != nil {
		t.Fatal(err)
	}
	if s.Phase != cairnv1.BackupPhasePartiallyFailed || !s.StartTimestamp.Time.Equal(completed) || s.Expiration != nil || s.Errors != 3 {
		t.Errorf("status = %+v", s)
	}
}

func TestObjectRefuses(t *testing.T) {
	good := func() storage.BackupMetadata {
		return storage.BackupMetadata{Namespace: "team", Name: "b", Phase: "Completed", Spec: json.RawMessage(`{}`)}
	}
	at := storage.CommittedBackup{Namespace: "team", Name: "b"}
	tests := []struct {
		name    string
		stored  storage.CommittedBackup
		marker  func(m *storage.BackupMetadata)
		wantErr string
	}{
		{name: "a marker that names another namespace", stored: at, marker: func(m *storage.BackupMetadata) { m.Namespace = "other" },
			wantErr: "its commit marker names backup other/b, not team/b"},
		{name: "a marker that names another backup", stored: at, marker: func(m *storage.BackupMetadata) { m.Name = "c" },
			wantErr: "its commit marker names backup team/c, not team/b"},
		{name: "a marker of a backup that failed", stored: at, marker: func(m *storage.BackupMetadata) { m.Phase = "Failed" },
			wantErr: `its commit marker has phase "Failed", not Completed or PartiallyFailed`},
		{name: "a spec that cannot be read", stored: at, marker: func(m *storage.BackupMetadata) { m.Spec = json.RawMessage(`{"includedNamespaces": 3}`) },
			wantErr: "its commit marker's spec cannot be read"},
		{name: "a team's backup that selects another namespace", stored: at,
			marker:  func(m *storage.BackupMetadata) { m.Spec = json.RawMessage(`{"includedNamespaces": ["other"]}`) },
			wantErr: "its spec breaks the tenancy rule in namespace team"},
		{name: "a team's backup of cluster-scoped resources", stored: at,
			marker:  func(m *storage.BackupMetadata) { m.Spec = json.RawMessage(`{"includeClusterResources": true}`) },
			wantErr: "its spec breaks the tenancy rule in namespace team"},
		{name: "a checksum longer than a SHA-256", stored: at, marker: func(m *storage.BackupMetadata) { m.ArchiveSHA256 = strings.Repeat("a", 65) },
			wantErr: "too long"},
		{name: "a negative count", stored: at, marker: func(m *storage.BackupMetadata) { m.Warnings = -1 }, wantErr: "out of range"},
		{name: "a count beyond int32", stored: at, marker: func(m *storage.BackupMetadata) { m.Errors = 1 << 40 }, wantErr: "out of range"},
		{name: "a key that cannot be a Backup's name", stored: storage.CommittedBackup{Namespace: "team", Name: "../x"},
			marker: func(m *storage.BackupMetadata) { m.Name = "../x" }, wantErr: `not a Backup's name "../x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := good()
			tt.marker(&m)
			_, err := Object(tt.stored, m, "dr", operatorNamespace)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Object error = %v, want %q", err, tt.wantErr)
			}
		})
	}

	// The operator's namespace holds the administrators' backups, which may select anything.
	admin := good()
	admin.Namespace = operatorNamespace
	admin.Spec = json.RawMessage(`{"includeClusterResources": true, "cancel": true}`)
	b, err := Object(storage.CommittedBackup{Namespace: operatorNamespace, Name: "b"}, admin, "dr", operatorNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if b.Spec.Cancel || !ptr.Deref(b.Spec.IncludeClusterResources, false) {
		t.Errorf("spec = %+v, want not cancelled and with cluster resources", b.Spec)
	}
}
