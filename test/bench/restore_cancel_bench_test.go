package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// BenchmarkRestoreCancel20kConfigMaps cancels a restore of 20,000 ConfigMaps (1 KiB, 10
// namespaces, each mapped to a new one) 1 s after it created its first object, 5 times, and
// reports the median and worst time from the patch of spec.cancel to the pool having stopped,
// bounded from both sides: the last ConfigMap the restore created, as a watch sees it (the
// pool stops after it), and FinalizingCancelled, which the restore reconciler writes once the
// run has returned (its pool stopped, its files written). Also: to Failed.
//
// The reconcilers run in this process with the manager's defaults (--restore-worker-count 8).
// A restore has no worker-pool hook as a backup has (Config.OnWorkerPool), so the moment its
// last worker returns is not seen directly.
func BenchmarkRestoreCancel20kConfigMaps(b *testing.B) {
	const n, runs = 20000, 5
	cl := startClusterWith(b, controller.Config{Namespace: operatorNamespace, ConcurrentBackups: 1, ItemBlockWorkerCount: 4})
	defer cl.stop()
	namespaces := benchNamespaces()
	fillConfigMaps(b, cl.c, namespaces, n)
	timeBackup(b, cl.c, "source", namespaces)

	restored := watchRestoredConfigMaps(b, cl.cfg)
	defer restored.stop()
	phases := watchRestorePhases(b, cl.cfg)
	defer phases.stop()

	var toLastCreate, toCancelled, toFailed []time.Duration
	for i := range runs {
		name := fmt.Sprintf("restore-cancel-%d", i)
		mapping := map[string]cairnv1.NamespaceName{}
		for _, ns := range namespaces {
			mapping[ns] = cairnv1.NamespaceName(fmt.Sprintf("rc%d-%s", i, ns))
		}
		mustCreate(b, cl.c, &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name},
			Spec: cairnv1.RestoreSpec{BackupName: "source", IncludedResources: []string{"configmaps"}, NamespaceMapping: mapping}})
		phases.waitFor(b, name, cairnv1.RestorePhaseInProgress, 2*time.Minute)
		first := restored.waitFirst(b, name, 2*time.Minute)
		time.Sleep(time.Until(first.Add(time.Second)))
		if p := phases.current(name); p != cairnv1.RestorePhaseInProgress {
			b.Fatalf("restore %s was %s 1 s after its first create: nothing to cancel", name, p)
		}
		patched := time.Now()
		if err := cl.c.Patch(context.Background(), &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name}},
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))); err != nil {
			b.Fatal(err)
		}
		cancelled := phases.waitFor(b, name, cairnv1.RestorePhaseFinalizingCancelled, 2*time.Minute)
		failed := phases.waitFor(b, name, cairnv1.RestorePhaseFailed, 2*time.Minute)
		var rs cairnv1.Restore
		if err := cl.c.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: name}, &rs); err != nil {
			b.Fatal(err)
		}
		if rs.Status.FailureReason != cairnv1.FailureReasonRestoreCancelled {
			b.Fatalf("restore %s failed with %q, not as cancelled", name, rs.Status.FailureReason)
		}
		// The pool has stopped: a second later, nothing more has been created.
		count, last := restored.seen(name)
		time.Sleep(time.Second)
		if again, _ := restored.seen(name); again != count {
			b.Fatalf("restore %s created %d ConfigMaps after it was Failed", name, again-count)
		}
		toLastCreate = append(toLastCreate, max(last.Sub(patched), 0))
		toCancelled = append(toCancelled, cancelled.Sub(patched))
		toFailed = append(toFailed, failed.Sub(patched))
		b.Logf("%s: %d of %d items handled, %d ConfigMaps created; last create %s after the patch, FinalizingCancelled after %s, Failed after %s",
			name, rs.Status.Progress.ItemsRestored, rs.Status.Progress.TotalItems, count, last.Sub(patched), cancelled.Sub(patched), failed.Sub(patched))
	}
	b.ReportMetric(float64(median(toLastCreate).Milliseconds()), "to-last-create-median-ms")
	b.ReportMetric(float64(slicesMax(toLastCreate).Milliseconds()), "to-last-create-max-ms")
	b.ReportMetric(float64(median(toCancelled).Milliseconds()), "to-finalizing-cancelled-median-ms")
	b.ReportMetric(float64(slicesMax(toCancelled).Milliseconds()), "to-finalizing-cancelled-max-ms")
	b.ReportMetric(float64(median(toFailed).Milliseconds()), "to-failed-median-ms")
	b.ReportMetric(float64(slicesMax(toFailed).Milliseconds()), "to-failed-max-ms")
}

