package lifecycle

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// TestPhaseTimedOut: one rule for both kinds.
func TestPhaseTimedOut(t *testing.T) {
	created := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	entered := created.Add(2 * time.Hour)
	tests := []struct {
		name    string
		entered *time.Time
		now     time.Time
		timeout time.Duration
		want    bool
	}{
		{name: "within the timeout of entering the phase", entered: &entered, now: entered.Add(59 * time.Minute), timeout: time.Hour},
		{name: "exactly at the timeout", entered: &entered, now: entered.Add(time.Hour), timeout: time.Hour},
		{name: "past the timeout", entered: &entered, now: entered.Add(61 * time.Minute), timeout: time.Hour, want: true},
		{name: "measured from the phase, not from creation", entered: &entered, now: created.Add(150 * time.Minute), timeout: time.Hour},
		{name: "no transition time: measured from creation", now: created.Add(61 * time.Minute), timeout: time.Hour, want: true},
		{name: "zero timeout never times out", entered: &entered, now: entered.Add(1000 * time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objectMeta := metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}
			b := &cairnv1.Backup{ObjectMeta: objectMeta}
			rs := &cairnv1.Restore{ObjectMeta: objectMeta}
			if tt.entered != nil {
				e := metav1.NewTime(*tt.entered)
				b.Status.PhaseTransitionTime, rs.Status.PhaseTransitionTime = &e, &e
			}
			if got := Backups.PhaseTimedOut(b, tt.now, tt.timeout); got != tt.want {
				t.Errorf("backup: PhaseTimedOut = %v, want %v", got, tt.want)
			}
			if got := Restores.PhaseTimedOut(rs, tt.now, tt.timeout); got != tt.want {
				t.Errorf("restore: PhaseTimedOut = %v, want %v", got, tt.want)
			}
		})
	}
}
