package restore_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

// A backup written into the bucket by whoever can write it (DESIGN.md section 15, issue 25
// finding 3): an archive whose entries are placed where the checks look, and a marker that
// matches it, synced and restored by a team.

// commitCrafted writes a committed backup of namespace/name into store whose archive holds
// exactly entries (path → object), with a marker that matches it.
func commitCrafted(store storage.ObjectStore, namespace, name string, entries map[string]map[string]any) {
	GinkgoHelper()
	var buf bytes.Buffer
	w, err := archive.NewWriter(&buf, time.Unix(0, 0))
	Expect(err).NotTo(HaveOccurred())
	for path, obj := range entries {
		data, err := json.Marshal(obj)
		Expect(err).NotTo(HaveOccurred())
		Expect(w.AddEntry(path, data)).To(Succeed())
	}
	Expect(w.Close()).To(Succeed())
	keys := storage.Layout{}.Backup(namespace, name)
	digest, err := storage.PutArchive(SuiteCtx, store, keys.Archive, &buf)
	Expect(err).NotTo(HaveOccurred())
	start := metav1.NewTime(time.Now().Add(-time.Hour))
	origin := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: "uid-of-the-bucket-writer"},
		Status: cairnv1.BackupStatus{StartTimestamp: &start, Progress: cairnv1.NewBackupProgress(int64(len(entries)), int64(len(entries)))}}
	m, err := backupsync.Marker(origin, cairnv1.BackupPhaseCompleted, archive.FormatVersion, digest, start.Add(time.Minute), 0)
	Expect(err).NotTo(HaveOccurred())
	Expect(storage.WriteMetadata(SuiteCtx, store, keys, m)).To(Succeed())
}

func object(apiVersion, kind, namespace, name string, labels map[string]any, extra map[string]any) map[string]any {
	meta := map[string]any{"name": name}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	if labels != nil {
		meta["labels"] = labels
	}
	obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
	for k, v := range extra {
		obj[k] = v
	}
	return obj
}