// restoredConfigMaps records, from an informer over the ConfigMaps that carry a restore's
// label (metadata only), how many each restore created and when the first and the last of
// them arrived.
type restoredConfigMaps struct {
	mu          sync.Mutex
	count       map[string]int
	first, last map[string]time.Time
	stop        func()
}

func watchRestoredConfigMaps(b *testing.B, cfg *rest.Config) *restoredConfigMaps {
	b.Helper()
	r := &restoredConfigMaps{count: map[string]int{}, first: map[string]time.Time{}, last: map[string]time.Time{}}
	hasLabel, err := labels.NewRequirement(cairnv1.RestoreNameLabel, selection.Exists, nil)
	if err != nil {
		b.Fatal(err)
	}
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	r.stop = runInformer(b, cfg, cache.Options{Scheme: testenv.Scheme(), DefaultLabelSelector: labels.NewSelector().Add(*hasLabel)}, cm,
		toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			at := time.Now()
			m, ok := obj.(*metav1.PartialObjectMetadata)
			if !ok {
				return
			}
			name := m.GetLabels()[cairnv1.RestoreNameLabel]
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.count[name] == 0 {
				r.first[name] = at
			}
			r.count[name]++
			r.last[name] = at
		}})
	return r
}

// waitFirst returns when the restore's first ConfigMap arrived, waiting for it at most limit.
func (r *restoredConfigMaps) waitFirst(b *testing.B, name string, limit time.Duration) time.Time {
	b.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		at, ok := r.first[name]
		r.mu.Unlock()
		if ok {
			return at
		}
	}
	b.Fatalf("restore %s created no ConfigMap within %s", name, limit)
	return time.Time{}
}

// seen is how many ConfigMaps the restore created, and when the last one arrived.
func (r *restoredConfigMaps) seen(name string) (int, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[name], r.last[name]
}

// restorePhaseTimes records when each restore of the operator's namespace first entered each
// phase, and its phase now, from an informer.
type restorePhaseTimes struct {
	mu      sync.Mutex
	entered map[string]map[cairnv1.RestorePhase]time.Time
	now     map[string]cairnv1.RestorePhase
	stop    func()
}

func watchRestorePhases(b *testing.B, cfg *rest.Config) *restorePhaseTimes {
	b.Helper()
	p := &restorePhaseTimes{entered: map[string]map[cairnv1.RestorePhase]time.Time{}, now: map[string]cairnv1.RestorePhase{}}
	seen := func(obj any) {
		at := time.Now()
		rs, ok := obj.(*cairnv1.Restore)
		if !ok {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.entered[rs.Name] == nil {
			p.entered[rs.Name] = map[cairnv1.RestorePhase]time.Time{}
		}
		if _, ok := p.entered[rs.Name][rs.Status.Phase]; !ok {
			p.entered[rs.Name][rs.Status.Phase] = at
		}
		p.now[rs.Name] = rs.Status.Phase
	}
	p.stop = runInformer(b, cfg, cache.Options{Scheme: testenv.Scheme(), DefaultNamespaces: map[string]cache.Config{operatorNamespace: {}}},
		&cairnv1.Restore{}, toolscache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, cur any) { seen(cur) }})
	return p
}

// waitFor returns when the restore entered phase, waiting for it at most limit.
func (p *restorePhaseTimes) waitFor(b *testing.B, name string, phase cairnv1.RestorePhase, limit time.Duration) time.Time {
	b.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		at, ok := p.entered[name][phase]
		p.mu.Unlock()
		if ok {
			return at
		}
	}
	b.Fatalf("restore %s did not reach %s within %s (it is %s)", name, phase, limit, p.current(name))
	return time.Time{}
}

func (p *restorePhaseTimes) current(name string) cairnv1.RestorePhase {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now[name]
}

// runInformer runs an informer for obj with handler until the returned function is called. An
// informer re-lists and re-watches by itself: a busy machine may close a plain watch.
func runInformer(b *testing.B, cfg *rest.Config, opts cache.Options, obj client.Object, handler toolscache.ResourceEventHandler) (stop func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := cache.New(cfg, opts)
	if err != nil {
		b.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := inf.AddEventHandler(handler); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Start(ctx)
	}()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("the bench's cache did not sync")
	}
	return func() {
		cancel()
		<-done
	}
}
