package finalizer

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// What the finalizers' tests share besides internal/controller/unittest.

// openGate lets a reconciler made by a test run at once.
type openGate struct{}

func (openGate) Wait(context.Context) error { return nil }

var restoreRequest = ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "r"}}
