package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// crds are Cairn's CRDs (config/crd/bases, their printer columns generated from the
// +kubebuilder:printcolumn markers), by resource ("backups").
var crds = sync.OnceValues(func() (map[string]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "cairn.dev_*.yaml"))
	if err != nil {
		return nil, err
	}
	all := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			return nil, err
		}
		all[crd.Spec.Names.Plural] = crd
	}
	return all, nil
})

// restMapper maps Cairn's kinds to their resources as the API server's discovery does, from
// the CRDs, for a fake API client.
func restMapper(t *testing.T) meta.RESTMapper {
	t.Helper()
	all, err := crds()
	if err != nil {
		t.Fatal(err)
	}
	m := meta.NewDefaultRESTMapper(nil)
	for _, crd := range all {
		gvk := cairnv1.GroupVersion.WithKind(crd.Spec.Names.Kind)
		m.AddSpecific(gvk, gvk.GroupVersion().WithResource(crd.Spec.Names.Plural),
			gvk.GroupVersion().WithResource(crd.Spec.Names.Singular), meta.RESTScopeNamespace)
	}
	return m
}

// printerTable is the table the API server answers for objs of resource, as its CRD's printer
// columns make it (apiextensions-apiserver's table convertor: a Name column, then each
// printer column by its JSONPath; nothing where the path finds nothing; a date as an age),
// with each object in its row (includeObject=Object), and ages at now rather than by the
// server's clock.
func printerTable(resource string, objs []client.Object, now time.Time) (*metav1.Table, error) {
	all, err := crds()
	if err != nil {
		return nil, err
	}
	crd, ok := all[resource]
	if !ok {
		return nil, fmt.Errorf("no CRD for %s", resource)
	}
	cols := crd.Spec.Versions[0].AdditionalPrinterColumns
	table := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"},
		ColumnDefinitions: []metav1.TableColumnDefinition{{Name: "Name", Type: "string", Format: "name"}}}
	for _, c := range cols {
		table.ColumnDefinitions = append(table.ColumnDefinitions,
			metav1.TableColumnDefinition{Name: c.Name, Type: c.Type, Format: c.Format, Priority: c.Priority})
	}
	for _, obj := range objs {
		gvk, err := apiutil.GVKForObject(obj, Scheme())
		if err != nil {
			return nil, err
		}
		obj.GetObjectKind().SetGroupVersionKind(gvk)
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, err
		}
		cells := []any{obj.GetName()}
		for _, c := range cols {
			cell, err := printerCell(c, content, now)
			if err != nil {
				return nil, err
			}
			cells = append(cells, cell)
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		table.Rows = append(table.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Raw: raw}})
	}
	return table, nil
}

// printerCell is the cell of printer column c for an object's content, as the API server
// makes it.
func printerCell(c apiextensionsv1.CustomResourceColumnDefinition, content map[string]any, now time.Time) (any, error) {
	path := jsonpath.New(c.Name).AllowMissingKeys(true)
	if err := path.Parse("{" + c.JSONPath + "}"); err != nil {
		return nil, err
	}
	results, err := path.FindResults(content)
	if err != nil {
		return nil, err
	}
	if len(results) == 0 || len(results[0]) == 0 {
		return nil, nil
	}
	value := results[0][0].Interface()
	switch c.Type {
	case "string":
		var buf bytes.Buffer
		err := path.PrintResults(&buf, []reflect.Value{reflect.ValueOf(value)})
		return buf.String(), err
	case "integer", "boolean":
		return value, nil
	case "date":
		var at metav1.Time
		if err := at.UnmarshalQueryParameter(value.(string)); err != nil {
			return nil, err
		}
		return duration.HumanDuration(now.Sub(at.Time)), nil
	}
	return nil, fmt.Errorf("printer column %s has type %s", c.Name, c.Type)
}

