package nodeagent

import (
	"os"
	"path/filepath"
	"testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/podvolume"
)

// The restored pod can write its marker directory: a link it plants where the agent writes
// is never written through.
func TestMarkNeverWritesThroughALink(t *testing.T) {
	for _, tt := range []struct {
		name  string
		phase cairnv1.PodVolumePhase
		file  string
	}{
		{"done", cairnv1.PodVolumePhaseCompleted, "data" + podvolume.DoneMarkerSuffix},
		{"failed", cairnv1.PodVolumePhaseFailed, "data" + podvolume.FailedMarkerSuffix},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pods := t.TempDir()
			a := &Agent{PodsDir: pods}
			pvr := &cairnv1.PodVolumeRestore{
				Spec:   cairnv1.PodVolumeRestoreSpec{Pod: cairnv1.PodReference{Namespace: "team-a", Name: "app", UID: "uid-a"}, Volume: "data"},
				Status: cairnv1.PodVolumeStatus{Phase: tt.phase, Message: "why"},
			}
			dir, err := a.markerDir(pvr)
			if err != nil {
				t.Fatal(err)
			}
			victim := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(victim, []byte("team-b's"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			// The name the agent wrote its marker under before renaming it, until issue 39.
			if err := os.Symlink(victim, filepath.Join(dir, tt.file+".tmp")); err != nil {
				t.Fatal(err)
			}
			a.mark(t.Context(), pvr)
			if b, _ := os.ReadFile(victim); string(b) != "team-b's" {
				t.Fatalf("the victim holds %q", b)
			}
			info, err := os.Lstat(filepath.Join(dir, tt.file))
			if err != nil || !info.Mode().IsRegular() {
				t.Fatalf("marker %s: %v, %v", tt.file, info, err)
			}
		})
	}
}
