package restore

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/cairn-backup/cairn/internal/backup"
)

// FuzzItem feeds any JSON object, as an archive may hold it, through everything that decides
// about a single item: nothing panics, the backed-up item is never modified, and an update
// patch is always JSON.
func FuzzItem(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"old","labels":{"n":1}},"spec":{"nodeName":"n","volumes":[{"name":"kube-api-access-x","projected":{"sources":[{"serviceAccountToken":{}}]}}],"containers":[{"name":"c","volumeMounts":[{"name":"kube-api-access-x"}]}]},"status":{"phase":"Running"}}`,
		`{"kind":"Service","metadata":{"name":"s"},"spec":{"clusterIP":"None","ports":"80"}}`,
		`{"kind":"Service","metadata":{"name":"s"},"spec":{"ports":[1,{"nodePort":{}}],"clusterIPs":[null]}}`,
		`{"kind":"PersistentVolumeClaim","metadata":{"name":"c","annotations":{"pv.kubernetes.io/bind-completed":1}},"spec":{"volumeName":"pv"}}`,
		`{"kind":"PersistentVolume","metadata":{"name":"pv"},"spec":{"persistentVolumeReclaimPolicy":"Retain","claimRef":{"namespace":"old","uid":[]}}}`,
		`{"kind":"Job","metadata":{"name":"j"},"spec":{"manualSelector":true,"selector":{"matchLabels":"x"},"template":"t"},"status":{"conditions":[{"type":"Complete","status":"True"}]}}`,
		`{"kind":"RoleBinding","metadata":{"name":"b"},"subjects":[{"kind":"ServiceAccount","namespace":"old"},7]}`,
		`{"kind":"ServiceAccount","metadata":{"name":"default","labels":"x"},"secrets":[{"name":"a"},{"name":"a"}],"imagePullSecrets":{}}`,
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"old","labels":{"kubernetes.io/metadata.name":[]}}}`,
		`{"metadata":"x","spec":"y","status":[]}`,
		`{}`,
	} {
		f.Add([]byte(seed))
	}
	grs := []schema.GroupResource{podsGR, servicesGR, pvcsGR, pvsGR, jobsGR, roleBindingsGR, clusterRoleBindingsGR, namespacesGR, {Resource: "nodes"}, {Resource: "serviceaccounts"}, {Resource: "configmaps"}}
	actions := NewActions()
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if err := utiljson.Unmarshal(data, &m); err != nil || m == nil {
			return
		}
		original := &unstructured.Unstructured{Object: m}
		before := original.DeepCopy()
		for i, gr := range grs {
			opts := Options{
				BackupName: "b", RestoreName: "r", NamespaceMapping: map[string]string{"old": "new"},
				PreserveNodePorts: i%2 == 0, RestorePVs: i%3 != 0, KeepStatus: i%2 == 1,
			}
			_ = SkipReason(gr, original)
			_ = VerifyIdentity(ItemRef{GR: gr, Namespace: "old", Name: "p"}, original, nil)
			_ = VerifyIdentity(ItemRef{GR: gr, Name: "p"}, original, &backup.Resource{Kind: "Pod", Namespaced: true})
			prepared := Prepare(original, opts)
			out := prepared
			for _, a := range actions.For(gr) {
				res, err := a.Execute(context.Background(), ActionInput{
					Item: out, Original: original, Options: opts,
					Facts: Facts{PVRestored: func(string) bool { return i%2 == 0 }},
				})
				if err != nil {
					t.Fatalf("%s: %v", a.Name(), err)
				}
				if res.Skip {
					break
				}
				out = res.Item
			}
			_, _ = MergeServiceAccount(original.DeepCopy(), out)
			_, _ = MergeServiceAccount(out, original)
			_ = Matches(out, original)
			_ = Differences(original, out)
			patch, err := UpdatePatch(out)
			if err != nil || !json.Valid(patch) {
				t.Fatalf("UpdatePatch = %s, %v", patch, err)
			}
		}
		if !reflect.DeepEqual(original.Object, before.Object) {
			t.Fatalf("the backed-up item was modified:\n%s\nwas\n%s", jsonOf(original), jsonOf(before))
		}
	})
}
