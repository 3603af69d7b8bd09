package podvolume

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

func TestWithHelper(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "migrate"}},
		Volumes:        []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}}
	rs := &cairnv1.Restore{Spec: cairnv1.RestoreSpec{ItemOperationTimeout: &metav1.Duration{Duration: 90 * time.Minute}}}
	withHelper(pod, "cairn/manager:1", []string{"data", "wal"}, rs)
	if !waitsForData(pod) || pod.Spec.InitContainers[1].Name != "migrate" {
		t.Fatalf("init containers %v: the helper must come first, before the pod's own", pod.Spec.InitContainers)
	}
	h := pod.Spec.InitContainers[0]
	if strings.Join(h.Args, " ") != "restore-helper --volumes=data,wal --timeout=1h30m0s" || h.Image != "cairn/manager:1" {
		t.Fatalf("helper %s %v", h.Image, h.Args)
	}
	sc := h.SecurityContext
	if !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || len(sc.Capabilities.Drop) != 1 || len(sc.Capabilities.Add) != 0 {
		t.Fatalf("helper security context %+v", sc)
	}
	if len(h.VolumeMounts) != 1 || h.VolumeMounts[0].Name != RestoreMarkerVolume || !h.VolumeMounts[0].ReadOnly {
		t.Fatalf("helper mounts %v: only its marker volume, read-only", h.VolumeMounts)
	}
	last := pod.Spec.Volumes[len(pod.Spec.Volumes)-1]
	if last.Name != RestoreMarkerVolume || last.EmptyDir == nil {
		t.Fatalf("volumes %v", pod.Spec.Volumes)
	}
}

func TestProgressOfRestores(t *testing.T) {
	pvr := func(volume string, phase cairnv1.PodVolumePhase, done, total int64, message string) cairnv1.PodVolumeRestore {
		return cairnv1.PodVolumeRestore{Spec: cairnv1.PodVolumeRestoreSpec{Volume: volume},
			Status: cairnv1.PodVolumeStatus{Phase: phase, BytesDone: done, BytesTotal: total, Message: message}}
	}
	base := backup.OperationProgress{Units: backup.UnitsBytes, Description: "volumes of pod shop/db-0"}
	for _, tc := range []struct {
		name      string
		pvrs      []cairnv1.PodVolumeRestore
		completed bool
		err       string
		done      int64
		total     int64
	}{
		{"running", []cairnv1.PodVolumeRestore{pvr("data", cairnv1.PodVolumePhaseInProgress, 10, 100, ""), pvr("wal", "", 0, 0, "")}, false, "", 10, 100},
		{"all done", []cairnv1.PodVolumeRestore{pvr("data", cairnv1.PodVolumePhaseCompleted, 100, 100, ""), pvr("wal", cairnv1.PodVolumePhaseCompleted, 5, 5, "")}, true, "", 105, 105},
		{"one failed: it is named with why", []cairnv1.PodVolumeRestore{pvr("data", cairnv1.PodVolumePhaseCompleted, 100, 100, ""),
			pvr("wal", cairnv1.PodVolumePhaseFailed, 1, 5, "the node agent restarted during the restore")}, false,
			"restoring volumes of pod shop/db-0: volume wal: the node agent restarted during the restore", 101, 105},
		{"one cancelled", []cairnv1.PodVolumeRestore{pvr("data", cairnv1.PodVolumePhaseCancelled, 0, 0, "")}, false, "volume data: Cancelled", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := progressOfRestores(base, tc.pvrs)
			if p.Completed != tc.completed || p.NCompleted != tc.done || p.NTotal != tc.total || !strings.Contains(p.Err, tc.err) || (tc.err == "") != (p.Err == "") {
				t.Fatalf("progress %+v", p)
			}
		})
	}
}

// A record of a volume's copy must be of the kind of volume the pod had, as backed up: the
// identity the snapshot is checked against follows from it.
func TestRecordFits(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}},
		{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}}}
	for _, tc := range []struct {
		name string
		snap Snapshot
		err  string
	}{
		{"a claim's copy for its claim", Snapshot{Volume: "data", PersistentVolumeClaim: "data-db-0", PersistentVolumeClaimUID: "u-1"}, ""},
		{"a generic ephemeral volume's claim", Snapshot{Volume: "scratch", PersistentVolumeClaim: "db-0-scratch", PersistentVolumeClaimUID: "u-2"}, ""},
		{"an emptyDir's copy", Snapshot{Volume: "cache"}, ""},
		{"another claim's copy for the claim", Snapshot{Volume: "data", PersistentVolumeClaim: "other", PersistentVolumeClaimUID: "u-3"},
			`volume data: the record names a copy of claim "other", but the pod's volume is claim data-db-0`},
		{"an emptyDir's copy for a claim", Snapshot{Volume: "data"}, `the record names a copy of claim "", but the pod's volume is claim data-db-0`},
		{"a claim's copy for an emptyDir", Snapshot{Volume: "cache", PersistentVolumeClaim: "data-db-0", PersistentVolumeClaimUID: "u-1"},
			"volume cache: the record names a copy of claim data-db-0, but the pod's volume is no claim"},
		{"a volume the pod has not", Snapshot{Volume: "logs"}, "volume logs: the pod as backed up has no volume of that name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := recordFits(pod, tc.snap)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("recordFits = %v, want %q", err, tc.err)
			}
		})
	}
}
