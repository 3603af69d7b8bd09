package restore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	discoveryfake "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

// preferredDiscovery serves fixed preferred resources (the fake's ServerPreferredResources
// serves none).
type preferredDiscovery struct {
	*discoveryfake.FakeDiscovery
	lists []*metav1.APIResourceList
}

func (d preferredDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return d.lists, nil
}

func clusterDiscovery() preferredDiscovery {
	verbs := metav1.Verbs{"get", "list", "create", "patch"}
	return preferredDiscovery{FakeDiscovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}, lists: []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "namespaces", Kind: "Namespace", Verbs: verbs},
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: verbs},
			{Name: "persistentvolumeclaims", Kind: "PersistentVolumeClaim", Namespaced: true, Verbs: verbs},
			{Name: "persistentvolumes", Kind: "PersistentVolume", Verbs: verbs},
		}},
		{GroupVersion: "snapshot.storage.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "volumesnapshots", Kind: "VolumeSnapshot", Namespaced: true, Verbs: verbs},
			{Name: "volumesnapshotcontents", Kind: "VolumeSnapshotContent", Verbs: verbs},
		}},
		{GroupVersion: "rbac.authorization.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "roles", Kind: "Role", Namespaced: true, Verbs: verbs},
		}},
	}}
}

// craftedBackup commits a backup of namespace/name whose archive holds entries at exactly the
// paths given, as whoever can write the bucket could write it.
func craftedBackup(t *testing.T, namespace, name string, entries map[string]map[string]any) (storage.ObjectStore, storage.BackupKeys) {
	t.Helper()
	paths := make([]string, 0, len(entries))
	for path := range entries {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	ordered := make([]archiveEntry, 0, len(paths))
	for _, path := range paths {
		ordered = append(ordered, archiveEntry{path: path, obj: entries[path]})
	}
	return writeBackup(t, namespace, name, ordered)
}

// archiveEntry is one entry of an archive a test writes: an object at a path.
type archiveEntry struct {
	path string
	obj  map[string]any
}

// writeBackup commits a backup of namespace/name into a new filesystem store: an archive of
// entries, in their order, and a commit marker that matches it.
func writeBackup(t *testing.T, namespace, name string, entries []archiveEntry) (storage.ObjectStore, storage.BackupKeys) {
	t.Helper()
	store, err := storage.NewFilesystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return store, writeBackupTo(t, store, namespace, name, entries)
}

// writeBackupTo writes a committed backup of entries into store and returns its keys.
func writeBackupTo(t *testing.T, store storage.ObjectStore, namespace, name string, entries []archiveEntry) storage.BackupKeys {
	t.Helper()
	var buf bytes.Buffer
	w, err := archive.NewWriter(&buf, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := json.Marshal(e.obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddEntry(e.path, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	keys := storage.Layout{}.Backup(namespace, name)
	digest, err := storage.PutArchive(context.Background(), store, keys.Archive, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := storage.WriteMetadata(context.Background(), store, keys, storage.BackupMetadata{
		FormatVersion: archive.FormatVersion, Namespace: namespace, Name: name, Phase: "Completed",
		ArchiveSHA256: digest.SHA256, ArchiveSize: digest.Size,
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// The finding 3, run by a team's restore of a backup written into the bucket: the
// items whose body is not what their path says, and what a team may not write, are refused,
// each with an error naming it; the rest is restored.
func TestRunRefusesItemsThatAreNotWhatTheirPathSays(t *testing.T) {
	cmObj := func(namespace, name string) map[string]any { return object("v1", "ConfigMap", namespace, name, nil) }
	pvc := object("v1", "PersistentVolumeClaim", "team-a", "data", map[string]any{"spec": map[string]any{
		"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}})
	vs := object("snapshot.storage.k8s.io/v1", "VolumeSnapshot", "team-a", "data-snap", map[string]any{
		"spec":   map[string]any{"source": map[string]any{"persistentVolumeClaimName": "data"}},
		"status": map[string]any{"readyToUse": true, "boundVolumeSnapshotContentName": "content-b"}})
	vsc := object("snapshot.storage.k8s.io/v1", "VolumeSnapshotContent", "", "content-b", map[string]any{
		"spec":   map[string]any{"driver": "csi.example.com", "volumeSnapshotRef": map[string]any{"namespace": "team-b", "name": "theirs"}},
		"status": map[string]any{"snapshotHandle": "team-b-secret-snapshot"}})
	entries := map[string]map[string]any{
		archive.VersionPath: nil, // replaced below
		"resources/configmaps/namespaces/team-a/ok.json":                                     cmObj("team-a", "ok"),
		"resources/namespaces/namespaces/team-a/evil-ns.json":                                object("v1", "Namespace", "team-a", "evil-ns", map[string]any{"metadata": map[string]any{"name": "evil-ns", "namespace": "team-a", "labels": map[string]any{"pod-security.kubernetes.io/enforce": "privileged"}}}),
		"resources/namespaces/namespaces/team-a/team-b.json":                                 object("v1", "Namespace", "", "team-b", nil),
		"resources/configmaps/namespaces/team-a/renamed.json":                                cmObj("team-a", "other"),
		"resources/configmaps/namespaces/team-a/moved.json":                                  cmObj("team-b", "moved"),
		"resources/configmaps/namespaces/team-a/wrong-kind.json":                             object("v1", "Role", "team-a", "wrong-kind", nil),
		"resources/configmaps/namespaces/team-a/wrong-group.json":                            object("rbac.authorization.k8s.io/v1", "ConfigMap", "team-a", "wrong-group", nil),
		"resources/persistentvolumeclaims/namespaces/team-a/data.json":                       pvc,
		"resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/team-a/data-snap.json": vs,
		"resources/volumesnapshotcontents.snapshot.storage.k8s.io/cluster/content-b.json":    vsc,
	}
	delete(entries, archive.VersionPath)
	for _, synced := range []bool{false, true} {
		name := map[bool]string{false: "made here", true: "synced from storage"}[synced]
		t.Run(name, func(t *testing.T) {
			store, keys := craftedBackup(t, "team-a", "escape", entries)
			annotations := map[string]any{}
			if synced {
				annotations[cairnv1.SyncedFromAnnotation] = "dr"
			}
			backupObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cairn.dev/v1alpha1", "kind": "Backup",
				"metadata": map[string]any{"name": "escape", "namespace": "team-a", "uid": "uid-escape", "annotations": annotations}}}
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
				{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}: "VolumeSnapshotList",
			}, &unstructured.Unstructured{Object: object("v1", "Namespace", "", "team-a", nil)}, backupObj)
			var writes []string
			dyn.PrependReactor("*", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
				switch action.GetVerb() {
				case "create", "update", "patch":
					writes = append(writes, action.GetVerb()+" "+action.GetResource().Resource+" "+action.GetNamespace())
				}
				return false, nil, nil
			})
			runner := &restore.Runner{Dynamic: dyn, Discovery: clusterDiscovery(), Actions: restore.NewActions(restore.CSIRestoreAction{Dynamic: dyn})}
			rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "r1", UID: "uid-r1"},
				Spec: cairnv1.RestoreSpec{BackupName: "escape"}, Status: cairnv1.RestoreStatus{BackupName: "escape"}}
			res := runner.Run(context.Background(), restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: store, BackupKeys: keys,
				Files: store, FilesKeys: storage.Layout{}.Restore("team-a", "r1"), Writer: dyn})
			if res.Ending != restore.Finished {
				t.Fatalf("run ended %s (%s)", res.Ending, res.FailureReason)
			}
			if len(writes) != 1 || writes[0] != "create configmaps team-a" {
				t.Errorf("writes = %q, want only the create of the ConfigMap ok in team-a", writes)
			}
			var results restore.Results
			readGzipJSON(t, store, storage.Layout{}.Restore("team-a", "r1").Results, &results)
			all := strings.Join(append(results.Errors.Cluster, results.Errors.Namespaces["team-a"]...), "\n")
			for _, want := range []string{
				"namespaces/team-a/evil-ns: namespaces is cluster-scoped in this cluster, but the item is at a path in namespace team-a",
				`namespaces/team-a/team-b: the item is in namespace ""`,
				`configmaps/team-a/renamed: the item is named "other"`,
				`configmaps/team-a/moved: the item is in namespace "team-b"`,
				"configmaps/team-a/wrong-kind: the item is a Role",
				`configmaps/team-a/wrong-group: the item's apiVersion "rbac.authorization.k8s.io/v1" is not of group ""`,
			} {
				if !strings.Contains(all, want) {
					t.Errorf("no error saying %q in:\n%s", want, all)
				}
			}
			wantPVC := `snapshot handle "team-b-secret-snapshot" is not one this cluster took for backup team-a/escape`
			if synced {
				wantPVC = "backup team-a/escape is known only from storage (synced from location dr): this cluster has no record of its CSI snapshots"
			}
			if !strings.Contains(all, "persistentvolumeclaims team-a/data: restore item action cairn.dev/csi-restore: "+wantPVC) {
				t.Errorf("no error on the claim saying %q in:\n%s", wantPVC, all)
			}
			if res.Errors < 7 {
				t.Errorf("%d errors, want one per refused item (7)", res.Errors)
			}
		})
	}
}

// A team's restore writes as its requester (DESIGN.md section 15): every create goes through
// Request.Writer, never the operator's own client, and a team's restore without one restores
// nothing.
func TestTeamRestoreWritesOnlyAsItsRequester(t *testing.T) {
	entries := map[string]map[string]any{
		"resources/configmaps/namespaces/team-a/settings.json":                           object("v1", "ConfigMap", "team-a", "settings", nil),
		"resources/roles.rbac.authorization.k8s.io/namespaces/team-a/secret-reader.json": object("rbac.authorization.k8s.io/v1", "Role", "team-a", "secret-reader", nil),
	}
	newClient := func(writes *[]string) *dynamicfake.FakeDynamicClient {
		dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), &unstructured.Unstructured{Object: object("v1", "Namespace", "", "team-a", nil)})
		dyn.PrependReactor("*", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
			switch action.GetVerb() {
			case "create", "update", "patch":
				*writes = append(*writes, action.GetVerb()+" "+action.GetResource().Resource)
			}
			return false, nil, nil
		})
		return dyn
	}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "r1", UID: "uid-r1"},
		Spec: cairnv1.RestoreSpec{BackupName: "b"}, Status: cairnv1.RestoreStatus{BackupName: "b"}}
	for _, tt := range []struct {
		name           string
		withWriter     bool
		wantEnding     restore.Ending
		wantOperator   []string
		wantRequester  []string
		wantFailureHas string
	}{
		{name: "with the requester's client", withWriter: true, wantEnding: restore.Finished,
			wantRequester: []string{"create configmaps", "create roles"}},
		{name: "without one", wantEnding: restore.Failed, wantFailureHas: "writes as its requester"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store, keys := craftedBackup(t, "team-a", "b", entries)
			var operatorWrites, requesterWrites []string
			operator := newClient(&operatorWrites)
			req := restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: store, BackupKeys: keys}
			if tt.withWriter {
				req.Writer = newClient(&requesterWrites)
			}
			runner := &restore.Runner{Dynamic: operator, Discovery: clusterDiscovery(), Actions: restore.NewActions()}
			res := runner.Run(context.Background(), req)
			if res.Ending != tt.wantEnding || !strings.Contains(res.FailureReason, tt.wantFailureHas) {
				t.Fatalf("run ended %s (%q), want %s", res.Ending, res.FailureReason, tt.wantEnding)
			}
			slices.Sort(requesterWrites)
			if len(operatorWrites) != 0 || !slices.Equal(requesterWrites, tt.wantRequester) {
				t.Errorf("writes: operator %v, requester %v; want none by the operator and %v by the requester",
					operatorWrites, requesterWrites, tt.wantRequester)
			}
		})
	}
}