// serveTables makes e talk to a fake API server that answers, as the real one does for
// `kubectl get`, GETs of Cairn's objects asked for as a Table with their objects: it reads
// them through e's API client (so a test's fake client and its interceptors are the server's
// store) and makes the table with printerTable. A request that does not ask as kubectl does
// is refused.
func serveTables(t *testing.T, e *env) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(err error) {
			status := apierrors.NewInternalError(err).Status()
			if s, ok := err.(apierrors.APIStatus); ok {
				status = s.Status()
			}
			status.APIVersion, status.Kind = "v1", "Status"
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(int(status.Code))
			_ = json.NewEncoder(w).Encode(status)
		}
		if r.Header.Get("Accept") != tableAccept || r.URL.Query().Get("includeObject") != "Object" {
			fail(apierrors.NewBadRequest("want a Table with objects, got Accept " + r.Header.Get("Accept") + ", " + r.URL.RawQuery))
			return
		}
		// /apis/cairn.dev/v1alpha1/namespaces/NAMESPACE/RESOURCE[/NAME]
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/apis/"+cairnv1.GroupVersion.String()+"/namespaces/"), "/")
		if len(parts) < 2 {
			fail(apierrors.NewNotFound(cairnv1.GroupVersion.WithResource(r.URL.Path).GroupResource(), ""))
			return
		}
		ns, resource := parts[0], parts[1]
		c, err := e.client()
		if err != nil {
			fail(err)
			return
		}
		gvk, err := c.RESTMapper().KindFor(cairnv1.GroupVersion.WithResource(resource))
		if err != nil {
			fail(err)
			return
		}
		var objs []client.Object
		if len(parts) == 3 {
			obj, err := Scheme().New(gvk)
			if err != nil {
				fail(err)
				return
			}
			if err := c.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: parts[2]}, obj.(client.Object)); err != nil {
				fail(err)
				return
			}
			objs = append(objs, obj.(client.Object))
		} else {
			list, err := Scheme().New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			if err != nil {
				fail(err)
				return
			}
			sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
			if err != nil {
				fail(apierrors.NewBadRequest(err.Error()))
				return
			}
			if err := c.List(r.Context(), list.(client.ObjectList), client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
				fail(err)
				return
			}
			if err := meta.EachListItem(list, func(o runtime.Object) error {
				objs = append(objs, o.(client.Object))
				return nil
			}); err != nil {
				fail(err)
				return
			}
		}
		table, err := printerTable(resource, objs, now)
		if err != nil {
			fail(err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(table)
	}))
	t.Cleanup(srv.Close)
	e.restConfig = func() (*rest.Config, error) { return &rest.Config{Host: srv.URL}, nil }
}

