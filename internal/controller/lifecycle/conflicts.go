package lifecycle

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cairn-backup/cairn/internal/metrics"
)

// Register ends the registration of every reconciler (a test checks that none is registered
// another way): it names the controller and wraps r with conflictsRequeued, so that no
// reconciler logs an optimistic-lock conflict as an error.
func Register(name string, b *builder.Builder, r reconcile.Reconciler) error {
	return b.Named(name).Complete(conflictsRequeued{name: name, r: r})
}

// conflictsRequeued turns an optimistic-lock conflict that a reconcile returns into a requeue.
// A conflict is expected (STYLE.md 5: status is patched with an optimistic lock, and someone
// else wrote first, or the cache was behind) and is mended by reconciling again on the fresh
// object. Returned as an error, controller-runtime would log it as "Reconciler error" with a
// stack trace; here it is a debug line and the cairn_reconcile_conflicts_total counter.
// Whatever the reconciler recorded of the failed attempt (a retry count, a phase timeout's
// last error) it recorded before returning; only the log and the requeue change.
type conflictsRequeued struct {
	name string
	r    reconcile.Reconciler
}

func (c conflictsRequeued) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	result, err := c.r.Reconcile(ctx, req)
	if err == nil || !apierrors.IsConflict(err) {
		return result, err
	}
	metrics.ConflictRequeued(c.name)
	ctrl.LoggerFrom(ctx).V(1).Info("Requeued after a conflict", "conflict", err.Error())
	// The rate-limited requeue is what a returned error gets, without the error log: the
	// deprecation of Requeue is about waiting for events, and this is a retry after a failure.
	return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // see above
}
