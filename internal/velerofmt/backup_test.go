package velerofmt

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

func at(s string) *metav1.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	mt := metav1.NewTime(t)
	return &mt
}

func TestMarker(t *testing.T) {
	yes := true
	ttl := metav1.Duration{Duration: 720 * time.Hour}
	full := Backup{
		APIVersion: "velero.io/v1", Kind: "Backup",
		Metadata: BackupMetadata{Name: "nightly", UID: "0b6d1f2e-uid", Labels: map[string]string{"velero.io/schedule-name": "daily", "velero.io/storage-location": "default"}},
		Spec: BackupSpec{
			IncludedNamespaces: []string{"shop"}, ExcludedResources: []string{"events"}, IncludeClusterResources: &yes,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, TTL: &ttl,
		},
		Status: BackupStatus{
			FormatVersion: "1.1.0", Phase: "PartiallyFailed",
			StartTimestamp: at("2026-11-01T10:00:00Z"), CompletionTimestamp: at("2026-11-01T10:01:00Z"), Expiration: at("2026-12-01T10:00:00Z"),
			Warnings: 2, Errors: 1, Progress: &BackupProgress{TotalItems: 12, ItemsBackedUp: 11},
			BackupItemOperationsAttempted: 3, BackupItemOperationsCompleted: 2, BackupItemOperationsFailed: 1,
		},
	}
	wantSpec, _ := json.Marshal(cairnv1.BackupSpec{
		IncludedNamespaces: []string{"shop"}, ExcludedResources: []string{"events"}, IncludeClusterResources: &yes,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, TTL: &ttl,
	})
	minimal := Backup{APIVersion: "velero.io/v1", Kind: "Backup", Metadata: BackupMetadata{Name: "old", UID: "u"},
		Status: BackupStatus{Phase: "Completed", StartTimestamp: at("2020-01-01T00:00:00Z")}}
	noSpec, _ := json.Marshal(cairnv1.BackupSpec{})
	tests := []struct {
		name    string
		in      Backup
		as      string
		want    storage.BackupMetadata
		wantErr string
	}{
		{
			name: "every field Cairn shows, under the cluster's name",
			in:   full, as: "velero-nightly",
			want: storage.BackupMetadata{
				FormatVersion: "1.1.0", Namespace: "cairn-system", Name: "velero-nightly", UID: "0b6d1f2e-uid", Phase: "PartiallyFailed",
				StartTimestamp: at("2026-11-01T10:00:00Z").Time, CompletionTimestamp: at("2026-11-01T10:01:00Z").Time,
				Expiration: at("2026-12-01T10:00:00Z").Time, Warnings: 2, Errors: 1, TotalItems: 12, ItemsBackedUp: 11,
				OperationsAttempted: 3, OperationsCompleted: 2, OperationsFailed: 1,
				Spec: wantSpec, Labels: map[string]string{"velero.io/schedule-name": "daily", "velero.io/storage-location": "default"},
			},
		},
		{
			name: "no format version, no completion: format 1.0.0, completed when started",
			in:   minimal, as: "old",
			want: storage.BackupMetadata{
				FormatVersion: "1.0.0", Namespace: "cairn-system", Name: "old", UID: "u", Phase: "Completed",
				StartTimestamp: at("2020-01-01T00:00:00Z").Time, CompletionTimestamp: at("2020-01-01T00:00:00Z").Time, Spec: noSpec,
			},
		},
		{name: "Failed is skipped", in: Backup{Metadata: BackupMetadata{Name: "f"}, Status: BackupStatus{Phase: "Failed"}}, as: "f", wantErr: "Velero backup f has phase Failed"},
		{name: "InProgress is skipped", in: Backup{Metadata: BackupMetadata{Name: "r"}, Status: BackupStatus{Phase: "InProgress"}}, as: "r", wantErr: "has phase InProgress"},
		{name: "no phase is New, skipped", in: Backup{Metadata: BackupMetadata{Name: "n"}}, as: "n", wantErr: "has phase New"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Marker(tt.in, "cairn-system", tt.as)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrPhaseSkipped) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Marker = %v, want ErrPhaseSkipped saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Marker =\n%+v\nwant\n%+v", got, tt.want)
			}
			if got.ArchiveSHA256 != "" || got.ArchiveSize != 0 {
				t.Errorf("a Velero backup's marker records a digest: %q, %d", got.ArchiveSHA256, got.ArchiveSize)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name, data, wantErr string
	}{
		{name: "a Velero Backup", data: `{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"a"},"status":{"phase":"Completed"}}`},
		{name: "a Restore", data: `{"apiVersion":"velero.io/v1","kind":"Restore"}`, wantErr: `kind "Restore"`},
		{name: "another group", data: `{"apiVersion":"cairn.dev/v1alpha1","kind":"Backup"}`, wantErr: `apiVersion "cairn.dev/v1alpha1"`},
		{name: "not JSON", data: `<xml/>`, wantErr: "invalid character"},
		{name: "too large", data: `{"kind":"` + strings.Repeat("x", MaxBackupObjectSize) + `"}`, wantErr: "larger than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.data))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrNotVeleroBackup) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Parse = %v, want ErrNotVeleroBackup saying %q", err, tt.wantErr)
			}
		})
	}
}
