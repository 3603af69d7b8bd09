package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// BenchmarkExpiry200 makes 200 small backups in a filesystem location (one namespace with one
// ConfigMap each), then gives all of them the same status.expiration, a few seconds ahead (as
// 200 backups of one schedule with one ttl would have, had they started together), and
// reports, for each, the lag from that expiration to its Delete (deletion timestamp seen) and
// to its object gone (data deleted first by the deletion reconciler), and how many showed
// Deleting (their deletion ran for over a second).
func BenchmarkExpiry200(b *testing.B) {
	const n = 200
	cl := startClusterWith(b, controller.Config{Namespace: operatorNamespace, ConcurrentBackups: 8, ItemBlockWorkerCount: 2})
	defer cl.stop()
	ctx := context.Background()
	namespaces := make([]string, n)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("exp-%03d", i)
	}
	fillConfigMaps(b, cl.c, namespaces, n)

	var mu sync.Mutex
	deleted, gone := map[string]time.Time{}, map[string]time.Time{}
	showedDeleting := map[string]bool{} // a deletion that ran over a second shows Deleting
	stopWatch := runInformer(b, cl.cfg, cache.Options{Scheme: testenv.Scheme()}, &cairnv1.Backup{}, toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if bk, ok := obj.(*cairnv1.Backup); ok && bk.DeletionTimestamp != nil {
				mu.Lock()
				if _, seen := deleted[bk.Name]; !seen {
					deleted[bk.Name] = time.Now()
				}
				if bk.Status.Phase == cairnv1.BackupPhaseDeleting {
					showedDeleting[bk.Name] = true
				}
				mu.Unlock()
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if bk, ok := obj.(*cairnv1.Backup); ok {
				mu.Lock()
				gone[bk.Name] = time.Now()
				mu.Unlock()
			}
		},
	})
	defer stopWatch()

	created := time.Now()
	inParallel(n, func(i int) {
		mustCreate(b, cl.c, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: fmt.Sprintf("exp-%03d", i)},
			Spec: cairnv1.BackupSpec{IncludedNamespaces: []string{namespaces[i]}, TTL: &metav1.Duration{Duration: time.Hour}}})
	})
	waitAllCompleted(b, cl.c, n, 10*time.Minute)
	b.Logf("%d backups completed in %s", n, time.Since(created))

	expiration := metav1.NewTime(time.Now().Add(5 * time.Second).Truncate(time.Second))
	var list cairnv1.BackupList
	if err := cl.c.List(ctx, &list, client.InNamespace(operatorNamespace)); err != nil {
		b.Fatal(err)
	}
	inParallel(n, func(i int) {
		bk := &list.Items[i]
		patch := client.MergeFrom(bk.DeepCopy())
		bk.Status.Expiration = &expiration
		if err := cl.c.Status().Patch(ctx, bk, patch); err != nil {
			b.Error(err)
		}
	})
	if time.Now().After(expiration.Time) {
		b.Fatal("setting the expirations took longer than the time left before them")
	}
	cl.requests.reset()
	for deadline := expiration.Add(5 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		left := n - len(gone)
		mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d backups still exist 5 minutes after they expired", left)
		}
	}

	writes, kinds := cl.requests.writes()
	b.Logf("the manager's API writes from the expiry on: %v", kinds)
	b.ReportMetric(float64(writes)/n, "api-writes-per-backup")
	mu.Lock()
	defer mu.Unlock()
	var toDelete, toGone []time.Duration
	for name, at := range gone {
		toGone = append(toGone, at.Sub(expiration.Time))
		if d, ok := deleted[name]; ok {
			toDelete = append(toDelete, d.Sub(expiration.Time))
		}
	}
	b.ReportMetric(float64(percentile(toDelete, 50).Milliseconds()), "to-delete-p50-ms")
	b.ReportMetric(float64(percentile(toDelete, 99).Milliseconds()), "to-delete-p99-ms")
	b.ReportMetric(float64(percentile(toGone, 50).Milliseconds()), "to-gone-p50-ms")
	b.ReportMetric(float64(percentile(toGone, 99).Milliseconds()), "to-gone-p99-ms")
	b.ReportMetric(float64(slicesMax(toGone).Milliseconds()), "to-gone-max-ms")
	b.ReportMetric(float64(len(showedDeleting)), "showed-deleting")
}

// waitAllCompleted waits until n admin backups are Completed.
func waitAllCompleted(b *testing.B, c client.Client, n int, limit time.Duration) {
	b.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var list cairnv1.BackupList
		if err := c.List(context.Background(), &list, client.InNamespace(operatorNamespace)); err != nil {
			b.Fatal(err)
		}
		done := 0
		for _, bk := range list.Items {
			switch bk.Status.Phase {
			case cairnv1.BackupPhaseCompleted:
				done++
			case cairnv1.BackupPhaseFailed, cairnv1.BackupPhasePartiallyFailed, cairnv1.BackupPhaseFailedValidation:
				b.Fatalf("backup %s ended %s: %s %v", bk.Name, bk.Status.Phase, bk.Status.FailureReason, bk.Status.ValidationErrors)
			}
		}
		if done == n {
			return
		}
	}
	b.Fatalf("the %d backups did not complete within %s", n, limit)
}

// percentile is the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}
