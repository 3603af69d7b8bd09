package chartobjects

import (
	"strings"
	"testing"
)

func TestDecodeChartObjects(t *testing.T) {
	const location = `apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata:
  name: default
  labels: {app.kubernetes.io/name: cairn}
spec: {provider: filesystem, config: {path: /backups}}
`
	const schedule = `apiVersion: cairn.dev/v1alpha1
kind: Schedule
metadata: {name: nightly, namespace: cairn-system}
spec: {schedule: "0 2 * * *"}
`
	tests := []struct {
		name    string
		data    string
		want    []string // kind/namespace/name, in order
		wantErr string
	}{
		{name: "nothing declared", data: "", want: nil},
		{name: "only separators", data: "---\n---\n", want: nil},
		{name: "a location and a schedule, put in the manager's namespace", data: "---\n" + location + "---\n" + schedule,
			want: []string{"BackupStorageLocation/cairn-system/default", "Schedule/cairn-system/nightly"}},
		{name: "JSON", data: `{"apiVersion":"cairn.dev/v1alpha1","kind":"Schedule","metadata":{"name":"j"},"spec":{"schedule":"@daily"}}`,
			want: []string{"Schedule/cairn-system/j"}},
		{name: "another kind", data: "apiVersion: cairn.dev/v1alpha1\nkind: Backup\nmetadata: {name: b}\nspec: {}\n",
			wantErr: "document 1: cairn.dev/v1alpha1 Backup is not a kind the chart declares"},
		{name: "another group's kind", data: "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
			wantErr: "v1 Secret is not a kind the chart declares"},
		{name: "another version", data: "apiVersion: cairn.dev/v1\nkind: Schedule\nmetadata: {name: s}\nspec: {}\n",
			wantErr: "cairn.dev/v1 Schedule is not a kind the chart declares"},
		{name: "another namespace", data: strings.Replace(schedule, "namespace: cairn-system", "namespace: team-a", 1),
			wantErr: `Schedule nightly: namespace "team-a" is not the manager's (cairn-system)`},
		{name: "no name", data: "apiVersion: cairn.dev/v1alpha1\nkind: Schedule\nmetadata: {labels: {a: b}}\nspec: {}\n",
			wantErr: "Schedule: no metadata.name"},
		{name: "no metadata", data: "apiVersion: cairn.dev/v1alpha1\nkind: Schedule\nspec: {}\n",
			wantErr: "Schedule: no metadata"},
		{name: "no spec", data: "apiVersion: cairn.dev/v1alpha1\nkind: Schedule\nmetadata: {name: s}\n",
			wantErr: "Schedule s: no spec"},
		{name: "a status", data: schedule + "status: {phase: Enabled}\n",
			wantErr: `document 1: Schedule: field "status" is not applied (only metadata and spec)`},
		{name: "a resource version", data: "apiVersion: cairn.dev/v1alpha1\nkind: Schedule\nmetadata: {name: s, resourceVersion: \"1\"}\nspec: {}\n",
			wantErr: "metadata.resourceVersion is not applied"},
		{name: "declared twice", data: location + "---\n" + location,
			wantErr: "document 2: BackupStorageLocation default is declared twice"},
		{name: "the same name, two kinds", data: schedule + "---\n" + strings.Replace(location, "name: default", "name: nightly", 1),
			want: []string{"Schedule/cairn-system/nightly", "BackupStorageLocation/cairn-system/nightly"}},
		{name: "not YAML", data: location + "---\nkind: [\n",
			wantErr: "document 2:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects, err := Decode(tt.data, "cairn-system")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objects {
				got = append(got, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
				if len(o.GetAnnotations()[HashAnnotation]) != 32 {
					t.Errorf("%s: hash annotation %q", o.GetName(), o.GetAnnotations()[HashAnnotation])
				}
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("objects %q, want %q", got, tt.want)
			}
		})
	}
}

// The hash follows the declaration, whatever its layout: an object is applied again exactly
// when what the values give it changes.
func TestChartObjectHash(t *testing.T) {
	hash := func(data string) string {
		t.Helper()
		objects, err := Decode(data, "cairn-system")
		if err != nil || len(objects) != 1 {
			t.Fatalf("%d objects, %v", len(objects), err)
		}
		return objects[0].GetAnnotations()[HashAnnotation]
	}
	base := hash("apiVersion: cairn.dev/v1alpha1\nkind: Schedule\nmetadata: {name: s}\nspec: {schedule: '@daily', paused: false}\n")
	for _, tt := range []struct {
		name string
		data string
		same bool
	}{
		{"another layout and key order", "kind: Schedule\napiVersion: cairn.dev/v1alpha1\nspec:\n  paused: false\n  schedule: \"@daily\"\nmetadata:\n  name: s\n", true},
		{"the namespace spelt out", "apiVersion: cairn.dev/v1alpha1\nkind: Schedule\nmetadata: {name: s, namespace: cairn-system}\nspec: {schedule: '@daily', paused: false}\n", true},
		{"a hash annotation written by hand", "apiVersion: cairn.dev/v1alpha1\nkind: Schedule\nmetadata: {name: s, annotations: {cairn.dev/chart-object-hash: x}}\nspec: {schedule: '@daily', paused: false}\n", true},
		{"a spec field changed", "apiVersion: cairn.dev/v1alpha1\nkind: Schedule\nmetadata: {name: s}\nspec: {schedule: '@daily', paused: true}\n", false},
		{"a label added", "apiVersion: cairn.dev/v1alpha1\nkind: Schedule\nmetadata: {name: s, labels: {a: b}}\nspec: {schedule: '@daily', paused: false}\n", false},
	} {
		if got := hash(tt.data); (got == base) != tt.same {
			t.Errorf("%s: hash %s, base %s, want same=%v", tt.name, got, base, tt.same)
		}
	}
}
