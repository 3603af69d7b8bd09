package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// tableAccept asks the API server for a list or an object as a meta.k8s.io/v1 Table, as
// kubectl get does: its columns are the CRD's printer columns (the +kubebuilder:printcolumn
// markers in api/v1alpha1), so that `cairn KIND get` and `kubectl get KIND` show the same
// columns, declared once.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// column is one of the CLI's own columns of a kind, beside the server's. Its cells are
// computed from the object itself, where a printer column cannot say as much: a time relative
// to now ("in 29d") where the server has a timestamp or an age, New where a new object has no
// phase yet, 0 where the API leaves a zero count out, a bucket and prefix in one. It takes the
// place of the server's column of the same name, if there is one, and follows the column named
// after; it is shown with or without -o wide.
type column[T any] struct {
	name  string
	after string
	cell  func(obj *T, now time.Time) string
}

// serverTables returns get, which reads the API server's table of objects of kind gvk in
// namespace ns: of the one called name, or, for name "", of all that match selector (a label
// selector; "" for all). Each row carries its whole object (includeObject=Object), for the
// CLI's own columns.
func (e *env) serverTables(gvk schema.GroupVersionKind) (get func(ctx context.Context, ns, name, selector string) (*metav1.Table, error), err error) {
	c, err := e.client()
	if err != nil {
		return nil, err
	}
	mapping, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	cfg, err := e.restConfig()
	if err != nil {
		return nil, err
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	rc, err := apiutil.RESTClientForGVK(gvk, true, false, cfg, serializer.NewCodecFactory(Scheme()), httpClient)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ns, name, selector string) (*metav1.Table, error) {
		req := rc.Get().NamespaceIfScoped(ns, mapping.Scope.Name() == meta.RESTScopeNameNamespace).
			Resource(mapping.Resource.Resource).
			SetHeader("Accept", tableAccept).
			Param("includeObject", string(metav1.IncludeObject))
		if name != "" {
			req = req.Name(name)
		} else if selector != "" {
			req = req.Param("labelSelector", selector)
		}
		t := &metav1.Table{}
		return t, req.Do(ctx).Into(t)
	}, nil
}

// rowObjects are the objects of t's rows, as the server sent them with includeObject=Object.
func rowObjects[T any](t *metav1.Table) ([]*T, error) {
	objs := make([]*T, len(t.Rows))
	for i, row := range t.Rows {
		if len(row.Object.Raw) == 0 {
			return nil, fmt.Errorf("the API server's table has no object in row %d", i+1)
		}
		objs[i] = new(T)
		if err := json.Unmarshal(row.Object.Raw, objs[i]); err != nil {
			return nil, fmt.Errorf("the API server's table, row %d: %w", i+1, err)
		}
	}
	return objs, nil
}

// withColumns is the server's table t with the CLI's own columns cols in it, their cells
// computed from objs (the object of each row of t) at now. The server's columns keep their
// order, priority (-o wide shows those above 0) and cells, except that an empty boolean cell
// is false: the API leaves a false boolean out (omitempty), which the server's table shows as
// no value. A column after a name the table lacks goes last.
func withColumns[T any](t *metav1.Table, objs []*T, cols []column[T], now time.Time) *metav1.Table {
	// source is where a column of the result comes from: the server's column server, or own.
	type source struct {
		def    metav1.TableColumnDefinition
		server int
		own    *column[T]
	}
	var layout []source
	for i, def := range t.ColumnDefinitions {
		if !slices.ContainsFunc(cols, func(c column[T]) bool { return c.name == def.Name }) {
			layout = append(layout, source{def: def, server: i})
		}
	}
	for i := range cols {
		c := &cols[i]
		at := len(layout)
		if j := slices.IndexFunc(layout, func(s source) bool { return s.def.Name == c.after }); j >= 0 {
			at = j + 1
		}
		layout = slices.Insert(layout, at, source{def: metav1.TableColumnDefinition{Name: c.name, Type: "string"}, own: c})
	}

	out := &metav1.Table{TypeMeta: t.TypeMeta, ListMeta: t.ListMeta}
	for _, s := range layout {
		out.ColumnDefinitions = append(out.ColumnDefinitions, s.def)
	}
	for r, row := range t.Rows {
		cells := make([]any, len(layout))
		for j, s := range layout {
			switch {
			case s.own != nil:
				cells[j] = s.own.cell(objs[r], now)
			case s.server < len(row.Cells):
				cells[j] = row.Cells[s.server]
			}
			if cells[j] == nil && s.def.Type == "boolean" {
				cells[j] = false
			}
		}
		out.Rows = append(out.Rows, metav1.TableRow{Cells: cells, Object: row.Object})
	}
	return out
}

// printTable prints t as kubectl does: upper-case headers, columns aligned with spaces, no
// borders, the columns of priority above 0 only when wide.
func printTable(w io.Writer, t *metav1.Table, wide bool) error {
	return printers.NewTablePrinter(printers.PrintOptions{Wide: wide}).PrintObj(t, w)
}
