package lifecycle

import (
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// StorageRateLimiter paces the retries of reconciles that failed, mostly on storage: from
// 100 ms, doubling, to a minute at most, so a storage outage is retried at least once a minute
// (controller-runtime's default ceiling is about 16 minutes).
func StorageRateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, time.Minute)
}
