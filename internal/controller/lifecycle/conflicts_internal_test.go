package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// reconcileFunc is a reconciler that returns what a test says.
type reconcileFunc func() (reconcile.Result, error)

func (f reconcileFunc) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	return f()
}

// conflictCount is cairn_reconcile_conflicts_total of controller name.
func conflictCount(t *testing.T, name string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "cairn_reconcile_conflicts_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelValue(m, "controller") == name {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestConflictsRequeued(t *testing.T) {
	gr := schema.GroupResource{Group: "cairn.dev", Resource: "backupstoragelocations"}
	conflict := apierrors.NewConflict(gr, "s3", errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	other := errors.New("the storage service is down")
	tests := []struct {
		name       string
		result     reconcile.Result
		err        error
		wantResult reconcile.Result
		wantErr    error
		conflicts  float64
	}{
		{name: "a conflict", err: conflict, wantResult: reconcile.Result{Requeue: true}, conflicts: 1},                                                                    //nolint:staticcheck // what the wrapper returns
		{name: "a wrapped conflict", err: fmt.Errorf("status of location s3 changed meanwhile: %w", conflict), wantResult: reconcile.Result{Requeue: true}, conflicts: 1}, //nolint:staticcheck // what the wrapper returns
		{name: "a conflict with a result", result: reconcile.Result{RequeueAfter: time.Hour}, err: conflict, wantResult: reconcile.Result{Requeue: true}, conflicts: 1},   //nolint:staticcheck // what the wrapper returns
		{name: "another error", err: other, wantErr: other},
		{name: "a NotFound", err: apierrors.NewNotFound(gr, "s3"), wantErr: apierrors.NewNotFound(gr, "s3")},
		{name: "success", result: reconcile.Result{RequeueAfter: time.Minute}, wantResult: reconcile.Result{RequeueAfter: time.Minute}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("test-%d", i)
			var lines []string
			log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 1})
			r := conflictsRequeued{name: name, r: reconcileFunc(func() (reconcile.Result, error) { return tt.result, tt.err })}
			result, err := r.Reconcile(logr.NewContext(context.Background(), log), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "cairn-system", Name: "s3"}})
			if result != tt.wantResult {
				t.Errorf("result = %+v, want %+v", result, tt.wantResult)
			}
			if (err == nil) != (tt.wantErr == nil) || (err != nil && err.Error() != tt.wantErr.Error()) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if got := conflictCount(t, name); got != tt.conflicts {
				t.Errorf("cairn_reconcile_conflicts_total{controller=%q} = %v, want %v", name, got, tt.conflicts)
			}
			logged := strings.Join(lines, "\n")
			switch {
			case tt.conflicts > 0 && (len(lines) != 1 || !strings.Contains(logged, `"level"=1`) || !strings.Contains(logged, "Requeued after a conflict") || !strings.Contains(logged, "the object has been modified")):
				t.Errorf("want one debug line naming the conflict, logged:\n%s", logged)
			case tt.conflicts == 0 && len(lines) != 0:
				t.Errorf("logged:\n%s", logged)
			}
		})
	}
}

// TestEveryReconcilerIsRegisteredThroughRegister keeps conflictsRequeued on every reconciler:
// each controller that a package under internal/controller builds is built inside a call of
// Register, and nothing but Register completes a builder.
func TestEveryReconcilerIsRegisteredThroughRegister(t *testing.T) {
	var files []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && (d.Name() == "controllertest" || d.Name() == "unittest") {
			return filepath.SkipDir // the tests' support: fake clients are built there, no controller
		}
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	builders := 0
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var inRegister []bool // whether each enclosing node is (inside) a call of Register
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				inRegister = inRegister[:len(inRegister)-1]
				return true
			}
			inside := len(inRegister) > 0 && inRegister[len(inRegister)-1]
			if call, ok := n.(*ast.CallExpr); ok {
				switch fun := call.Fun.(type) {
				case *ast.Ident:
					if fun.Name == "Register" {
						inside = true
					}
				case *ast.SelectorExpr:
					switch fun.Sel.Name {
					case "Register":
						inside = true
					case "NewControllerManagedBy", "ControllerManagedBy":
						builders++
						if !inside {
							t.Errorf("%s: a controller built outside Register", fset.Position(call.Pos()))
						}
					case "Complete", "Build":
						if filepath.Base(path) != "conflicts.go" {
							t.Errorf("%s: %s called outside Register", fset.Position(call.Pos()), fun.Sel.Name)
						}
					}
				}
			}
			inRegister = append(inRegister, inside)
			return true
		})
	}
	// Builder call sites in the source, not controllers at run time: the generic readiness,
	// cancel-warning and operations reconcilers build one controller per kind from one site each.
	if builders < 16 {
		t.Errorf("found %d controllers built; the scan misses some", builders)
	}
}
