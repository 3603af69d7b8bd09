package backup

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var discovered = ResourcesFromDiscovery([]*metav1.APIResourceList{
	{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", SingularName: "configmap", Kind: "ConfigMap", ShortNames: []string{"cm"}, Namespaced: true, Verbs: []string{"get", "list"}},
		{Name: "pods", SingularName: "pod", Kind: "Pod", ShortNames: []string{"po"}, Namespaced: true, Verbs: []string{"get", "list"}},
		{Name: "pods/log", Kind: "Pod", Namespaced: true, Verbs: []string{"get"}},
		{Name: "events", SingularName: "event", Kind: "Event", ShortNames: []string{"ev"}, Namespaced: true, Verbs: []string{"get", "list"}},
		{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: []string{"create"}},
		{Name: "persistentvolumes", SingularName: "persistentvolume", Kind: "PersistentVolume", ShortNames: []string{"pv"}, Verbs: []string{"get", "list"}},
	}},
	{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "deployments", SingularName: "deployment", Kind: "Deployment", ShortNames: []string{"deploy"}, Namespaced: true, Verbs: []string{"get", "list"}},
	}},
	{GroupVersion: "events.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "events", SingularName: "event", Kind: "Event", ShortNames: []string{"ev"}, Namespaced: true, Verbs: []string{"get", "list"}},
	}},
	{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
		{Name: "widgets", SingularName: "widget", Kind: "Widget", Namespaced: true, Verbs: []string{"get", "list"}},
		{Name: "deployments", SingularName: "deployment", Kind: "Deployment", Namespaced: true, Verbs: []string{"get", "list"}},
	}},
})

func TestResourcesFromDiscovery(t *testing.T) {
	var names []string
	for _, r := range discovered {
		names = append(names, r.GroupResource().String())
	}
	want := "[configmaps events persistentvolumes pods deployments.apps deployments.example.com widgets.example.com]"
	if fmt.Sprint(names) != want {
		t.Errorf("resources = %v\nwant %s", names, want)
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
