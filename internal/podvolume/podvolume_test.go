package podvolume

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

var pod = cairnv1.PodReference{Namespace: "shop", Name: "db-0", UID: "pod-uid-1"}

func TestName(t *testing.T) {
	long := strings.Repeat("a", 39) + "." + strings.Repeat("b", 200)
	for _, tc := range []struct {
		name       string
		a, b       string // names from two calls that must be equal (same) or differ
		same       bool
		backupName string
	}{
		{"same claim from two pods", Name("nightly", "b1", pod, "data", "pvc-1"), Name("nightly", "b1", cairnv1.PodReference{Namespace: "shop", Name: "db-1", UID: "pod-uid-2"}, "other", "pvc-1"), true, "nightly"},
		{"two claims", Name("nightly", "b1", pod, "data", "pvc-1"), Name("nightly", "b1", pod, "data", "pvc-2"), false, "nightly"},
		{"same claim, another backup", Name("nightly", "b1", pod, "data", "pvc-1"), Name("nightly", "b2", pod, "data", "pvc-1"), false, "nightly"},
		{"two emptyDirs of a pod", Name("nightly", "b1", pod, "cache", ""), Name("nightly", "b1", pod, "scratch", ""), false, "nightly"},
		{"an emptyDir of two pods", Name("nightly", "b1", pod, "cache", ""), Name("nightly", "b1", cairnv1.PodReference{UID: "pod-uid-2"}, "cache", ""), false, "nightly"},
		{"a long name is cut and stays valid", Name(long, "b1", pod, "cache", ""), Name(long, "b1", pod, "cache", ""), true, long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if (tc.a == tc.b) != tc.same {
				t.Fatalf("Name gave %q and %q, want same=%v", tc.a, tc.b, tc.same)
			}
			for _, n := range []string{tc.a, tc.b} {
				if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
					t.Fatalf("%q is not a valid object name: %v", n, errs)
				}
			}
		})
	}
}

func TestTags(t *testing.T) {
	if got := Tags(pod, "data", "pvc-1"); len(got) != 1 || got["pvc-uid"] != "pvc-1" {
		t.Fatalf("claim tags = %v: want only the claim's UID, so any pod mounting it continues its chain", got)
	}
	got := Tags(pod, "cache", "")
	if got["pod"] != "db-0" || got["pod-namespace"] != "shop" || got["volume"] != "cache" || len(got) != 3 {
		t.Fatalf("emptyDir tags = %v", got)
	}
	if _, ok := got["pod-uid"]; ok {
		t.Fatal("emptyDir tags hold the pod UID: a replacement pod would start from nothing")
	}
}

func record(t *testing.T, s Snapshot) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSnapshots(t *testing.T) {
	repo := cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "shop"}
	good := Snapshot{Pod: pod, Volume: "data", Repository: repo, SnapshotID: "k1"}
	for _, tc := range []struct {
		name    string
		ops     []backup.Operation
		want    []string
		wantErr string
	}{
		{"only completed volume copies", []backup.Operation{
			{Action: ActionName, OperationID: "a", Phase: backup.OperationCompleted, Result: record(t, good)},
			{Action: ActionName, OperationID: "b", Phase: backup.OperationFailed},
			{Action: ActionName, OperationID: "c", Phase: backup.OperationInProgress},
			{Action: "cairn.dev/csi-snapshot", OperationID: "d", Phase: backup.OperationCompleted, Result: record(t, good)},
		}, []string{"k1"}, ""},
		{"a completed copy without a record is skipped", []backup.Operation{
			{Action: ActionName, OperationID: "a", Phase: backup.OperationCompleted},
		}, nil, ""},
		{"a record that cannot be read is an error", []backup.Operation{
			{Action: ActionName, OperationID: "a", Phase: backup.OperationCompleted, Result: json.RawMessage(`{"snapshotID":`)},
		}, nil, "cannot be read"},
		{"a record without a repository is an error", []backup.Operation{
			{Action: ActionName, OperationID: "a", Phase: backup.OperationCompleted, Result: record(t, Snapshot{SnapshotID: "k1"})},
		}, nil, "names no snapshot or repository"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Snapshots(tc.ops)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, s := range got {
				ids = append(ids, s.SnapshotID)
			}
			if strings.Join(ids, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("snapshots = %v, want %v", ids, tc.want)
			}
		})
	}
}

func TestProgressOf(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
	base := cairnv1.PodVolumeBackup{Spec: cairnv1.PodVolumeBackupSpec{Pod: pod, Volume: "data",
		Repository: cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "shop"}}}
	for _, tc := range []struct {
		name      string
		status    cairnv1.PodVolumeStatus
		completed bool
		err       string
		done      int64
	}{
		{"new", cairnv1.PodVolumeStatus{}, false, "", 0},
		{"copying", cairnv1.PodVolumeStatus{Phase: cairnv1.PodVolumePhaseInProgress, BytesDone: 10, BytesTotal: 100, StartTimestamp: &started}, false, "", 10},
		{"completed", cairnv1.PodVolumeStatus{Phase: cairnv1.PodVolumePhaseCompleted, BytesDone: 100, BytesTotal: 100, SnapshotID: "k1"}, true, "", 100},
		{"failed", cairnv1.PodVolumeStatus{Phase: cairnv1.PodVolumePhaseFailed, Message: "pod shop/db-0 is gone"}, false, "pod shop/db-0 is gone", 0},
		{"cancelled without a message", cairnv1.PodVolumeStatus{Phase: cairnv1.PodVolumePhaseCancelled}, false, "Cancelled", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvb := base.DeepCopy()
			pvb.Status = tc.status
			p, err := progressOf(pvb)
			if err != nil {
				t.Fatal(err)
			}
			if p.Completed != tc.completed || p.NCompleted != tc.done || p.Units != backup.UnitsBytes {
				t.Fatalf("progress = %+v", p)
			}
			if (tc.err == "") != (p.Err == "") || !strings.Contains(p.Err, tc.err) {
				t.Fatalf("Err = %q, want %q", p.Err, tc.err)
			}
			if tc.completed {
				var s Snapshot
				if err := json.Unmarshal(p.Result, &s); err != nil || s.SnapshotID != "k1" || s.Repository.Namespace != "shop" {
					t.Fatalf("result %s: %v", p.Result, err)
				}
			}
			if tc.status.StartTimestamp != nil && !p.Started.Equal(started.Time) {
				t.Fatalf("Started = %v", p.Started)
			}
		})
	}
}

