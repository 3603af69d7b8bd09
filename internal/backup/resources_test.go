package backup

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// rw are the verbs of a resource that can be backed up and restored.
var rw = []string{"create", "delete", "get", "list", "patch", "update", "watch"}

var discovered = ResourcesFromDiscovery([]*metav1.APIResourceList{
	{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", SingularName: "configmap", Kind: "ConfigMap", ShortNames: []string{"cm"}, Namespaced: true, Verbs: rw},
		{Name: "pods", SingularName: "pod", Kind: "Pod", ShortNames: []string{"po"}, Namespaced: true, Verbs: rw},
		{Name: "pods/log", Kind: "Pod", Namespaced: true, Verbs: []string{"get"}},
		{Name: "events", SingularName: "event", Kind: "Event", ShortNames: []string{"ev"}, Namespaced: true, Verbs: rw},
		{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: []string{"create"}},
		{Name: "componentstatuses", SingularName: "componentstatus", Kind: "ComponentStatus", ShortNames: []string{"cs"}, Verbs: []string{"get", "list"}},
		{Name: "persistentvolumes", SingularName: "persistentvolume", Kind: "PersistentVolume", ShortNames: []string{"pv"}, Verbs: rw},
	}},
	{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "deployments", SingularName: "deployment", Kind: "Deployment", ShortNames: []string{"deploy"}, Namespaced: true, Verbs: rw},
	}},
	{GroupVersion: "events.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "events", SingularName: "event", Kind: "Event", ShortNames: []string{"ev"}, Namespaced: true, Verbs: rw},
	}},
	{GroupVersion: "networking.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "ipaddresses", SingularName: "ipaddress", Kind: "IPAddress", ShortNames: []string{"ip"}, Verbs: rw},
		{Name: "networkpolicies", SingularName: "networkpolicy", Kind: "NetworkPolicy", ShortNames: []string{"netpol"}, Namespaced: true, Verbs: rw},
	}},
	{GroupVersion: "authorization.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "subjectaccessreviews", SingularName: "subjectaccessreview", Kind: "SubjectAccessReview", Verbs: []string{"create"}},
	}},
	{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
		{Name: "widgets", SingularName: "widget", Kind: "Widget", Namespaced: true, Verbs: rw},
		{Name: "deployments", SingularName: "deployment", Kind: "Deployment", Namespaced: true, Verbs: rw},
		{Name: "readonlies", SingularName: "readonly", Kind: "ReadOnly", Namespaced: true, Verbs: []string{"get", "list", "watch"}},
	}},
})

func TestResourcesFromDiscovery(t *testing.T) {
	var names []string
	for _, r := range discovered {
		names = append(names, r.GroupResource().String())
	}
	want := "[configmaps events persistentvolumes pods deployments.apps deployments.example.com widgets.example.com networkpolicies.networking.k8s.io]"
	if fmt.Sprint(names) != want {
		t.Errorf("resources = %v\nwant %s", names, want)
	}
}

// TestBackable is the selection rule: the verbs, then the cluster-managed kinds.
func TestBackable(t *testing.T) {
	gr := schema.ParseGroupResource
	tests := []struct {
		name     string
		resource string
		verbs    []string
		want     bool
	}{
		{name: "every verb", resource: "configmaps", verbs: rw, want: true},
		{name: "exactly list, get and create", resource: "configmaps", verbs: []string{"create", "get", "list"}, want: true},
		{name: "no delete, patch or update", resource: "widgets.example.com", verbs: []string{"list", "get", "create", "watch"}, want: true},
		{name: "no create", resource: "widgets.example.com", verbs: []string{"get", "list", "watch", "delete"}},
		{name: "no list", resource: "widgets.example.com", verbs: []string{"get", "create", "delete"}},
		{name: "no get", resource: "widgets.example.com", verbs: []string{"list", "create", "delete"}},
		{name: "create only (a review kind)", resource: "subjectaccessreviews.authorization.k8s.io", verbs: []string{"create"}},
		{name: "no verbs", resource: "widgets.example.com"},
		{name: "verbs are case-sensitive", resource: "widgets.example.com", verbs: []string{"LIST", "GET", "CREATE"}},
		{name: "component statuses as served (get, list)", resource: "componentstatuses", verbs: []string{"get", "list"}},
		{name: "component statuses even if creatable", resource: "componentstatuses", verbs: rw},
		{name: "IP addresses of Services", resource: "ipaddresses.networking.k8s.io", verbs: rw},
		{name: "IPAddress of another group", resource: "ipaddresses.example.com", verbs: rw, want: true},
		{name: "events.k8s.io events (the core events again)", resource: "events.events.k8s.io", verbs: rw},
		{name: "core events: backed up, not restored", resource: "events", verbs: rw, want: true},
		{name: "nodes: backed up, not restored", resource: "nodes", verbs: rw, want: true},
		{name: "CSI nodes: backed up, not restored", resource: "csinodes.storage.k8s.io", verbs: rw, want: true},
		{name: "volume attachments: backed up, not restored", resource: "volumeattachments.storage.k8s.io", verbs: rw, want: true},
		{name: "service CIDRs", resource: "servicecidrs.networking.k8s.io", verbs: rw, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Backable(gr(tt.resource), tt.verbs); got != tt.want {
				t.Errorf("Backable(%s, %v) = %v, want %v", tt.resource, tt.verbs, got, tt.want)
			}
		})
	}
}