var _ = Describe("A crafted backup in storage, restored by a team", Ordered, func() {
	const (
		team  = "untrusted-team"
		other = "untrusted-other"
		evil  = "untrusted-evil-ns"
	)
	var store *storage.Filesystem

	BeforeAll(func() {
		EnsureNamespace(team)
		EnsureNamespace(other)
		CreateObject(ConfigMap(other, "theirs", map[string]string{"owner": other}))
		var bsl *cairnv1.BackupStorageLocation
		store, bsl = SyncedLocation("untrusted-bucket", time.Second, cairnv1.AccessModeReadWrite, nil)
		DeferCleanup(DeleteAllBackups)
		stop := StartManager(controller.Config{})
		DeferCleanup(func() { stop() })
		EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")
	})

	It("refuses every item that is not what its path says or that a team may not write, restores the rest, and ends PartiallyFailed", func() {
		privileged := map[string]any{"pod-security.kubernetes.io/enforce": "privileged"}
		commitCrafted(store, team, "escape", map[string]map[string]any{
			"resources/configmaps/namespaces/" + team + "/ok.json": object("v1", "ConfigMap", team, "ok", nil, map[string]any{"data": map[string]any{"k": "v"}}),
			// Passed the namespace check by its path; was created cluster-scoped.
			"resources/namespaces/namespaces/" + team + "/" + evil + ".json": object("v1", "Namespace", team, evil, privileged, nil),
			// Another team's namespace, relabelled.
			"resources/namespaces/namespaces/" + team + "/" + other + ".json": object("v1", "Namespace", team, other, privileged, nil),
			// A ConfigMap whose body is another team's.
			"resources/configmaps/namespaces/" + team + "/theirs.json": object("v1", "ConfigMap", other, "theirs", map[string]any{"owner": "attacker"}, nil),
			// A claim restored from another team's snapshot handle.
			"resources/persistentvolumeclaims/namespaces/" + team + "/data.json": object("v1", "PersistentVolumeClaim", team, "data", nil, map[string]any{"spec": map[string]any{
				"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}}),
			"resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/" + team + "/data-snap.json": object("snapshot.storage.k8s.io/v1", "VolumeSnapshot", team, "data-snap", nil, map[string]any{
				"spec":   map[string]any{"source": map[string]any{"persistentVolumeClaimName": "data"}},
				"status": map[string]any{"readyToUse": true, "boundVolumeSnapshotContentName": "stolen-content"}}),
			"resources/volumesnapshotcontents.snapshot.storage.k8s.io/cluster/stolen-content.json": object("snapshot.storage.k8s.io/v1", "VolumeSnapshotContent", "", "stolen-content", nil, map[string]any{
				"spec":   map[string]any{"driver": "csi.example.com", "deletionPolicy": "Retain", "volumeSnapshotRef": map[string]any{"namespace": other, "name": "theirs"}},
				"status": map[string]any{"readyToUse": true, "snapshotHandle": "snapshot-of-" + other}}),
		})
		b := EventuallySynced(team, "escape")
		Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted), "sync shows it as any other backup")

		CreateRestore(team, "escape-back", cairnv1.RestoreSpec{BackupName: "escape", ExistingResourcePolicy: cairnv1.ExistingResourcePolicyUpdate})
		rs := WaitRestore(team, "escape-back", cairnv1.RestorePhasePartiallyFailed)
		Expect(rs.Status.Errors).To(BeNumerically(">=", 4))

		// Nothing cluster-scoped, nothing of another namespace.
		Expect(GetUnstructured(nsGVK, "", evil)).To(BeNil(), "the Namespace %s was created", evil)
		var ns corev1.Namespace
		Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Name: other}, &ns)).To(Succeed())
		Expect(ns.Labels).NotTo(HaveKey("pod-security.kubernetes.io/enforce"))
		var theirs corev1.ConfigMap
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: other, Name: "theirs"}, &theirs)).To(Succeed())
		Expect(theirs.Labels).To(Equal(map[string]string{"owner": other}))
		Expect(theirs.Labels).NotTo(HaveKey(cairnv1.RestoreNameLabel))
		Expect(GetUnstructured(cmGVK, team, "theirs")).To(BeNil())
		contents := &unstructured.UnstructuredList{}
		contents.SetGroupVersionKind(volumeSnapshotContentGVK)
		Expect(K8sClient.List(SuiteCtx, contents)).To(Succeed())
		for _, c := range contents.Items {
			Expect(c.GetLabels()).NotTo(HaveKeyWithValue(cairnv1.RestoreNameLabel, "escape-back"), "VolumeSnapshotContent %s", c.GetName())
			handle, _, _ := unstructured.NestedString(c.Object, "spec", "source", "snapshotHandle")
			Expect(handle).NotTo(Equal("snapshot-of-"+other), "VolumeSnapshotContent %s", c.GetName())
		}
		Expect(GetUnstructured(pvcGVK, team, "data")).To(BeNil())

		// The rest is restored.
		Expect(GetUnstructured(cmGVK, team, "ok")).NotTo(BeNil())

		// Each refused item is named, with why.
		var results restore.Results
		GunzipJSON(store, storage.Layout{}.Restore(team, "escape-back").Results, &results)
		errs := strings.Join(append(results.Errors.Cluster, results.Errors.Namespaces[team]...), "\n")
		Expect(errs).To(And(
			ContainSubstring("namespaces/"+team+"/"+evil+": namespaces is cluster-scoped in this cluster, but the item is at a path in namespace "+team),
			ContainSubstring("namespaces/"+team+"/"+other+": namespaces is cluster-scoped in this cluster"),
			ContainSubstring(`configmaps/`+team+`/theirs: the item is in namespace "`+other+`"`),
			ContainSubstring("persistentvolumeclaims "+team+"/data: restore item action cairn.dev/csi-restore: backup "+team+"/escape is known only from storage (synced from location untrusted-bucket)"),
		))
		list := RestoredList(store, team, "escape-back")
		Expect(list[restore.Created]["configmaps"]).To(ConsistOf(team + "/ok"))
		Expect(list[restore.FailedItem]["namespaces"]).To(HaveLen(2))
	})
})
