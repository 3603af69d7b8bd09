package nodeagent

import (
	"testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestNextStep(t *testing.T) {
	for _, tc := range []struct {
		phase   cairnv1.PodVolumePhase
		cancel  bool
		running bool
		want    step
	}{
		{"", false, false, stepStart},
		{cairnv1.PodVolumePhaseNew, false, false, stepStart},
		{cairnv1.PodVolumePhaseNew, true, false, stepCancel},
		{cairnv1.PodVolumePhaseInProgress, false, true, stepNone},
		{cairnv1.PodVolumePhaseInProgress, true, true, stepStop},
		// Not running here while InProgress: this agent restarted.
		{cairnv1.PodVolumePhaseInProgress, false, false, stepFail},
		{cairnv1.PodVolumePhaseInProgress, true, false, stepCancel},
		{cairnv1.PodVolumePhaseCompleted, true, false, stepNone},
		{cairnv1.PodVolumePhaseFailed, false, false, stepNone},
		{cairnv1.PodVolumePhaseCancelled, true, true, stepNone},
	} {
		if got := nextStep(tc.phase, tc.cancel, tc.running); got != tc.want {
			t.Errorf("nextStep(%q, cancel=%v, running=%v) = %s, want %s", tc.phase, tc.cancel, tc.running, got, tc.want)
		}
	}
}