// TestClusterManagedResources checks the list as docs/restore.md states it: which kinds a
// restore skips, and which of them backups keep.
func TestClusterManagedResources(t *testing.T) {
	gr := schema.ParseGroupResource
	tests := []struct {
		resource          string
		backedUp, skipped bool
	}{
		{resource: "nodes", backedUp: true, skipped: true},
		{resource: "events", backedUp: true, skipped: true},
		{resource: "events.events.k8s.io", skipped: true},
		{resource: "componentstatuses", skipped: true},
		{resource: "ipaddresses.networking.k8s.io", skipped: true},
		{resource: "csinodes.storage.k8s.io", backedUp: true, skipped: true},
		{resource: "volumeattachments.storage.k8s.io", backedUp: true, skipped: true},
		{resource: "servicecidrs.networking.k8s.io", backedUp: true},
		{resource: "endpointslices.discovery.k8s.io", backedUp: true},
		{resource: "endpoints", backedUp: true},
		{resource: "leases.coordination.k8s.io", backedUp: true},
		{resource: "storageclasses.storage.k8s.io", backedUp: true},
		{resource: "pods", backedUp: true},
	}
	for _, tt := range tests {
		t.Run(tt.resource, func(t *testing.T) {
			if got := Backable(gr(tt.resource), rw); got != tt.backedUp {
				t.Errorf("backed up = %v, want %v", got, tt.backedUp)
			}
			if got := NotRestoredReason(gr(tt.resource)); (got != "") != tt.skipped {
				t.Errorf("NotRestoredReason = %q, want skipped %v", got, tt.skipped)
			}
		})
	}
	if len(ClusterManagedResources) != 7 {
		t.Errorf("%d cluster-managed kinds; a kind added or removed belongs in this test and in docs/restore.md", len(ClusterManagedResources))
	}
	for _, m := range ClusterManagedResources {
		if m.Why == "" {
			t.Errorf("%s has no reason", m.Resource)
		}
	}
}

func TestResourceFilter(t *testing.T) {
	gr := schema.ParseGroupResource
	tests := []struct {
		name               string
		included, excluded []string
		in, out            []string
		warnings           int
	}{
		{name: "everything", in: []string{"configmaps", "pods", "deployments.apps", "widgets.example.com"}},
		{name: "plural", included: []string{"configmaps"}, in: []string{"configmaps"}, out: []string{"pods", "deployments.apps"}},
		{name: "singular, short name and kind", included: []string{"pod", "cm", "Widget"}, in: []string{"pods", "configmaps", "widgets.example.com"}, out: []string{"deployments.apps"}},
		{name: "with group", included: []string{"deployments.apps"}, in: []string{"deployments.apps"}, out: []string{"deployments.example.com"}},
		{name: "without group: every group's match", included: []string{"deploy"}, in: []string{"deployments.apps"}, out: []string{"deployments.example.com"}},
		{name: "ambiguous without group: both groups", included: []string{"deployments"}, in: []string{"deployments.apps", "deployments.example.com"}},
		{name: "exclusion wins", included: []string{"*"}, excluded: []string{"cm"}, in: []string{"pods"}, out: []string{"configmaps"}},
		{name: "unknown names warn", included: []string{"gizmos"}, excluded: []string{"doodads.example.com"}, out: []string{"pods"}, warnings: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, warnings := NewResourceFilter(tt.included, tt.excluded, discovered)
			for _, s := range tt.in {
				if !f.Includes(gr(s)) {
					t.Errorf("%s not included", s)
				}
			}
			for _, s := range tt.out {
				if f.Includes(gr(s)) {
					t.Errorf("%s included", s)
				}
			}
			if len(warnings) != tt.warnings {
				t.Errorf("warnings = %v", warnings)
			}
		})
	}
}
