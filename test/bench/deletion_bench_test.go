package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
)

// slowDeletes makes every Delete take a while, as on a slow or distant object store.
type slowDeletes struct {
	storage.ObjectStore
	delay time.Duration
}

func (s slowDeletes) Delete(ctx context.Context, key string) error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.ObjectStore.Delete(ctx, key)
}

// BenchmarkDeletionDoesNotBlock deletes a backup of 10,000 ConfigMaps (in the default location,
// whose deletes take 1 s each, so the deletion runs for several seconds) while 5 new backups
// are created in another location, and reports their time to InProgress next to the same 5
// created with no deletion running.
func BenchmarkDeletionDoesNotBlock(b *testing.B) {
	const n, fresh = 10000, 5
	cl := startClusterWith(b, controller.Config{Namespace: operatorNamespace, ConcurrentBackups: fresh, ItemBlockWorkerCount: 4,
		WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
			if bsl.Name == "default" {
				return slowDeletes{ObjectStore: s, delay: time.Second}
			}
			return s
		}})
	defer cl.stop()
	ctx := context.Background()
	mustCreate(b, cl.c, &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: operatorNamespace},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": b.TempDir()}}})
	fillConfigMaps(b, cl.c, benchNamespaces(), n)
	var small []string
	for i := range fresh {
		small = append(small, fmt.Sprintf("fresh-%d", i))
	}
	fillConfigMaps(b, cl.c, small, fresh)

	phases := watchPhases(b, cl.cfg)
	defer phases.stop()
	waitFor := func(name string, phase cairnv1.BackupPhase) time.Time {
		return phases.waitFor(b, name, phase, 5*time.Minute)
	}
	create := func(name string, namespaces []string, location string) time.Time {
		mustCreate(b, cl.c, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name},
			Spec: cairnv1.BackupSpec{IncludedNamespaces: namespaces, StorageLocation: location}})
		return time.Now()
	}
	// startFive creates 5 backups in the other location at once and returns each one's time
	// from its creation to InProgress, once all completed.
	startFive := func(prefix string) []time.Duration {
		created := make([]time.Time, fresh)
		for i := range fresh {
			created[i] = create(fmt.Sprintf("%s-%d", prefix, i), []string{small[i]}, "other")
		}
		out := make([]time.Duration, fresh)
		for i := range fresh {
			name := fmt.Sprintf("%s-%d", prefix, i)
			out[i] = waitFor(name, cairnv1.BackupPhaseInProgress).Sub(created[i])
			waitFor(name, cairnv1.BackupPhaseCompleted)
		}
		return out
	}

	create("big", benchNamespaces(), "")
	waitFor("big", cairnv1.BackupPhaseCompleted)
	without := startFive("without")

	deletedAt := time.Now()
	if err := cl.c.Delete(ctx, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "big"}}); err != nil {
		b.Fatal(err)
	}
	// The deletion shows Deleting once it has run a second (a quicker one never would).
	deletingAt := waitFor("big", cairnv1.BackupPhaseDeleting)
	with := startFive("with")
	allStarted := time.Now()
	var big cairnv1.Backup
	err := cl.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "big"}, &big)
	stillDeleting := err == nil && big.Status.Phase == cairnv1.BackupPhaseDeleting
	for err == nil {
		time.Sleep(20 * time.Millisecond)
		err = cl.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "big"}, &big)
	}
	if !apierrors.IsNotFound(err) {
		b.Fatal(err)
	}
	deletion := time.Since(deletedAt)

	for i := range fresh {
		b.ReportMetric(float64(without[i].Milliseconds()), fmt.Sprintf("without-%d-ms", i+1))
		b.ReportMetric(float64(with[i].Milliseconds()), fmt.Sprintf("with-%d-ms", i+1))
	}
	b.ReportMetric(float64(median(without).Milliseconds()), "without-median-ms")
	b.ReportMetric(float64(median(with).Milliseconds()), "with-median-ms")
	b.ReportMetric(deletion.Seconds(), "deletion-s")
	if stillDeleting {
		b.ReportMetric(1, "deleting-when-all-completed")
	} else {
		b.ReportMetric(0, "deleting-when-all-completed")
	}
	b.Logf("deletion ran %s; the 5 new backups had all completed %s after it started", deletion, allStarted.Sub(deletingAt))
}
