package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
)

// BenchmarkCancel20kConfigMaps cancels a backup of 20,000 ConfigMaps (4 KiB) 1 s after it enters
// InProgress, 5 times, and reports the median and worst time from the patch to the worker
// pool having stopped, and to the terminal phase (Failed, its data removed). The reconcilers
// run in this process, so the moment the pool stops is seen exactly.
func BenchmarkCancel20kConfigMaps(b *testing.B) {
	const n, runs = 20000, 5
	var mu sync.Mutex
	poolStopped := map[string]time.Time{}
	running := map[string]int{}
	cl := startClusterWith(b, controller.Config{Namespace: operatorNamespace, ConcurrentBackups: 1, ItemBlockWorkerCount: 4,
		OnWorkerPool: func(backup string, delta int) {
			mu.Lock()
			defer mu.Unlock()
			running[backup] += delta
			if running[backup] == 0 {
				poolStopped[backup] = time.Now()
			}
		}})
	defer cl.stop()
	// 4 KiB each: with 1 KiB the whole backup takes about 1 s here, and there would be nothing
	// left to cancel 1 s in.
	fillConfigMapsSized(b, cl.c, benchNamespaces(), n, 4096)

	phases := watchPhases(b, cl.cfg)
	defer phases.stop()
	waitFor := func(name string, phase cairnv1.BackupPhase, limit time.Duration) time.Time {
		return phases.waitFor(b, name, phase, limit)
	}

	var toStopped, toFailed []time.Duration
	for i := range runs {
		name := fmt.Sprintf("cancel-%d", i)
		mustCreate(b, cl.c, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name},
			Spec: cairnv1.BackupSpec{IncludedNamespaces: benchNamespaces()}})
		started := waitFor(name, cairnv1.BackupPhaseInProgress, 2*time.Minute)
		time.Sleep(time.Until(started.Add(time.Second)))
		key := operatorNamespace + "/" + name
		mu.Lock()
		busy := running[key] > 0
		mu.Unlock()
		if !busy {
			b.Fatalf("backup %s was no longer running 1 s after it started: nothing to cancel", name)
		}
		patched := time.Now()
		if err := cl.c.Patch(context.Background(), &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name}},
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))); err != nil {
			b.Fatal(err)
		}
		failed := waitFor(name, cairnv1.BackupPhaseFailed, 2*time.Minute)
		mu.Lock()
		stopped := poolStopped[key]
		mu.Unlock()
		var bk cairnv1.Backup
		if err := cl.c.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: name}, &bk); err != nil {
			b.Fatal(err)
		}
		if bk.Status.FailureReason != cairnv1.FailureReasonCancelled {
			b.Fatalf("backup %s failed with %q, not as cancelled", name, bk.Status.FailureReason)
		}
		toStopped = append(toStopped, stopped.Sub(patched))
		toFailed = append(toFailed, failed.Sub(patched))
		b.Logf("%s: %d of %d items done at cancel; pool stopped after %s, Failed after %s",
			name, bk.Status.Progress.ItemsBackedUp, bk.Status.Progress.TotalItems, stopped.Sub(patched), failed.Sub(patched))
	}
	b.ReportMetric(float64(median(toStopped).Milliseconds()), "to-pool-stopped-median-ms")
	b.ReportMetric(float64(slicesMax(toStopped).Milliseconds()), "to-pool-stopped-max-ms")
	b.ReportMetric(float64(median(toFailed).Milliseconds()), "to-failed-median-ms")
	b.ReportMetric(float64(slicesMax(toFailed).Milliseconds()), "to-failed-max-ms")
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func slicesMax(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// phaseTimes records when each backup first entered each phase, from an informer.
type phaseTimes struct {
	mu      sync.Mutex
	entered map[string]map[cairnv1.BackupPhase]time.Time
	stop    func()
}

func watchPhases(b *testing.B, cfg *rest.Config) *phaseTimes {
	b.Helper()
	p := &phaseTimes{entered: map[string]map[cairnv1.BackupPhase]time.Time{}}
	p.stop = watchBackups(b, cfg, func(_, cur *cairnv1.Backup, at time.Time) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.entered[cur.Name] == nil {
			p.entered[cur.Name] = map[cairnv1.BackupPhase]time.Time{}
		}
		if _, seen := p.entered[cur.Name][cur.Status.Phase]; !seen {
			p.entered[cur.Name][cur.Status.Phase] = at
		}
	})
	return p
}

// waitFor returns when the backup entered phase, waiting for it at most limit.
func (p *phaseTimes) waitFor(b *testing.B, name string, phase cairnv1.BackupPhase, limit time.Duration) time.Time {
	b.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		at, ok := p.entered[name][phase]
		p.mu.Unlock()
		if ok {
			return at
		}
	}
	b.Fatalf("backup %s did not reach %s within %s", name, phase, limit)
	return time.Time{}
}
