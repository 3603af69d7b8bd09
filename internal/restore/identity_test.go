package restore

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cairn-backup/cairn/internal/backup"
)

func TestVerifyIdentity(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	deploy := schema.GroupResource{Group: "apps", Resource: "deployments"}
	widgets := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	served := map[schema.GroupResource]*backup.Resource{
		cm:           {Kind: "ConfigMap", Namespaced: true},
		deploy:       {Kind: "Deployment", Namespaced: true},
		namespacesGR: {Kind: "Namespace"},
		pvsGR:        {Kind: "PersistentVolume"},
		crdsGR:       {Kind: "CustomResourceDefinition"},
	}
	tests := []struct {
		name string
		ref  ItemRef
		obj  string
		// unserved: this cluster does not serve ref's resource (served is nil).
		unserved bool
		wantErr  string
	}{
		{name: "namespaced item", ref: ItemRef{GR: cm, Namespace: "a", Name: "c"}, obj: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"a"}}`},
		{name: "item of a named group", ref: ItemRef{GR: deploy, Namespace: "a", Name: "web"}, obj: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"a"}}`},
		{name: "cluster-scoped item", ref: ItemRef{GR: pvsGR, Name: "pv"}, obj: `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pv"}}`},
		{name: "a Namespace at its cluster-scoped path", ref: ItemRef{GR: namespacesGR, Name: "shop"}, obj: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop"}}`},

		// The path and the item name different objects.
		{name: "another name", ref: ItemRef{GR: cm, Namespace: "a", Name: "c"}, obj: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d","namespace":"a"}}`, wantErr: `named "d"`},
		{name: "another namespace", ref: ItemRef{GR: cm, Namespace: "a", Name: "c"}, obj: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"kube-system"}}`, wantErr: `namespace "kube-system"`},
		{name: "a namespace on a cluster-scoped item", ref: ItemRef{GR: pvsGR, Name: "pv"}, obj: `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pv","namespace":"a"}}`, wantErr: `namespace "a"`},
		{name: "no namespace on a namespaced item", ref: ItemRef{GR: cm, Namespace: "a", Name: "c"}, obj: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}`, wantErr: `namespace ""`},
		{name: "a namespace that is a number", ref: ItemRef{GR: cm, Namespace: "a", Name: "c"}, obj: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":1}}`, wantErr: "not a string"},
		{name: "a name that is a number", ref: ItemRef{GR: cm, Namespace: "a", Name: "1"}, obj: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":1,"namespace":"a"}}`, wantErr: "named"},
		{name: "metadata that is a string", ref: ItemRef{GR: cm, Namespace: "a", Name: "c"}, obj: `{"apiVersion":"v1","kind":"ConfigMap","metadata":"c"}`, wantErr: "no metadata"},

		// The escape: a cluster-scoped Namespace at a namespaced path passed the
		// namespace check by its path and was created cluster-scoped.
		{name: "a Namespace at a path in a namespace", ref: ItemRef{GR: namespacesGR, Namespace: "team-a", Name: "evil-ns"},
			obj: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"evil-ns","namespace":"team-a"}}`, wantErr: "namespaces is cluster-scoped in this cluster, but the item is at a path in namespace team-a"},
		{name: "a Namespace at a path in a namespace, without a namespace in it", ref: ItemRef{GR: namespacesGR, Namespace: "team-a", Name: "evil-ns"},
			obj: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"evil-ns"}}`, wantErr: `namespace ""`},
		{name: "a CRD at a path in a namespace", ref: ItemRef{GR: crdsGR, Namespace: "team-a", Name: "x.example.com"},
			obj: `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"x.example.com","namespace":"team-a"}}`, wantErr: "cluster-scoped in this cluster"},
		{name: "a namespaced resource at a cluster-scoped path", ref: ItemRef{GR: cm, Name: "c"}, obj: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}`,
			wantErr: "namespaced in this cluster, but the item is at a cluster-scoped path"},

		// Group and kind.
		{name: "a group other than the path's", ref: ItemRef{GR: cm, Namespace: "a", Name: "c"}, obj: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"a"}}`,
			wantErr: `apiVersion "rbac.authorization.k8s.io/v1" is not of group ""`},
		{name: "the core group at a named group's path", ref: ItemRef{GR: deploy, Namespace: "a", Name: "web"}, obj: `{"apiVersion":"v1","kind":"Deployment","metadata":{"name":"web","namespace":"a"}}`,
			wantErr: `is not of group "apps"`},
		{name: "no version", ref: ItemRef{GR: deploy, Namespace: "a", Name: "web"}, obj: `{"apiVersion":"apps/","kind":"Deployment","metadata":{"name":"web","namespace":"a"}}`, wantErr: "apiVersion"},
		{name: "no apiVersion", ref: ItemRef{GR: cm, Namespace: "a", Name: "c"}, obj: `{"kind":"ConfigMap","metadata":{"name":"c","namespace":"a"}}`, wantErr: "apiVersion"},
		{name: "an apiVersion that is a number", ref: ItemRef{GR: cm, Namespace: "a", Name: "c"}, obj: `{"apiVersion":1,"kind":"ConfigMap","metadata":{"name":"c","namespace":"a"}}`, wantErr: "apiVersion"},
		{name: "another kind than the resource's", ref: ItemRef{GR: cm, Namespace: "a", Name: "c"}, obj: `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"c","namespace":"a"}}`,
			wantErr: "the item is a Secret, but configmaps holds ConfigMap objects"},
		{name: "no kind", ref: ItemRef{GR: cm, Namespace: "a", Name: "c"}, obj: `{"apiVersion":"v1","metadata":{"name":"c","namespace":"a"}}`, wantErr: "no kind"},

		// A resource this cluster does not serve (a custom resource whose CRD is in the
		// backup): name, namespace and group are checked; kind and scope are the API server's
		// to refuse, at the endpoint the path places the item at.
		{name: "unserved: as its path says", ref: ItemRef{GR: widgets, Namespace: "a", Name: "w"}, unserved: true, obj: `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"a"}}`},
		{name: "unserved: any kind", ref: ItemRef{GR: widgets, Namespace: "a", Name: "w"}, unserved: true, obj: `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"w","namespace":"a"}}`},
		{name: "unserved: another group", ref: ItemRef{GR: widgets, Namespace: "a", Name: "w"}, unserved: true, obj: `{"apiVersion":"evil.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"a"}}`, wantErr: `is not of group "example.com"`},
		{name: "unserved: another namespace", ref: ItemRef{GR: widgets, Namespace: "a", Name: "w"}, unserved: true, obj: `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"b"}}`, wantErr: `namespace "b"`},
		{name: "unserved: another name", ref: ItemRef{GR: widgets, Name: "w"}, unserved: true, obj: `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"x"}}`, wantErr: `named "x"`},
		{name: "unserved: no kind", ref: ItemRef{GR: widgets, Name: "w"}, unserved: true, obj: `{"apiVersion":"example.com/v1","metadata":{"name":"w"}}`, wantErr: "no kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := served[tt.ref.GR]
			if tt.unserved {
				res = nil
			} else if res == nil {
				t.Fatalf("no discovery for %s in the table", tt.ref.GR)
			}
			err := VerifyIdentity(tt.ref, item(t, tt.obj), res)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("VerifyIdentity: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("VerifyIdentity = %v, want an error with %q", err, tt.wantErr)
			case err != nil && !strings.Contains(err.Error(), tt.ref.String()):
				t.Errorf("VerifyIdentity = %v: it does not name the item's path (%s)", err, tt.ref)
			}
		})
	}
	if err := VerifyIdentity(ItemRef{GR: cm, Name: "c"}, nil, nil); err == nil {
		t.Error("a nil item has an identity")
	}
}
