package backup

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestParseListed(t *testing.T) {
	cm := Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespaced: true}
	widget := Resource{GroupVersionResource: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, Kind: "Widget", Namespaced: true}
	tests := []struct {
		name     string
		res      Resource
		raw      string
		wantKind string
		wantAPI  string
		wantErr  bool
	}{
		{name: "a built-in item gets apiVersion and kind", res: cm,
			raw: `{"metadata":{"name":"a","namespace":"ns","labels":{"x":"y"}},"data":{"k":"v"}}`, wantKind: "ConfigMap", wantAPI: "v1"},
		{name: "a custom resource keeps its own", res: widget,
			raw: `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"ns"}}`, wantKind: "Widget", wantAPI: "example.com/v1"},
		{name: "an empty object", res: cm, raw: `{}`, wantKind: "ConfigMap", wantAPI: "v1"},
		{name: "not an object", res: cm, raw: `[1]`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item, err := parseListed(tt.res, tt.res.GroupVersion().String(), []byte(tt.raw))
			if tt.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(item.raw, &got); err != nil {
				t.Fatalf("the item is not valid JSON: %s: %v", item.raw, err)
			}
			if got["kind"] != tt.wantKind || got["apiVersion"] != tt.wantAPI {
				t.Errorf("kind/apiVersion = %v/%v in %s", got["kind"], got["apiVersion"], item.raw)
			}
		})
	}
	item, _ := parseListed(cm, "v1", []byte(`{"metadata":{"name":"a","namespace":"ns","labels":{"x":"y"}}}`))
	if item.name != "a" || item.namespace != "ns" || item.labels["x"] != "y" {
		t.Errorf("metadata = %+v", item)
	}
}

func TestListPath(t *testing.T) {
	cm := Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}}
	deploy := Resource{GroupVersionResource: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}}
	for _, tt := range []struct {
		res  Resource
		ns   string
		want string
	}{
		{cm, "team-a", "/api/v1/namespaces/team-a/configmaps"},
		{cm, "", "/api/v1/configmaps"},
		{deploy, "x", "/apis/apps/v1/namespaces/x/deployments"},
	} {
		if got := listPath(tt.res, tt.ns); got != tt.want {
			t.Errorf("listPath = %s, want %s", got, tt.want)
		}
	}
}
