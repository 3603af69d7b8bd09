package restore

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/cairn-backup/cairn/internal/backup"
)

// item decodes a JSON object as the unstructured decoder does (whole numbers as int64), but
// without requiring a kind.
func item(t testing.TB, s string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := utiljson.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("decoding %s: %v", s, err)
	}
	return &unstructured.Unstructured{Object: m}
}

// jsonOf encodes an item for a failure message.
func jsonOf(u *unstructured.Unstructured) string {
	if u == nil {
		return "<nil>"
	}
	b, err := json.Marshal(u.Object)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// assertItem fails unless got is the item want (JSON) describes.
func assertItem(t *testing.T, got *unstructured.Unstructured, want string) {
	t.Helper()
	w := item(t, want)
	if got == nil || !reflect.DeepEqual(got.Object, w.Object) {
		t.Errorf("got  %s\nwant %s", jsonOf(got), jsonOf(w))
	}
}

func TestSkipReason(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	nodesGR := schema.GroupResource{Resource: "nodes"}
	tests := []struct {
		name string
		gr   schema.GroupResource
		obj  string
		want string // a part of the reason; "" means restored
	}{
		{name: "a config map", gr: cm, obj: `{"kind":"ConfigMap","metadata":{"name":"c"}}`},
		{name: "a node", gr: nodesGR, obj: `{"kind":"Node","metadata":{"name":"n"}}`, want: "nodes"},
		{name: "a core event", gr: schema.GroupResource{Resource: "events"}, obj: `{"kind":"Event","metadata":{"name":"e"}}`, want: "events"},
		{name: "an events.k8s.io event", gr: schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, obj: `{"kind":"Event","metadata":{"name":"e"}}`, want: "events"},
		{name: "a component status of an older backup", gr: schema.GroupResource{Resource: "componentstatuses"}, obj: `{"kind":"ComponentStatus","metadata":{"name":"etcd-0"}}`, want: "component statuses"},
		{name: "a Service's IP address", gr: schema.GroupResource{Group: "networking.k8s.io", Resource: "ipaddresses"}, obj: `{"kind":"IPAddress","metadata":{"name":"10.0.0.12"}}`, want: "IP addresses"},
		{name: "an IPAddress of another group", gr: schema.GroupResource{Group: "example.com", Resource: "ipaddresses"}, obj: `{"kind":"IPAddress","metadata":{"name":"a"}}`},
		{name: "a CSI node", gr: schema.GroupResource{Group: "storage.k8s.io", Resource: "csinodes"}, obj: `{"kind":"CSINode","metadata":{"name":"n"}}`, want: "kubelet"},
		{name: "a volume attachment", gr: schema.GroupResource{Group: "storage.k8s.io", Resource: "volumeattachments"}, obj: `{"kind":"VolumeAttachment","metadata":{"name":"csi-1"}}`, want: "attach/detach"},
		{name: "a service CIDR is restored", gr: schema.GroupResource{Group: "networking.k8s.io", Resource: "servicecidrs"}, obj: `{"kind":"ServiceCIDR","metadata":{"name":"extra"}}`},
		{name: "a Backup", gr: schema.GroupResource{Group: "cairn.dev", Resource: "backups"}, obj: `{"kind":"Backup","metadata":{"name":"b"}}`, want: "Cairn's own"},
		{name: "a backed-up VolumeSnapshot", gr: volumeSnapshotsGR, obj: `{"kind":"VolumeSnapshot","metadata":{"name":"s"}}`, want: "CSI restore action"},
		{name: "a backed-up VolumeSnapshotContent", gr: volumeSnapshotContentsGR, obj: `{"kind":"VolumeSnapshotContent","metadata":{"name":"c"}}`, want: "CSI restore action"},
		{name: "a Restore", gr: schema.GroupResource{Group: "cairn.dev", Resource: "restores"}, obj: `{"kind":"Restore","metadata":{"name":"r"}}`, want: "Cairn's own"},
		{name: "a kind of another group ending in cairn.dev", gr: schema.GroupResource{Group: "notcairn.dev", Resource: "things"}, obj: `{"metadata":{"name":"t"}}`},
		{name: "a running pod", gr: podsGR, obj: `{"kind":"Pod","metadata":{"name":"p"},"status":{"phase":"Running"}}`},
		{name: "a pending pod without status", gr: podsGR, obj: `{"kind":"Pod","metadata":{"name":"p"}}`},
		{name: "a succeeded pod", gr: podsGR, obj: `{"kind":"Pod","metadata":{"name":"p"},"status":{"phase":"Succeeded"}}`, want: "phase Succeeded"},
		{name: "a failed pod", gr: podsGR, obj: `{"kind":"Pod","metadata":{"name":"p"},"status":{"phase":"Failed"}}`, want: "phase Failed"},
		{name: "a pod whose phase is a number", gr: podsGR, obj: `{"kind":"Pod","metadata":{"name":"p"},"status":{"phase":3}}`},
		{name: "a pod whose status is a string", gr: podsGR, obj: `{"kind":"Pod","metadata":{"name":"p"},"status":"Succeeded"}`},
		{name: "a mirror pod", gr: podsGR, obj: `{"kind":"Pod","metadata":{"name":"p","annotations":{"kubernetes.io/config.mirror":"abc"}}}`, want: "mirror"},
		{name: "a mirror pod with another annotation that is a number", gr: podsGR, obj: `{"kind":"Pod","metadata":{"name":"p","annotations":{"kubernetes.io/config.mirror":"abc","x":1}}}`, want: "mirror"},
		{name: "a mirror annotation on a config map", gr: cm, obj: `{"metadata":{"name":"c","annotations":{"kubernetes.io/config.mirror":"abc"}}}`},
		{name: "annotations that are a string", gr: podsGR, obj: `{"kind":"Pod","metadata":{"name":"p","annotations":"kubernetes.io/config.mirror"}}`},
		{name: "a running job", gr: jobsGR, obj: `{"kind":"Job","metadata":{"name":"j"},"status":{"active":1,"conditions":[{"type":"Suspended","status":"False"}]}}`},
		{name: "a job with completionTime", gr: jobsGR, obj: `{"kind":"Job","metadata":{"name":"j"},"status":{"completionTime":"2026-01-01T00:00:00Z"}}`, want: "completionTime"},
		{name: "a complete job", gr: jobsGR, obj: `{"kind":"Job","metadata":{"name":"j"},"status":{"conditions":[{"type":"Complete","status":"True"}]}}`, want: "Complete"},
		{name: "a failed job", gr: jobsGR, obj: `{"kind":"Job","metadata":{"name":"j"},"status":{"conditions":[{"type":"Failed","status":"True"}]}}`, want: "Failed"},
		{name: "a job meeting its success criteria", gr: jobsGR, obj: `{"kind":"Job","metadata":{"name":"j"},"status":{"conditions":[{"type":"SuccessCriteriaMet","status":"True"}]}}`, want: "SuccessCriteriaMet"},
		{name: "a job with a False Failed condition", gr: jobsGR, obj: `{"kind":"Job","metadata":{"name":"j"},"status":{"conditions":[{"type":"Failed","status":"False"}]}}`},
		{name: "a job whose conditions are not a list", gr: jobsGR, obj: `{"kind":"Job","metadata":{"name":"j"},"status":{"conditions":"Complete"}}`},
		{name: "a job whose condition is a string", gr: jobsGR, obj: `{"kind":"Job","metadata":{"name":"j"},"status":{"conditions":["Complete",{"type":1,"status":true}]}}`},
		{name: "a job whose completionTime is null", gr: jobsGR, obj: `{"kind":"Job","metadata":{"name":"j"},"status":{"completionTime":null}}`},
		{name: "a finished job in another group is not a job", gr: schema.GroupResource{Group: "example.com", Resource: "jobs"}, obj: `{"metadata":{"name":"j"},"status":{"completionTime":"2026-01-01T00:00:00Z"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SkipReason(tt.gr, item(t, tt.obj))
			switch {
			case tt.want == "" && got != "":
				t.Errorf("SkipReason = %q, want the item restored", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Errorf("SkipReason = %q, want a reason naming %q", got, tt.want)
			}
		})
	}
	if got := SkipReason(nodesGR, nil); got == "" {
		t.Error("a nil node is restored")
	}
	if got := SkipReason(podsGR, nil); got != "" {
		t.Errorf("SkipReason(pods, nil) = %q", got)
	}
}

func TestPrepare(t *testing.T) {
	opts := Options{BackupName: "nightly", RestoreName: "r1", NamespaceMapping: map[string]string{"old": "new", "blank": ""}}
	const labels = `"cairn.dev/backup-name":"nightly","cairn.dev/restore-name":"r1"`
	long := strings.Repeat("b", 100)
	tests := []struct {
		name string
		obj  string
		opts Options
		want string
	}{
		{
			name: "server-set metadata and status go; name, labels, annotations and finalizers stay",
			obj: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"app","uid":"u","resourceVersion":"7","generation":2,
				"selfLink":"/x","creationTimestamp":"2026-01-01T00:00:00Z","deletionTimestamp":"2026-01-02T00:00:00Z","deletionGracePeriodSeconds":30,
				"ownerReferences":[{"apiVersion":"v1","kind":"X","name":"o","uid":"ou"}],"managedFields":[{"manager":"m"}],"generateName":"c-",
				"labels":{"app":"web"},"annotations":{"a":"b"},"finalizers":["example.com/f"]},"data":{"k":"v"},"status":{"x":1}}`,
			opts: opts,
			want: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"app","labels":{"app":"web",` + labels + `},
				"annotations":{"a":"b"},"finalizers":["example.com/f"]},"data":{"k":"v"}}`,
		},
		{
			name: "KeepStatus keeps the status",
			obj:  `{"kind":"Widget","metadata":{"name":"w","namespace":"app"},"status":{"ready":true}}`,
			opts: Options{BackupName: "nightly", RestoreName: "r1", KeepStatus: true},
			want: `{"kind":"Widget","metadata":{"name":"w","namespace":"app","labels":{` + labels + `}},"status":{"ready":true}}`,
		},
		{
			name: "a mapped namespace",
			obj:  `{"kind":"ConfigMap","metadata":{"name":"c","namespace":"old"}}`,
			opts: opts,
			want: `{"kind":"ConfigMap","metadata":{"name":"c","namespace":"new","labels":{` + labels + `}}}`,
		},
		{
			name: "a namespace mapped to nothing stays",
			obj:  `{"kind":"ConfigMap","metadata":{"name":"c","namespace":"blank"}}`,
			opts: opts,
			want: `{"kind":"ConfigMap","metadata":{"name":"c","namespace":"blank","labels":{` + labels + `}}}`,
		},
		{
			name: "a cluster-scoped item has no namespace",
			obj:  `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"old"}}`,
			opts: opts,
			want: `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"old","labels":{` + labels + `}}}`,
		},
		{
			name: "a mapped Namespace is renamed, with its name label",
			obj:  `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"old","labels":{"kubernetes.io/metadata.name":"old","team":"a"}},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}}`,
			opts: opts,
			want: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"new","labels":{"kubernetes.io/metadata.name":"new","team":"a",` + labels + `}},"spec":{"finalizers":["kubernetes"]}}`,
		},
		{
			name: "a Namespace kind of another group is not renamed",
			obj:  `{"apiVersion":"example.com/v1","kind":"Namespace","metadata":{"name":"old"}}`,
			opts: opts,
			want: `{"apiVersion":"example.com/v1","kind":"Namespace","metadata":{"name":"old","labels":{` + labels + `}}}`,
		},
		{
			name: "long names become label values",
			obj:  `{"kind":"ConfigMap","metadata":{"name":"c"}}`,
			opts: Options{BackupName: long, RestoreName: long + "r"},
			want: `{"kind":"ConfigMap","metadata":{"name":"c","labels":{"cairn.dev/backup-name":"` + backup.LabelValue(long) + `","cairn.dev/restore-name":"` + backup.LabelValue(long+"r") + `"}}}`,
		},
		{
			name: "the labels replace the backed-up item's own cairn labels",
			obj:  `{"kind":"ConfigMap","metadata":{"name":"c","labels":{"cairn.dev/restore-name":"earlier"}}}`,
			opts: opts,
			want: `{"kind":"ConfigMap","metadata":{"name":"c","labels":{` + labels + `}}}`,
		},
		{
			name: "null labels",
			obj:  `{"kind":"ConfigMap","metadata":{"name":"c","labels":null}}`,
			opts: opts,
			want: `{"kind":"ConfigMap","metadata":{"name":"c","labels":{` + labels + `}}}`,
		},
		// Malformed items: what cannot be changed is left for the API server to refuse.
		{
			name: "a label that is a number is kept, the labels are added",
			obj:  `{"kind":"ConfigMap","metadata":{"name":"c","labels":{"n":1}}}`,
			opts: opts,
			want: `{"kind":"ConfigMap","metadata":{"name":"c","labels":{"n":1,` + labels + `}}}`,
		},
		{
			name: "labels that are a string are left alone",
			obj:  `{"kind":"ConfigMap","metadata":{"name":"c","uid":"u","labels":"app=web"}}`,
			opts: opts,
			want: `{"kind":"ConfigMap","metadata":{"name":"c","labels":"app=web"}}`,
		},
		{
			name: "metadata that is a string is left alone",
			obj:  `{"kind":"ConfigMap","metadata":"c","status":{}}`,
			opts: opts,
			want: `{"kind":"ConfigMap","metadata":"c"}`,
		},
		{
			name: "no metadata",
			obj:  `{"kind":"ConfigMap","data":{}}`,
			opts: opts,
			want: `{"kind":"ConfigMap","data":{}}`,
		},
		{
			name: "a namespace that is a number is left alone",
			obj:  `{"kind":"ConfigMap","metadata":{"name":"c","namespace":5}}`,
			opts: opts,
			want: `{"kind":"ConfigMap","metadata":{"name":"c","namespace":5,"labels":{` + labels + `}}}`,
		},
		{
			name: "a Namespace whose name is a list",
			obj:  `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":["old"]}}`,
			opts: opts,
			want: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":["old"],"labels":{` + labels + `}}}`,
		},
		{
			name: "a spec that is a string",
			obj:  `{"kind":"Service","metadata":{"name":"s"},"spec":"ClusterIP"}`,
			opts: opts,
			want: `{"kind":"Service","metadata":{"name":"s","labels":{` + labels + `}},"spec":"ClusterIP"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := item(t, tt.obj)
			before := in.DeepCopy()
			got := Prepare(in, tt.opts)
			assertItem(t, got, tt.want)
			if !reflect.DeepEqual(in.Object, before.Object) {
				t.Errorf("Prepare modified its input: %s", jsonOf(in))
			}
		})
	}
	if Prepare(nil, opts) != nil {
		t.Error("Prepare(nil) is not nil")
	}
}

func TestOptionsMapNamespace(t *testing.T) {
	o := Options{NamespaceMapping: map[string]string{"a": "b", "c": ""}}
	for in, want := range map[string]string{"a": "b", "b": "b", "c": "c", "": "", "x": "x"} {
		if got := o.MapNamespace(in); got != want {
			t.Errorf("MapNamespace(%q) = %q, want %q", in, got, want)
		}
	}
	if got := (Options{}).MapNamespace("a"); got != "a" {
		t.Errorf("MapNamespace without a mapping = %q", got)
	}
}
