package restore

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestParsePriorities(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{name: "core and grouped resources", in: "namespaces,replicasets.apps,volumesnapshots.snapshot.storage.k8s.io", want: []string{"namespaces", "replicasets.apps", "volumesnapshots.snapshot.storage.k8s.io"}},
		{name: "spaces around entries", in: " secrets , configmaps ", want: []string{"secrets", "configmaps"}},
		{name: "one entry", in: "pods", want: []string{"pods"}},
		{name: "the default order", in: strings.Join(DefaultPriorities, ","), want: DefaultPriorities},
		{name: "nothing", in: "", wantErr: "no resources"},
		{name: "only spaces", in: "  ", wantErr: "no resources"},
		{name: "an empty entry", in: "secrets,,configmaps", wantErr: "entry 2 is empty"},
		{name: "a trailing comma", in: "secrets,", wantErr: "entry 2 is empty"},
		{name: "a duplicate", in: "secrets,configmaps,secrets", wantErr: `entry 3 "secrets" repeats entry 1`},
		{name: "upper case", in: "Secrets", wantErr: `entry 1 "Secrets"`},
		{name: "a kind, not a resource", in: "ReplicaSet.apps", wantErr: "resource name"},
		{name: "an empty group", in: "replicasets.", wantErr: "group after the dot is empty"},
		{name: "an empty resource", in: ".apps", wantErr: "resource name"},
		{name: "a bad group", in: "things.Example.COM", wantErr: "API group"},
		{name: "a version", in: "apps/v1/replicasets", wantErr: "resource name"},
		{name: "a wildcard", in: "*", wantErr: "resource name"},
		{name: "a space inside", in: "config maps", wantErr: "resource name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePriorities(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParsePriorities(%q) = %v, %v; want an error with %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePriorities(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParsePriorities(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestDefaultPrioritiesAreResources(t *testing.T) {
	for _, p := range DefaultPriorities {
		if gr := schema.ParseGroupResource(p); gr.String() != p {
			t.Errorf("%q reads as %v", p, gr)
		}
	}
}

func TestOrder(t *testing.T) {
	gr := schema.ParseGroupResource
	grs := func(ss ...string) []schema.GroupResource {
		out := make([]schema.GroupResource, 0, len(ss))
		for _, s := range ss {
			out = append(out, gr(s))
		}
		return out
	}
	tests := []struct {
		name       string
		present    []string
		priorities []string
		want       [][]string
	}{
		{
			name:       "a namespace's usual items",
			present:    []string{"services", "deployments.apps", "configmaps", "pods", "replicasets.apps", "namespaces", "secrets", "serviceaccounts", "widgets.example.com", "customresourcedefinitions.apiextensions.k8s.io", "ingresses.networking.k8s.io"},
			priorities: DefaultPriorities,
			want: [][]string{
				{"customresourcedefinitions.apiextensions.k8s.io"}, {"namespaces"}, {"serviceaccounts"}, {"secrets"}, {"configmaps"},
				{"pods"}, {"replicasets.apps"}, {"services"},
				{"deployments.apps", "widgets.example.com", "ingresses.networking.k8s.io"},
			},
		},
		{
			name:       "volumes, claims and RBAC in the default order",
			present:    []string{"rolebindings.rbac.authorization.k8s.io", "persistentvolumeclaims", "roles.rbac.authorization.k8s.io", "persistentvolumes", "clusterrolebindings.rbac.authorization.k8s.io", "clusterroles.rbac.authorization.k8s.io", "storageclasses.storage.k8s.io", "volumesnapshots.snapshot.storage.k8s.io", "volumesnapshotcontents.snapshot.storage.k8s.io", "volumesnapshotclasses.snapshot.storage.k8s.io", "limitranges", "priorityclasses.scheduling.k8s.io", "endpoints"},
			priorities: DefaultPriorities,
			want: [][]string{
				{"storageclasses.storage.k8s.io"}, {"volumesnapshotclasses.snapshot.storage.k8s.io"}, {"volumesnapshotcontents.snapshot.storage.k8s.io"}, {"volumesnapshots.snapshot.storage.k8s.io"},
				{"persistentvolumes"}, {"persistentvolumeclaims"},
				{"clusterroles.rbac.authorization.k8s.io"}, {"clusterrolebindings.rbac.authorization.k8s.io"}, {"roles.rbac.authorization.k8s.io"}, {"rolebindings.rbac.authorization.k8s.io"},
				{"limitranges"}, {"priorityclasses.scheduling.k8s.io"}, {"endpoints"},
			},
		},
		{
			name:       "the rest is sorted by group, then resource",
			present:    []string{"b.z.example.com", "a.z.example.com", "leases.coordination.k8s.io", "configmaps", "daemonsets.apps", "podtemplates"},
			priorities: nil,
			want:       [][]string{{"configmaps", "podtemplates", "daemonsets.apps", "leases.coordination.k8s.io", "a.z.example.com", "b.z.example.com"}},
		},
		{
			name:       "given priorities, CRDs still first",
			present:    []string{"configmaps", "secrets", "customresourcedefinitions.apiextensions.k8s.io", "widgets.example.com"},
			priorities: []string{"widgets.example.com", "customresourcedefinitions.apiextensions.k8s.io", "configmaps"},
			want:       [][]string{{"customresourcedefinitions.apiextensions.k8s.io"}, {"widgets.example.com"}, {"configmaps"}, {"secrets"}},
		},
		{
			name:       "a resource named twice is ordered once",
			present:    []string{"configmaps", "configmaps", "secrets", "secrets"},
			priorities: DefaultPriorities,
			want:       [][]string{{"secrets"}, {"configmaps"}},
		},
		{
			name:       "replicasets of the core group are not apps'",
			present:    []string{"replicasets.apps"},
			priorities: []string{"replicasets"},
			want:       [][]string{{"replicasets.apps"}},
		},
		{name: "nothing present", priorities: DefaultPriorities},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want [][]schema.GroupResource
			for _, g := range tt.want {
				want = append(want, grs(g...))
			}
			got := Order(grs(tt.present...), tt.priorities)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Order =\n%v\nwant\n%v", got, want)
			}
		})
	}
}