// TestRestoredVolumes: a restore writes a pod's snapshots read from its own namespace's
// repository in the backup's location as this cluster names it (a second cluster may name the
// first one's location otherwise), and refuses a record of another namespace's repository.
func TestRestoredVolumes(t *testing.T) {
	record := func(pod, volume, repoLocation, repoNamespace string) backup.Operation {
		s := Snapshot{Pod: cairnv1.PodReference{Namespace: "shop", Name: pod}, Volume: volume, SnapshotID: "snap-" + volume,
			Repository: cairnv1.RepositoryReference{StorageLocation: repoLocation, Namespace: repoNamespace}}
		result, _ := json.Marshal(s)
		return backup.Operation{Action: ActionName, OperationID: pod + "/" + volume, Phase: backup.OperationCompleted, Result: result}
	}
	for _, tc := range []struct {
		name     string
		ops      []backup.Operation
		location string
		want     map[string]cairnv1.RepositoryReference
		refused  string
	}{
		{name: "the same cluster: the location as recorded",
			ops:      []backup.Operation{record("db-0", "data", "default", "shop"), record("db-1", "data", "default", "shop")},
			location: "default",
			want:     map[string]cairnv1.RepositoryReference{"data": {StorageLocation: "default", Namespace: "shop"}}},
		{name: "a second cluster naming the location otherwise: read in its own location's name",
			ops:      []backup.Operation{record("db-0", "data", "s3", "shop"), record("db-0", "cache", "s3", "shop")},
			location: "cluster-a",
			want: map[string]cairnv1.RepositoryReference{"data": {StorageLocation: "cluster-a", Namespace: "shop"},
				"cache": {StorageLocation: "cluster-a", Namespace: "shop"}}},
		{name: "a record of another namespace's repository is refused",
			ops:      []backup.Operation{record("db-0", "data", "default", "bank"), record("db-0", "cache", "default", "shop")},
			location: "default",
			want:     map[string]cairnv1.RepositoryReference{"cache": {StorageLocation: "default", Namespace: "shop"}},
			refused:  "volume data: its snapshot is in the repository for namespace bank, not the pod's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snaps, refused, err := restoredVolumes(tc.ops, "shop", "db-0", tc.location)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]cairnv1.RepositoryReference{}
			for volume, s := range snaps {
				got[volume] = s.Repository
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for volume, ref := range tc.want {
				if got[volume] != ref {
					t.Errorf("volume %s: got %v, want %v", volume, got[volume], ref)
				}
			}
			if strings.Join(refused, "; ") != tc.refused {
				t.Errorf("refused %q, want %q", refused, tc.refused)
			}
		})
	}
}

// TestRestoredVolumesIdentity: a Cairn snapshot is written only if the repository says it is of
// the volume (its tags, as the backup tagged that volume's copies): the identity comes from the
// pod as backed up and the volume, never from what the record says the snapshot is of, so a
// record naming another volume's snapshot, or claiming any source, writes nothing.
func TestRestoredVolumesIdentity(t *testing.T) {
	forged := Snapshot{Pod: cairnv1.PodReference{Namespace: "shop", Name: "db-0"}, Volume: "cache", SnapshotID: "snap-of-another-pod",
		Repository: cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "shop"},
		Source:     "/", SourceTags: map[string]string{"pod": "db-1"}}
	claim := Snapshot{Pod: cairnv1.PodReference{Namespace: "shop", Name: "db-0"}, Volume: "data", SnapshotID: "snap-data",
		PersistentVolumeClaim: "data-db-0", PersistentVolumeClaimUID: "u-1",
		Repository: cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "shop"}}
	var ops []backup.Operation
	for _, s := range []Snapshot{forged, claim} {
		result, _ := json.Marshal(s)
		ops = append(ops, backup.Operation{Action: ActionName, OperationID: s.Volume, Phase: backup.OperationCompleted, Result: result})
	}
	snaps, refused, err := restoredVolumes(ops, "shop", "db-0", "default")
	if err != nil || len(refused) > 0 {
		t.Fatalf("restoredVolumes: %v, %v", refused, err)
	}
	for volume, want := range map[string]map[string]string{
		"cache": {"pod-namespace": "shop", "pod": "db-0", "volume": "cache"},
		"data":  {"pvc-uid": "u-1"},
	} {
		if s := snaps[volume]; s.Source != "" || !reflect.DeepEqual(s.SourceTags, want) {
			t.Errorf("volume %s: must be of source %q, tags %v; want tags %v only", volume, s.Source, s.SourceTags, want)
		}
	}
}
