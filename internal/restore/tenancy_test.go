package restore

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

func TestTeamMayWrite(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	tests := []struct {
		name                 string
		gr                   schema.GroupResource
		target, objNamespace string
		wantErr              string
	}{
		{name: "into its own namespace", gr: cm, target: "team-a", objNamespace: "team-a"},
		{name: "into another namespace (namespaceMapping)", gr: cm, target: "team-b", objNamespace: "team-b", wantErr: "may only restore into its own namespace"},
		{name: "a cluster-scoped Namespace", gr: namespacesGR, target: "", objNamespace: "", wantErr: "never creates or changes a cluster-scoped object"},
		{name: "a cluster-scoped VolumeSnapshotContent", gr: volumeSnapshotContentsGR, wantErr: "never creates or changes a cluster-scoped object"},
		{name: "a PersistentVolume", gr: pvsGR, wantErr: "cluster-scoped"},
		{name: "an object that says it is elsewhere", gr: cm, target: "team-a", objNamespace: "team-b", wantErr: `says it is in namespace "team-b"`},
		{name: "an object that says it is cluster-scoped", gr: cm, target: "team-a", objNamespace: "", wantErr: `says it is in namespace ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := TeamMayWrite("team-a", tt.gr, tt.target, tt.objNamespace, "x")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("TeamMayWrite: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("TeamMayWrite = %v, want an error with %q", err, tt.wantErr)
			case err != nil && !strings.Contains(err.Error(), tt.gr.String()):
				t.Errorf("TeamMayWrite = %v: it does not name the item", err)
			}
		})
	}
}

func TestSnapshotRecordAllows(t *testing.T) {
	local := snapshotRecord{backup: "team-a/b", operatorNamespace: "cairn-system", handles: map[string]bool{"snap-team-a": true}}
	synced := snapshotRecord{backup: "team-a/b", operatorNamespace: "cairn-system", syncedFrom: "dr", handles: map[string]bool{}}
	tests := []struct {
		name    string
		rec     snapshotRecord
		handle  string
		wantErr string
	}{
		{name: "a handle this cluster took for the backup", rec: local, handle: "snap-team-a"},
		{name: "another team's handle", rec: local, handle: "snap-team-b", wantErr: `snapshot handle "snap-team-b" is not one this cluster took for backup team-a/b`},
		{name: "no handle", rec: local, handle: "", wantErr: "is not one this cluster took"},
		{name: "a backup known only from storage", rec: synced, handle: "snap-team-a",
			wantErr: "backup team-a/b is known only from storage (synced from location dr): this cluster has no record of its CSI snapshots"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rec.allows(tt.handle)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("allows: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("allows = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

// snapshotPair is a VolumeSnapshot in namespace ns labelled with backup UID uid, bound to a
// content whose volumeSnapshotRef is (refNamespace, refName, refUID) and whose handle is handle.
func snapshotPair(ns, name, uid, content, refNamespace, refName, refUID, handle string) (vs, vsc *unstructured.Unstructured) {
	vs = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": "vs-uid-" + name, "labels": map[string]any{backup.BackupUIDLabel: uid}},
		"status":   map[string]any{"boundVolumeSnapshotContentName": content, "readyToUse": true},
	}}
	ref := map[string]any{"namespace": refNamespace, "name": refName}
	if refUID != "" {
		ref["uid"] = refUID
	}
	vsc = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
		"metadata": map[string]any{"name": content},
		"spec":     map[string]any{"volumeSnapshotRef": ref},
		"status":   map[string]any{"snapshotHandle": handle},
	}}
	return vs, vsc
}

func TestReadSnapshotRecord(t *testing.T) {
	backupObj := func(annotations map[string]any) *unstructured.Unstructured {
		md := map[string]any{"name": "b", "namespace": "team-a", "uid": "uid-b"}
		if annotations != nil {
			md["annotations"] = annotations
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cairn.dev/v1alpha1", "kind": "Backup", "metadata": md}}
	}
	var objs []runtime.Object
	objs = append(objs, backupObj(nil))
	for _, p := range [][2]*unstructured.Unstructured{
		// Taken by the operator for the backup, bound both ways.
		pair(snapshotPair("team-a", "data-1", "uid-b", "c1", "team-a", "data-1", "", "h-own")),
		pair(snapshotPair("team-a", "data-2", "uid-b", "c2", "team-a", "data-2", "vs-uid-data-2", "h-own-uid")),
		// Labelled by a tenant, but the content points at another team's snapshot.
		pair(snapshotPair("team-a", "fake", "uid-b", "c3", "team-b", "theirs", "", "h-team-b")),
		// The content names the snapshot, with another UID (an earlier one of that name).
		pair(snapshotPair("team-a", "data-3", "uid-b", "c4", "team-a", "data-3", "an-older-uid", "h-stale")),
		// Of another backup.
		pair(snapshotPair("team-a", "other", "uid-other", "c5", "team-a", "other", "", "h-other-backup")),
		// Labelled with the backup's UID in another namespace.
		pair(snapshotPair("team-b", "data-1", "uid-b", "c6", "team-b", "data-1", "", "h-elsewhere")),
	} {
		objs = append(objs, p[0], p[1])
	}
	// A snapshot whose content is gone.
	gone, _ := snapshotPair("team-a", "gone", "uid-b", "c-gone", "team-a", "gone", "", "h-gone")
	objs = append(objs, gone)
	listKinds := map[schema.GroupVersionResource]string{volumeSnapshotsGVR: "VolumeSnapshotList", volumeSnapshotContentsGVR: "VolumeSnapshotContentList", backupsGVR: "BackupList"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, objs...)

	rec, err := readSnapshotRecord(context.Background(), dyn, "team-a", "b", "cairn-system")
	if err != nil {
		t.Fatal(err)
	}
	if rec.syncedFrom != "" || len(rec.handles) != 2 || !rec.handles["h-own"] || !rec.handles["h-own-uid"] {
		t.Errorf("record = %+v, want the handles h-own and h-own-uid only", rec)
	}

	synced := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds,
		append([]runtime.Object{backupObj(map[string]any{cairnv1.SyncedFromAnnotation: "dr"})}, objs[1:]...)...)
	rec, err = readSnapshotRecord(context.Background(), synced, "team-a", "b", "cairn-system")
	if err != nil {
		t.Fatal(err)
	}
	if rec.syncedFrom != "dr" || len(rec.handles) != 0 {
		t.Errorf("record of a synced backup = %+v, want no handles, synced from dr", rec)
	}

	if _, err := readSnapshotRecord(context.Background(), dyn, "team-a", "missing", "cairn-system"); err == nil {
		t.Error("a backup that is not there has a record")
	}
}

func pair(vs, vsc *unstructured.Unstructured) [2]*unstructured.Unstructured {
	return [2]*unstructured.Unstructured{vs, vsc}
}
