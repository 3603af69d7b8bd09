package restore

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestMatchesAndDifferences(t *testing.T) {
	tests := []struct {
		name     string
		desired  string
		existing string
		want     []string // the differences; none means Matches
	}{
		{
			name:     "the same config map, restored by another restore",
			desired:  `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"a","labels":{"app":"x","cairn.dev/backup-name":"b2","cairn.dev/restore-name":"r2"}},"data":{"k":"v"}}`,
			existing: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"a","uid":"u","resourceVersion":"5","creationTimestamp":"2026-01-01T00:00:00Z","managedFields":[{"manager":"m"}],"labels":{"app":"x","cairn.dev/backup-name":"b1","cairn.dev/restore-name":"r1"}},"data":{"k":"v"}}`,
		},
		{
			name:     "an object the restore did not make",
			desired:  `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"cairn.dev/backup-name":"b","cairn.dev/restore-name":"r"}},"data":{"k":"v"}}`,
			existing: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"v"}}`,
		},
		{
			name:     "server defaults and an assigned address in existing",
			desired:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"NodePort","ports":[{"port":80,"protocol":"TCP"}]}}`,
			existing: `{"kind":"Service","metadata":{"name":"s"},"spec":{"type":"NodePort","clusterIP":"10.0.0.9","clusterIPs":["10.0.0.9"],"sessionAffinity":"None","ports":[{"port":80,"protocol":"TCP","nodePort":30080,"targetPort":80}]},"status":{"loadBalancer":{}}}`,
		},
		{
			name:     "status, ownerReferences and generation are not compared",
			desired:  `{"kind":"Widget","metadata":{"name":"w","generation":1,"ownerReferences":[{"uid":"a"}],"selfLink":"/x"},"spec":{"size":1},"status":{"ready":true}}`,
			existing: `{"kind":"Widget","metadata":{"name":"w","generation":4,"ownerReferences":[{"uid":"b"}]},"spec":{"size":1},"status":{"ready":false}}`,
		},
		{
			name:     "numbers compare by value",
			desired:  `{"kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":3}}`,
			existing: `{"kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":3.0}}`,
		},
		{
			name:     "null and empty fields match absent ones",
			desired:  `{"kind":"ConfigMap","metadata":{"name":"c","annotations":{},"finalizers":[],"creationTimestamp":null},"data":null,"binaryData":{}}`,
			existing: `{"kind":"ConfigMap","metadata":{"name":"c"}}`,
		},
		{
			name:     "different data",
			desired:  `{"kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1","b":"2"}}`,
			existing: `{"kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1","b":"3"}}`,
			want:     []string{"data.b"},
		},
		{
			name:     "a field existing lacks",
			desired:  `{"kind":"ConfigMap","metadata":{"name":"c","labels":{"app.kubernetes.io/name":"x"}},"data":{"a":"1"}}`,
			existing: `{"kind":"ConfigMap","metadata":{"name":"c"},"data":{}}`,
			want:     []string{"data.a", `metadata.labels["app.kubernetes.io/name"]`},
		},
		{
			name:     "a list of another length",
			desired:  `{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"a"}]}}`,
			existing: `{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"a"},{"name":"b"}]}}`,
			want:     []string{"spec.containers"},
		},
		{
			name:     "a list element",
			desired:  `{"kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":2,"template":{"spec":{"containers":[{"name":"a","image":"v2"}]}}}}`,
			existing: `{"kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":1,"template":{"spec":{"containers":[{"name":"a","image":"v1","imagePullPolicy":"Always"}]}}}}`,
			want:     []string{"spec.replicas", "spec.template.spec.containers[0].image"},
		},
		{
			name:     "lists compare in order",
			desired:  `{"kind":"X","metadata":{"name":"x"},"items":["a","b"]}`,
			existing: `{"kind":"X","metadata":{"name":"x"},"items":["b","a"]}`,
			want:     []string{"items[0]", "items[1]"},
		},
		{
			name:     "another type",
			desired:  `{"kind":"X","metadata":{"name":"x"},"spec":{"a":{"b":1},"c":[1],"d":"1","e":true}}`,
			existing: `{"kind":"X","metadata":{"name":"x"},"spec":{"a":"b","c":{"0":1},"d":1,"e":"true"}}`,
			want:     []string{"spec.a", "spec.c", "spec.d", "spec.e"},
		},
		{
			name:     "at most MaxDifferences",
			desired:  `{"kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1","b":"1","c":"1","d":"1","e":"1","f":"1","g":"1"}}`,
			existing: `{"kind":"ConfigMap","metadata":{"name":"c"},"data":{}}`,
			want:     []string{"data.a", "data.b", "data.c", "data.d", "data.e"},
		},
		{
			name:     "a label that is a number",
			desired:  `{"kind":"ConfigMap","metadata":{"name":"c","labels":{"n":1}}}`,
			existing: `{"kind":"ConfigMap","metadata":{"name":"c","labels":{"n":"1"}}}`,
			want:     []string{"metadata.labels.n"},
		},
		{
			name:     "metadata that is a string",
			desired:  `{"kind":"ConfigMap","metadata":"c"}`,
			existing: `{"kind":"ConfigMap","metadata":{"name":"c"}}`,
			want:     []string{"metadata"},
		},
		{
			name:     "existing that is empty",
			desired:  `{"kind":"ConfigMap","metadata":{"name":"c"}}`,
			existing: `{}`,
			want:     []string{"kind", "metadata.name"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desired, existing := item(t, tt.desired), item(t, tt.existing)
			desiredBefore, existingBefore := desired.DeepCopy(), existing.DeepCopy()
			got := Differences(desired, existing)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Differences = %q, want %q", got, tt.want)
			}
			if m := Matches(desired, existing); m != (len(tt.want) == 0) {
				t.Errorf("Matches = %v", m)
			}
			if !reflect.DeepEqual(desired.Object, desiredBefore.Object) || !reflect.DeepEqual(existing.Object, existingBefore.Object) {
				t.Error("an input was modified")
			}
		})
	}
	if !Matches(nil, item(t, `{"kind":"X"}`)) {
		t.Error("nothing desired does not match")
	}
	if got := Differences(item(t, `{"kind":"X"}`), nil); !reflect.DeepEqual(got, []string{"(the whole object)"}) {
		t.Errorf("Differences with nothing existing = %q", got)
	}
}

// mergePatch applies a JSON merge patch (RFC 7386) to a JSON object, as the API server does.
func mergePatch(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	out := map[string]any{}
	for k, v := range tm {
		out[k] = v
	}
	for k, v := range pm {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = mergePatch(out[k], v)
	}
	return out
}

func TestUpdatePatch(t *testing.T) {
	tests := []struct {
		name      string
		desired   string
		existing  string
		wantPatch string
	}{
		{
			name: "desired's fields without status, server-set metadata and identity",
			desired: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"a","uid":"u","resourceVersion":"1","managedFields":[{"manager":"m"}],
				"labels":{"app":"x","cairn.dev/backup-name":"b","cairn.dev/restore-name":"r"},"annotations":{"k":"v"}},"data":{"a":"1"},"status":{"x":1}}`,
			existing:  `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"a","uid":"e","labels":{"mine":"y"}},"data":{"a":"0","b":"2"}}`,
			wantPatch: `{"metadata":{"labels":{"app":"x","cairn.dev/backup-name":"b","cairn.dev/restore-name":"r"},"annotations":{"k":"v"}},"data":{"a":"1"}}`,
		},
		{
			name:      "nulls are left out, not sent as removals",
			desired:   `{"kind":"ConfigMap","metadata":{"name":"c","annotations":null,"labels":{"x":null}},"data":{"a":null,"b":"1"},"immutable":null}`,
			existing:  `{"kind":"ConfigMap","metadata":{"name":"c","annotations":{"k":"v"},"labels":{"x":"1"}},"data":{"a":"1"},"immutable":false}`,
			wantPatch: `{"metadata":{"labels":{}},"data":{"b":"1"}}`,
		},
		{
			name:      "lists are replaced whole",
			desired:   `{"kind":"Service","metadata":{"name":"s"},"spec":{"ports":[{"port":81,"name":null}]}}`,
			existing:  `{"kind":"Service","metadata":{"name":"s"},"spec":{"clusterIP":"10.0.0.1","ports":[{"port":80,"nodePort":30080}]}}`,
			wantPatch: `{"metadata":{},"spec":{"ports":[{"port":81,"name":null}]}}`,
		},
		{
			name:      "metadata that is a string",
			desired:   `{"kind":"ConfigMap","metadata":"c","data":{"a":"1"}}`,
			existing:  `{"kind":"ConfigMap","metadata":{"name":"c"}}`,
			wantPatch: `{"metadata":"c","data":{"a":"1"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desired := item(t, tt.desired)
			before := desired.DeepCopy()
			patch, err := UpdatePatch(desired)
			if err != nil {
				t.Fatalf("UpdatePatch: %v", err)
			}
			var got, want any
			if err := json.Unmarshal(patch, &got); err != nil {
				t.Fatalf("the patch is not JSON: %s", patch)
			}
			if err := json.Unmarshal([]byte(tt.wantPatch), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("UpdatePatch = %s\nwant %s", patch, tt.wantPatch)
			}
			if !reflect.DeepEqual(desired.Object, before.Object) {
				t.Error("UpdatePatch modified desired")
			}
			if _, ok := desired.Object["metadata"].(map[string]any); !ok {
				return // malformed: the API server refuses the patched object
			}
			// Every field of existing is still there after the patch, unless the patch sets
			// it, and the patched object matches desired.
			existing := item(t, tt.existing).Object
			patched := mergePatch(existing, got)
			assertKept(t, "", existing, patched, got)
			if d := Differences(desired, &unstructured.Unstructured{Object: patched.(map[string]any)}); len(d) > 0 {
				t.Errorf("the patched object still differs at %q", d)
			}
		})
	}
	if patch, err := UpdatePatch(nil); err != nil || string(patch) != "{}" {
		t.Errorf("UpdatePatch(nil) = %s, %v", patch, err)
	}
}

// assertKept fails when a field of before is gone from after although the patch did not set it.
func assertKept(t *testing.T, path string, before, after, patch any) {
	t.Helper()
	bm, ok := before.(map[string]any)
	if !ok {
		return
	}
	am, _ := after.(map[string]any)
	pm, _ := patch.(map[string]any)
	for k, v := range bm {
		pv, set := pm[k]
		if _, ok := am[k]; !ok {
			t.Errorf("the patch removed %s%s", path, k)
			continue
		}
		if set {
			assertKept(t, path+k+".", v, am[k], pv)
		}
	}
}