func TestWithColumns(t *testing.T) {
	type obj struct{ name string }
	server := &metav1.Table{
		ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Name", Type: "string"}, {Name: "Phase", Type: "string"}, {Name: "Default", Type: "boolean"},
			{Name: "Age", Type: "date"}, {Name: "Expires", Type: "string", Priority: 1},
		},
		Rows: []metav1.TableRow{
			{Cells: []any{"a", "Completed", true, "3d", "2026-12-22T02:00:03Z"}},
			{Cells: []any{"b", nil, nil, "5m", nil}},
		},
	}
	objs := []*obj{{name: "a"}, {name: "b"}}
	own := func(name, after string) column[obj] {
		return column[obj]{name: name, after: after, cell: func(o *obj, _ time.Time) string { return name + " of " + o.name }}
	}
	type printed struct {
		name     string
		priority int32
	}
	tests := []struct {
		name      string
		cols      []column[obj]
		wantCols  []printed
		wantCells [][]any
	}{
		{name: "the server's alone: a missing boolean is false", cols: nil,
			wantCols:  []printed{{"Name", 0}, {"Phase", 0}, {"Default", 0}, {"Age", 0}, {"Expires", 1}},
			wantCells: [][]any{{"a", "Completed", true, "3d", "2026-12-22T02:00:03Z"}, {"b", nil, false, "5m", nil}}},
		{name: "one of the CLI's own after a server column", cols: []column[obj]{own("Bucket", "Name")},
			wantCols:  []printed{{"Name", 0}, {"Bucket", 0}, {"Phase", 0}, {"Default", 0}, {"Age", 0}, {"Expires", 1}},
			wantCells: [][]any{{"a", "Bucket of a", "Completed", true, "3d", "2026-12-22T02:00:03Z"}, {"b", "Bucket of b", nil, false, "5m", nil}}},
		{name: "in place of the server's column of its name, moved, and shown without wide", cols: []column[obj]{own("Expires", "Default")},
			wantCols:  []printed{{"Name", 0}, {"Phase", 0}, {"Default", 0}, {"Expires", 0}, {"Age", 0}},
			wantCells: [][]any{{"a", "Completed", true, "Expires of a", "3d"}, {"b", nil, false, "Expires of b", "5m"}}},
		{name: "after one of its own", cols: []column[obj]{own("Errors", "Phase"), own("Warnings", "Errors")},
			wantCols: []printed{{"Name", 0}, {"Phase", 0}, {"Errors", 0}, {"Warnings", 0}, {"Default", 0}, {"Age", 0}, {"Expires", 1}},
			wantCells: [][]any{{"a", "Completed", "Errors of a", "Warnings of a", true, "3d", "2026-12-22T02:00:03Z"},
				{"b", nil, "Errors of b", "Warnings of b", false, "5m", nil}}},
		{name: "after a column the server lacks: last", cols: []column[obj]{own("Size", "Bytes")},
			wantCols:  []printed{{"Name", 0}, {"Phase", 0}, {"Default", 0}, {"Age", 0}, {"Expires", 1}, {"Size", 0}},
			wantCells: [][]any{{"a", "Completed", true, "3d", "2026-12-22T02:00:03Z", "Size of a"}, {"b", nil, false, "5m", nil, "Size of b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := withColumns(server, objs, tt.cols, now)
			var cols []printed
			for _, c := range got.ColumnDefinitions {
				cols = append(cols, printed{c.Name, c.Priority})
			}
			var cells [][]any
			for _, r := range got.Rows {
				cells = append(cells, r.Cells)
			}
			if !reflect.DeepEqual(cols, tt.wantCols) || !reflect.DeepEqual(cells, tt.wantCells) {
				t.Errorf("columns %v, cells %v;\nwant %v, %v", cols, cells, tt.wantCols, tt.wantCells)
			}
		})
	}
}

// TestGetAsksForTheServersTable checks that `get` prints the API server's table of the objects
// it names, in that order, or of those -l selects, and says which name the server lacks.
func TestGetAsksForTheServersTable(t *testing.T) {
	b := func(name string, labels map[string]string) *cairnv1.Backup {
		return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: labels},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StorageLocation: "default"}}
	}
	objs := []client.Object{b("one", map[string]string{"app": "web"}), b("two", nil), b("three", map[string]string{"app": "web"})}
	names := func(out string) []string {
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			got = append(got, strings.Fields(line)[0])
		}
		return got
	}
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{args: []string{"two", "one"}, want: []string{"two", "one"}},
		{args: []string{"-l", "app=web"}, want: []string{"one", "three"}},
	} {
		e, out, errOut := testEnv(t, objs...)
		if code := run(e, append([]string{"backup", "get"}, tt.args...)...); code != ExitOK {
			t.Fatalf("%v: exit %d: %s", tt.args, code, errOut)
		}
		if got := names(out.String()); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%v: rows %v, want %v:\n%s", tt.args, got, tt.want, out)
		}
	}
	e, _, errOut := testEnv(t, objs...)
	if code := run(e, "backup", "get", "one", "nope"); code != ExitError || !strings.Contains(errOut.String(), `backup "nope" not found in namespace team-a`) {
		t.Errorf("get of a missing name: exit %d, stderr %q", code, errOut)
	}
	e, _, errOut = testEnv(t)
	if code := run(e, "backup", "get"); code != ExitOK || errOut.String() != "No resources found in team-a namespace.\n" {
		t.Errorf("get of none: exit %d, stderr %q", code, errOut)
	}
}
