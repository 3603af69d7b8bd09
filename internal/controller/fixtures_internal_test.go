package controller

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// What the internal tests of the owners still in this package share; each owner moved to its
// own package keeps its own copy (openGate) or uses testenv.Scheme.

// openGate lets a reconciler made by a test run at once.
type openGate struct{}

func (openGate) Wait(context.Context) error { return nil }

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := cairnv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}
