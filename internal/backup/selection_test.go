package backup

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

var (
	testConfigMaps = Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespaced: true}
	testSecrets    = Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Kind: "Secret", Namespaced: true}
	testNamespaces = Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, Kind: "Namespace"}
	testPVs        = Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}, Kind: "PersistentVolume"}
	testSnapshots  = Resource{GroupVersionResource: schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}, Kind: "VolumeSnapshot", Namespaced: true}
	testContents   = Resource{GroupVersionResource: schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}, Kind: "VolumeSnapshotContent"}
	testResources  = []Resource{testConfigMaps, testSecrets, testNamespaces, testPVs, testSnapshots, testContents}
)

func TestSelectionIncludes(t *testing.T) {
	admin := func(spec cairnv1.BackupSpec) *cairnv1.Backup {
		return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cairn-system"}, Spec: spec}
	}
	team := func(spec cairnv1.BackupSpec) *cairnv1.Backup {
		return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "team-a"}, Spec: spec}
	}
	app := map[string]string{"app": "web"}
	excluded := map[string]string{cairnv1.ExcludeFromBackupLabel: "true", "app": "web"}
	tests := []struct {
		name      string
		backup    *cairnv1.Backup
		res       Resource
		namespace string
		item      string
		labels    map[string]string
		src       ItemSource
		want      bool
	}{
		// Namespaces.
		{name: "listed item in a selected namespace", backup: admin(cairnv1.BackupSpec{IncludedNamespaces: []string{"ns1"}}), res: testConfigMaps, namespace: "ns1", item: "c", src: Listed, want: true},
		{name: "listed item elsewhere", backup: admin(cairnv1.BackupSpec{IncludedNamespaces: []string{"ns1"}}), res: testConfigMaps, namespace: "ns2", item: "c", src: Listed},
		{name: "additional item elsewhere", backup: admin(cairnv1.BackupSpec{IncludedNamespaces: []string{"ns1"}}), res: testConfigMaps, namespace: "ns2", item: "c", src: Additional},
		{name: "post-operation item elsewhere", backup: admin(cairnv1.BackupSpec{IncludedNamespaces: []string{"ns1"}}), res: testSnapshots, namespace: "ns2", item: "s", src: PostOperation},
		{name: "post-operation item in an excluded namespace", backup: admin(cairnv1.BackupSpec{ExcludedNamespaces: []string{"ns2"}}), res: testSnapshots, namespace: "ns2", item: "s", src: PostOperation},
		// Resources.
		{name: "excluded resource, listed", backup: admin(cairnv1.BackupSpec{ExcludedResources: []string{"secrets"}}), res: testSecrets, namespace: "ns1", item: "s", src: Listed},
		{name: "excluded resource, additional", backup: admin(cairnv1.BackupSpec{ExcludedResources: []string{"secrets"}}), res: testSecrets, namespace: "ns1", item: "s", src: Additional},
		{name: "excluded resource, post-operation", backup: admin(cairnv1.BackupSpec{ExcludedResources: []string{"volumesnapshots"}}), res: testSnapshots, namespace: "ns1", item: "s", src: PostOperation},
		// Labels: the selectors choose the listed items only.
		{name: "listed item matching the selector", backup: admin(cairnv1.BackupSpec{LabelSelector: &metav1.LabelSelector{MatchLabels: app}}), res: testConfigMaps, namespace: "ns1", item: "c", labels: app, src: Listed, want: true},
		{name: "listed item not matching the selector", backup: admin(cairnv1.BackupSpec{LabelSelector: &metav1.LabelSelector{MatchLabels: app}}), res: testConfigMaps, namespace: "ns1", item: "c", src: Listed},
		{name: "listed item matching one of the or-selectors", backup: admin(cairnv1.BackupSpec{OrLabelSelectors: []*metav1.LabelSelector{{MatchLabels: map[string]string{"x": "y"}}, {MatchLabels: app}}}), res: testConfigMaps, namespace: "ns1", item: "c", labels: app, src: Listed, want: true},
		{name: "additional item needs no label", backup: admin(cairnv1.BackupSpec{LabelSelector: &metav1.LabelSelector{MatchLabels: app}}), res: testConfigMaps, namespace: "ns1", item: "c", src: Additional, want: true},
		{name: "the exclude label, listed", backup: admin(cairnv1.BackupSpec{}), res: testConfigMaps, namespace: "ns1", item: "c", labels: excluded, src: Listed},
		{name: "the exclude label, additional", backup: admin(cairnv1.BackupSpec{}), res: testConfigMaps, namespace: "ns1", item: "c", labels: excluded, src: Additional},
		{name: "the exclude label, post-operation", backup: admin(cairnv1.BackupSpec{}), res: testSnapshots, namespace: "ns1", item: "s", labels: excluded, src: PostOperation},
		// Cluster-scoped items.
		{name: "admin, unset: a listed PV is not held", backup: admin(cairnv1.BackupSpec{}), res: testPVs, item: "pv", src: Listed},
		{name: "admin, unset: a PV a PVC needs is held", backup: admin(cairnv1.BackupSpec{}), res: testPVs, item: "pv", src: Additional, want: true},
		{name: "admin, unset: a snapshot content is held", backup: admin(cairnv1.BackupSpec{}), res: testContents, item: "c", src: PostOperation, want: true},
		{name: "admin, true: a listed PV is held", backup: admin(cairnv1.BackupSpec{IncludeClusterResources: ptr.To(true)}), res: testPVs, item: "pv", src: Listed, want: true},
		{name: "admin, false: no PV at all", backup: admin(cairnv1.BackupSpec{IncludeClusterResources: ptr.To(false)}), res: testPVs, item: "pv", src: Additional},
		{name: "admin, false: no snapshot content", backup: admin(cairnv1.BackupSpec{IncludeClusterResources: ptr.To(false)}), res: testContents, item: "c", src: PostOperation},
		{name: "admin: a selected namespace's Namespace object", backup: admin(cairnv1.BackupSpec{IncludedNamespaces: []string{"ns1"}}), res: testNamespaces, item: "ns1", src: Listed, want: true},
		{name: "admin: another Namespace object", backup: admin(cairnv1.BackupSpec{IncludedNamespaces: []string{"ns1"}}), res: testNamespaces, item: "ns2", src: Listed},
		{name: "admin, false: no Namespace object", backup: admin(cairnv1.BackupSpec{IncludeClusterResources: ptr.To(false)}), res: testNamespaces, item: "ns1", src: Listed},
		// Tenancy: a team's backup holds no cluster-scoped item, however it is reached.
		{name: "team: its own namespace's items", backup: team(cairnv1.BackupSpec{}), res: testConfigMaps, namespace: "team-a", item: "c", src: Listed, want: true},
		{name: "team: another namespace's items", backup: team(cairnv1.BackupSpec{}), res: testConfigMaps, namespace: "team-b", item: "c", src: Additional},
		{name: "team: not its Namespace object", backup: team(cairnv1.BackupSpec{}), res: testNamespaces, item: "team-a", src: Listed},
		{name: "team: not a PV its PVC needs", backup: team(cairnv1.BackupSpec{}), res: testPVs, item: "pv", src: Additional},
		{name: "team: not a snapshot content", backup: team(cairnv1.BackupSpec{}), res: testContents, item: "c", src: PostOperation},
		{name: "team: its own snapshot", backup: team(cairnv1.BackupSpec{}), res: testSnapshots, namespace: "team-a", item: "s", src: PostOperation, want: true},
		{name: "team asking for cluster resources still gets none", backup: team(cairnv1.BackupSpec{IncludeClusterResources: ptr.To(true)}), res: testPVs, item: "pv", src: Listed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, _, err := NewSelection(tt.backup, "cairn-system", testResources, []string{"ns1", "ns2", "team-a", "team-b"})
			if err != nil {
				t.Fatal(err)
			}
			if got := sel.Includes(tt.res, tt.namespace, tt.item, tt.labels, tt.src); got != tt.want {
				t.Errorf("Includes = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSelectionListTasks(t *testing.T) {
	type task struct{ resource, namespace string }
	tests := []struct {
		name   string
		backup *cairnv1.Backup
		want   []task
	}{
		{name: "admin, two namespaces, cluster resources unset",
			backup: &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system"}, Spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"ns1", "ns2"}, IncludedResources: []string{"configmaps", "namespaces", "persistentvolumes"}}},
			want:   []task{{"configmaps", "ns1"}, {"configmaps", "ns2"}, {"namespaces", ""}}},
		{name: "admin, every namespace, cluster resources true",
			backup: &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system"}, Spec: cairnv1.BackupSpec{IncludedResources: []string{"configmaps", "namespaces", "persistentvolumes"}, IncludeClusterResources: ptr.To(true)}},
			want:   []task{{"configmaps", ""}, {"namespaces", ""}, {"persistentvolumes", ""}}},
		{name: "team: its namespace only, no Namespace objects, no cluster resources",
			backup: &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a"}, Spec: cairnv1.BackupSpec{IncludedResources: []string{"configmaps", "namespaces", "persistentvolumes"}}},
			want:   []task{{"configmaps", "team-a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, _, err := NewSelection(tt.backup, "cairn-system", testResources, []string{"ns1", "ns2", "team-a"})
			if err != nil {
				t.Fatal(err)
			}
			var got []task
			for _, lt := range sel.ListTasks(testResources) {
				got = append(got, task{lt.Resource.Resource, lt.Namespace})
			}
			if len(got) != len(tt.want) {
				t.Fatalf("tasks = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("tasks = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestItemKey(t *testing.T) {
	tests := []struct {
		id        ItemID
		key, entr string
	}{
		{ItemID{GroupResource: testConfigMaps.GroupResource(), Namespace: "ns", Name: "a"}, "/configmaps|ns/a", "ns/a"},
		{ItemID{GroupResource: testContents.GroupResource(), Name: "c"}, "snapshot.storage.k8s.io/volumesnapshotcontents|c", "c"},
	}
	for _, tt := range tests {
		key, start := itemKey(tt.id)
		if key != tt.key || key[start:] != tt.entr {
			t.Errorf("itemKey(%v) = %q, entry %q; want %q, %q", tt.id, key, key[start:], tt.key, tt.entr)
		}
	}
}
