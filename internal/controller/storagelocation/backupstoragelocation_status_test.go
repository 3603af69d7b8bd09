package storagelocation

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestLocationStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC))
	unavailable := cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseUnavailable, Message: "old problem"}
	tests := []struct {
		name         string
		prev         cairnv1.BackupStorageLocationStatus
		err          error
		conflicting  []string
		isDefault    bool
		wantPhase    cairnv1.StorageLocationPhase
		wantMessage  string
		wantConflict metav1.ConditionStatus
	}{
		{name: "valid", err: nil, wantPhase: cairnv1.StorageLocationPhaseAvailable, wantConflict: metav1.ConditionFalse},
		{name: "recovers and clears the message", prev: unavailable, wantPhase: cairnv1.StorageLocationPhaseAvailable, wantConflict: metav1.ConditionFalse},
		{name: "invalid", err: errors.New(`bucket "x" does not exist`), wantPhase: cairnv1.StorageLocationPhaseUnavailable,
			wantMessage: `bucket "x" does not exist`, wantConflict: metav1.ConditionFalse},
		{name: "one of two defaults", isDefault: true, conflicting: []string{"a", "b"}, wantPhase: cairnv1.StorageLocationPhaseAvailable, wantConflict: metav1.ConditionTrue},
		{name: "not a default while two others conflict", conflicting: []string{"a", "b"}, wantPhase: cairnv1.StorageLocationPhaseAvailable, wantConflict: metav1.ConditionFalse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := locationStatus(tt.prev, 3, tt.err, tt.conflicting, tt.isDefault, now)
			if got.Phase != tt.wantPhase || got.Message != tt.wantMessage || !got.LastValidationTime.Equal(&now) {
				t.Errorf("got %+v", got)
			}
			c := meta.FindStatusCondition(got.Conditions, cairnv1.StorageLocationConditionDefaultConflict)
			if c == nil || c.Status != tt.wantConflict || c.ObservedGeneration != 3 {
				t.Errorf("DefaultConflict = %+v, want %s", c, tt.wantConflict)
			}
		})
	}
}
