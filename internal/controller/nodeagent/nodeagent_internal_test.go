package nodeagent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

// The agent writes only into the incarnation of the pod a PodVolumeRestore names (its UID),
// never into one of the same name, and never when it names none.
func TestSamePod(t *testing.T) {
	ref := func(uid types.UID) cairnv1.PodReference {
		return cairnv1.PodReference{Namespace: "team-a", Name: "app2", UID: uid}
	}
	pod := func(uid types.UID) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "app2", UID: uid}}
	}
	for _, tc := range []struct {
		name string
		ref  cairnv1.PodReference
		pod  *corev1.Pod
		err  string
	}{
		{"the pod named", ref("p-1"), pod("p-1"), ""},
		{"another pod of the name", ref("p-1"), pod("p-evil"), "pod team-a/app2 was replaced after the restore created it"},
		{"no UID named", ref(""), pod("p-1"), "pod team-a/app2 was replaced after the restore created it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := samePod(tc.ref, tc.pod, restoredPodReplaced)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("samePod = %v, want %q", err, tc.err)
			}
		})
	}
	if err := restoredPodKnown(ref("")); err == nil || !strings.Contains(err.Error(), "names no UID of the pod team-a/app2 the restore created") {
		t.Errorf("restoredPodKnown without a UID = %v", err)
	}
	if err := restoredPodKnown(ref("p-1")); err != nil {
		t.Errorf("restoredPodKnown = %v", err)
	}
}
