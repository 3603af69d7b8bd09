// Package bench measures Cairn against a real kube-apiserver (the envtest binaries), with the
// reconcilers running in-process. Run with `make bench`; results go to docs/benchmarks.md.
package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	queuecontroller "github.com/cairn-backup/cairn/internal/controller/queue"
	"github.com/cairn-backup/cairn/internal/queue"
	"github.com/cairn-backup/cairn/internal/testenv"
)

const operatorNamespace = "cairn-system"

// cluster is a control plane with Cairn's manager running with the given concurrency.
type cluster struct {
	c    client.Client
	cfg  *rest.Config
	mgr  ctrl.Manager
	stop func()
	// requests counts the manager's requests to the API server.
	requests *requestCounter
}

func startCluster(b *testing.B, concurrency int) *cluster {
	b.Helper()
	// The queue alone: the benchmarks play the backup runner.
	return startClusterWith(b, controller.Config{Namespace: operatorNamespace, ConcurrentBackups: concurrency,
		ItemBlockWorkerCount: 1, Controllers: []string{"queue"}})
}

// startClusterWith starts a control plane with a default filesystem location and the manager's
// reconcilers configured by cfg, in this process.
func startClusterWith(b *testing.B, mcfg controller.Config) *cluster {
	b.Helper()
	log.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	env, err := testenv.New()
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		b.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}); err != nil {
		b.Fatal(err)
	}
	loc := &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: operatorNamespace},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true,
			Config: map[string]string{"path": b.TempDir()}},
	}
	if err := c.Create(ctx, loc); err != nil {
		b.Fatal(err)
	}
	requests := &requestCounter{}
	managerCfg := rest.CopyConfig(cfg)
	managerCfg.Wrap(requests.wrap)
	mgr, err := ctrl.NewManager(managerCfg, ctrl.Options{
		Scheme: testenv.Scheme(), Cache: controller.CacheOptions(operatorNamespace),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := controller.SetupWithManager(mgr, mcfg); err != nil {
		b.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mctx); err != nil {
			b.Error(err)
		}
	}()
	return &cluster{c: c, cfg: cfg, mgr: mgr, requests: requests, stop: func() {
		cancel()
		<-done
		_ = env.Stop()
	}}
}

// watchBackups delivers every backup update (old and new object, and when it arrived) to fn
// until stop is called. It runs an informer, which re-lists and re-watches by itself: a busy
// machine may close a plain watch, and the runner must not lose a hand-off.
func watchBackups(b *testing.B, cfg *rest.Config, fn func(old, cur *cairnv1.Backup, at time.Time)) (stop func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := cache.New(cfg, cache.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &cairnv1.Backup{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*cairnv1.Backup)
			cur, ok2 := newObj.(*cairnv1.Backup)
			if ok1 && ok2 && old.ResourceVersion != cur.ResourceVersion {
				fn(old, cur, time.Now())
			}
		},
	}); err != nil {
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

// backupStatusPatches is how many PATCH requests to backups/status the API server has served,
// read from its own metrics.
func backupStatusPatches(b *testing.B, cfg *rest.Config) float64 {
	b.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="backups"`) ||
			!strings.Contains(line, `subresource="status"`) || !strings.Contains(line, `verb="PATCH"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			b.Fatal(err)
		}
		total += v
	}
	return total
}

func setPhase(ctx context.Context, c client.Client, name string, phase cairnv1.BackupPhase) error {
	for {
		var bk cairnv1.Backup
		if err := c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: name}, &bk); err != nil {
			return err
		}
		patch := client.MergeFromWithOptions(bk.DeepCopy(), client.MergeFromWithOptimisticLock{})
		bk.Status.Phase = phase
		err := c.Status().Patch(ctx, &bk, patch)
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
}

// BenchmarkQueueDrain500 creates 500 backups at once (one namespace each) with
// --concurrent-backups=4; a fake runner completes each as soon as it is ReadyToStart. It
// reports the drain time and the status writes the queue made per backup.
func BenchmarkQueueDrain500(b *testing.B) {
	const n, concurrency = 500, 4
	cl := startCluster(b, concurrency)
	defer cl.stop()
	ctx := context.Background()

	var completed atomic.Int64
	allDone := make(chan struct{})
	runnerWrites := atomic.Int64{}
	var runner sync.WaitGroup
	stopWatch := watchBackups(b, cl.cfg, func(old, bk *cairnv1.Backup, _ time.Time) {
		if old.Status.Phase == bk.Status.Phase {
			return
		}
		switch bk.Status.Phase {
		case cairnv1.BackupPhaseReadyToStart:
			runner.Add(1)
			go func(name string) {
				defer runner.Done()
				if err := setPhase(ctx, cl.c, name, cairnv1.BackupPhaseCompleted); err != nil {
					b.Error(err)
				}
				runnerWrites.Add(1)
			}(bk.Name)
		case cairnv1.BackupPhaseCompleted:
			if completed.Add(1) == n {
				close(allDone)
			}
		}
	})

	patchesBefore := backupStatusPatches(b, cl.cfg)
	start := time.Now()
	var creators sync.WaitGroup
	names := make(chan int, n)
	for i := range n {
		names <- i
	}
	close(names)
	for range 16 {
		creators.Add(1)
		go func() {
			defer creators.Done()
			for i := range names {
				bk := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("drain-%03d", i), Namespace: operatorNamespace},
					Spec: cairnv1.BackupSpec{IncludedNamespaces: []string{fmt.Sprintf("ns-%03d", i)}}}
				if err := cl.c.Create(ctx, bk); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	creators.Wait()
	created := time.Since(start)
	select {
	case <-allDone:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d backups completed", completed.Load(), n)
	}
	drain := time.Since(start)
	runner.Wait()
	// Let the queue settle (renumbering of a queue that is now empty writes nothing).
	time.Sleep(time.Second)
	stopWatch()

	queueWrites := backupStatusPatches(b, cl.cfg) - patchesBefore - float64(runnerWrites.Load())
	b.ReportMetric(drain.Seconds(), "drain-s")
	b.ReportMetric(created.Seconds(), "create-s")
	b.ReportMetric(queueWrites/n, "queue-writes/backup")
	b.ReportMetric(queueWrites, "queue-writes")
}

// BenchmarkQueueHandoff measures, with --concurrent-backups=1, the time from a running backup
// leaving InProgress to the next queued backup becoming ReadyToStart, over 50 hand-offs.
func BenchmarkQueueHandoff(b *testing.B) {
	const handoffs = 50
	cl := startCluster(b, 1)
	defer cl.stop()
	ctx := context.Background()

	var mu sync.Mutex
	var lastLeft time.Time
	var samples []time.Duration
	finished := make(chan struct{})
	// The first backup is held until every backup is queued, so that the hand-offs measured
	// are those of a settled queue, not of one still taking in new backups.
	release := make(chan struct{})
	released := sync.OnceFunc(func() { close(release) })
	runCtx, stopRunner := context.WithCancel(ctx)
	var runner sync.WaitGroup
	defer func() {
		released() // a failed benchmark must not leave the runner waiting
		stopRunner()
		runner.Wait()
	}()
	stopWatch := watchBackups(b, cl.cfg, func(old, bk *cairnv1.Backup, at time.Time) {
		if old.Status.Phase == bk.Status.Phase {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch bk.Status.Phase {
		case cairnv1.BackupPhaseReadyToStart:
			if !lastLeft.IsZero() {
				samples = append(samples, at.Sub(lastLeft))
				if len(samples) == handoffs {
					close(finished)
				}
			}
			if len(samples) >= handoffs {
				return
			}
			runner.Add(1)
			go func(name string) {
				defer runner.Done()
				if err := setPhase(runCtx, cl.c, name, cairnv1.BackupPhaseInProgress); err != nil {
					b.Error(err)
					return
				}
				<-release
				time.Sleep(20 * time.Millisecond) // the "backup" runs
				if err := setPhase(runCtx, cl.c, name, cairnv1.BackupPhaseCompleted); err != nil {
					b.Error(err)
				}
			}(bk.Name)
		case cairnv1.BackupPhaseCompleted:
			lastLeft = at
		}
	})
	defer stopWatch()

	for i := range handoffs + 1 {
		bk := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("handoff-%03d", i), Namespace: operatorNamespace},
			Spec: cairnv1.BackupSpec{IncludedNamespaces: []string{fmt.Sprintf("ns-%03d", i)}}}
		if err := cl.c.Create(ctx, bk); err != nil {
			b.Fatal(err)
		}
	}
	waitQueued(b, cl.c, handoffs, time.Minute)
	released()
	select {
	case <-finished:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d hand-offs in 5 minutes", len(samples))
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "handoff-median-ms")
	b.ReportMetric(float64(samples[len(samples)-1].Microseconds())/1000, "handoff-max-ms")
}

// waitQueued waits until n backups are Queued at positions 1..n.
func waitQueued(b *testing.B, c client.Client, n int, limit time.Duration) {
	b.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var list cairnv1.BackupList
		if err := c.List(context.Background(), &list, client.InNamespace(operatorNamespace)); err != nil {
			b.Fatal(err)
		}
		seen := map[int32]bool{}
		for _, bk := range list.Items {
			if bk.Status.Phase == cairnv1.BackupPhaseQueued && bk.Status.QueuePosition >= 1 && int(bk.Status.QueuePosition) <= n {
				seen[bk.Status.QueuePosition] = true
			}
		}
		if len(seen) == n {
			return
		}
		if n > 100 {
			time.Sleep(500 * time.Millisecond) // a LIST of a thousand backups is not free
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	b.Fatalf("the %d backups were not queued at 1..%d within %s", n, n, limit)
}

// The queue at scale: 1,000 queued backups (and one running) over 2,000 namespaces, 200 teams
// of 10 environments each. The backups mix wildcards, exclusions and named namespaces, and
// overlap a lot, as teams' backups do.
const (
	scaleQueued = 1000
	scaleTeams  = 200
)

var scaleEnvironments = []string{"dev", "test", "qa", "stage", "prod", "perf", "demo", "canary", "dr", "ops"}

func scaleNamespaces() []string {
	out := make([]string, 0, scaleTeams*len(scaleEnvironments))
	for t := range scaleTeams {
		for _, e := range scaleEnvironments {
			out = append(out, fmt.Sprintf("team-%03d-%s", t, e))
		}
	}
	return out
}

// scaleBackupSpec is the spec of the i-th backup. A quarter each select: a team's namespaces by
// wildcard but its dev one; three named namespaces of two teams; the prod namespaces of ten
// teams by wildcard; one named namespace.
func scaleBackupSpec(i int) cairnv1.BackupSpec {
	t, u := i%scaleTeams, (i*7+3)%scaleTeams
	switch i % 4 {
	case 0:
		return cairnv1.BackupSpec{IncludedNamespaces: []string{fmt.Sprintf("team-%03d-*", t)}, ExcludedNamespaces: []string{"*-dev"}}
	case 1:
		return cairnv1.BackupSpec{IncludedNamespaces: []string{
			fmt.Sprintf("team-%03d-prod", t), fmt.Sprintf("team-%03d-stage", t), fmt.Sprintf("team-%03d-prod", u)}}
	case 2:
		return cairnv1.BackupSpec{IncludedNamespaces: []string{fmt.Sprintf("team-%02d?-prod", t/10)}}
	default:
		return cairnv1.BackupSpec{IncludedNamespaces: []string{fmt.Sprintf("team-%03d-test", t)}}
	}
}

func scaleBackupName(i int) string { return fmt.Sprintf("scale-%04d", i) }

// inParallel runs fn for 0..n-1 on 16 goroutines.
func inParallel(n int, fn func(i int)) {
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// openGate lets a reconciler made by the benchmark run at once (the manager's startup
// recovery has long finished).
type openGate struct{}

func (openGate) Wait(context.Context) error { return nil }

// BenchmarkQueuePass1000x2000 measures passes of the queue reconciler over 1,000 queued backups
// (and one running) and 2,000 namespaces, once the queue is at rest: a pass reads everything
// from the informer cache, decides that every backup stays where it is, and writes nothing.
// The manager's queue settles the queue; the passes measured are those of a second queue
// reconciler on the manager's cache, called directly: its first pass, then 20 more.
func BenchmarkQueuePass1000x2000(b *testing.B) {
	cl := startClusterWith(b, controller.Config{Namespace: operatorNamespace, ConcurrentBackups: 1, ItemBlockWorkerCount: 1,
		Controllers: []string{"queue"}, QueueResyncPeriod: time.Hour})
	defer cl.stop()
	ctx := context.Background()

	namespaces := scaleNamespaces()
	inParallel(len(namespaces), func(i int) {
		if err := cl.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaces[i]}}); err != nil {
			b.Error(err)
		}
	})
	// The first backup is made alone, so it is the one that runs (and never ends).
	mustCreate(b, cl.c, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: scaleBackupName(0), Namespace: operatorNamespace},
		Spec: scaleBackupSpec(0)})
	inParallel(scaleQueued, func(i int) {
		bk := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: scaleBackupName(i + 1), Namespace: operatorNamespace},
			Spec: scaleBackupSpec(i + 1)}
		if err := cl.c.Create(ctx, bk); err != nil {
			b.Error(err)
		}
	})
	waitQueued(b, cl.c, scaleQueued, 15*time.Minute)
	waitStatusWritesStop(b, cl.cfg, 2*time.Second, 5*time.Minute)

	r := &queuecontroller.Reconciler{Client: cl.mgr.GetClient(), Namespace: operatorNamespace, ConcurrentBackups: 1,
		ResyncPeriod: time.Hour, Clock: clock.RealClock{}, Recorder: cl.mgr.GetEventRecorder("bench-queue"), Gate: openGate{}}
	patchesBefore := backupStatusPatches(b, cl.cfg)
	var passes []time.Duration
	for range b.N * 21 {
		start := time.Now()
		if _, err := r.Reconcile(ctx, reconcile.Request{}); err != nil {
			b.Fatal(err)
		}
		passes = append(passes, time.Since(start))
	}
	b.ReportMetric(float64(passes[0].Microseconds())/1000, "first-pass-ms")
	b.ReportMetric(float64(median(passes[1:]).Microseconds())/1000, "pass-median-ms")
	b.ReportMetric(float64(slicesMax(passes[1:]).Microseconds())/1000, "pass-max-ms")
	b.ReportMetric(backupStatusPatches(b, cl.cfg)-patchesBefore, "pass-writes")
}

// waitStatusWritesStop waits until the API server has served no backup status write for quiet.
func waitStatusWritesStop(b *testing.B, cfg *rest.Config, quiet, limit time.Duration) {
	b.Helper()
	deadline := time.Now().Add(limit)
	last, since := backupStatusPatches(b, cfg), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(quiet / 4)
		if n := backupStatusPatches(b, cfg); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= quiet {
			return
		}
	}
	b.Fatalf("backup status writes did not stop within %s", limit)
}

// BenchmarkQueueDecide1000x2000 measures the queue's decisions alone (packages queue and
// scope, no API server) for the same queue, as a pass makes them: order the backups, resolve
// their namespaces, decide which start. The first pass resolves every backup (as after a start
// or a change of the cluster's namespaces); the 20 after it find them in the queue's cache.
func BenchmarkQueueDecide1000x2000(b *testing.B) {
	// A pass gets the namespace names in the informer's order: any order.
	namespaces := scaleNamespaces()
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(namespaces), func(i, j int) { namespaces[i], namespaces[j] = namespaces[j], namespaces[i] })
	backups := make([]*cairnv1.Backup, scaleQueued+1)
	for i := range backups {
		backups[i] = &cairnv1.Backup{
			ObjectMeta: metav1.ObjectMeta{Name: scaleBackupName(i), Namespace: operatorNamespace,
				UID: types.UID(fmt.Sprintf("uid-%04d", i)), Generation: 1, ResourceVersion: strconv.Itoa(100 + i)},
			Spec:   scaleBackupSpec(i),
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseQueued, QueuePosition: int32(i)},
		}
	}
	backups[0].Status = cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseReadyToStart}
	for range b.N {
		resolutions := queue.NewResolutions(operatorNamespace)
		entry := func(bk *cairnv1.Backup) queue.Entry {
			return queue.Entry{Namespace: bk.Namespace, Name: bk.Name, Location: "default", Namespaces: resolutions.Resolve(bk)}
		}
		var passes []time.Duration
		for range 21 {
			start := time.Now()
			resolutions.Begin(slices.Clone(namespaces))
			waiting := append([]*cairnv1.Backup(nil), backups[1:]...)
			queue.Order(waiting)
			running := []queue.Entry{entry(backups[0])}
			queued := make([]queue.Entry, 0, len(waiting))
			for _, bk := range waiting {
				queued = append(queued, entry(bk))
			}
			if ds := queue.Decide(queue.Limits{Backups: 1, Restores: 1}, running, queued, nil); ds[0].Start {
				b.Fatal("a backup overlapping the running one started")
			}
			resolutions.End()
			passes = append(passes, time.Since(start))
		}
		b.ReportMetric(float64(passes[0].Microseconds())/1000, "first-pass-ms")
		b.ReportMetric(float64(median(passes[1:]).Microseconds())/1000, "pass-median-ms")
		b.ReportMetric(float64(slicesMax(passes[1:]).Microseconds())/1000, "pass-max-ms")
	}
}

// requestCounter counts the requests that go through a rest.Config's transport, by method
// and by what they address ("POST events", "PATCH backups/status"), from its last reset.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (rc *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		rc.mu.Lock()
		if rc.counts == nil {
			rc.counts = map[string]int{}
		}
		rc.counts[req.Method+" "+apiResource(req.URL.Path)]++
		rc.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

// reset forgets what was counted.
func (rc *requestCounter) reset() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.counts = map[string]int{}
}

// writes is how many requests other than GET went out, and their counts by kind.
func (rc *requestCounter) writes() (int, map[string]int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	total, kinds := 0, map[string]int{}
	for k, n := range rc.counts {
		if !strings.HasPrefix(k, http.MethodGet+" ") {
			total += n
			kinds[k] = n
		}
	}
	return total, kinds
}

// apiResource is the resource (and subresource) a request path addresses:
// /apis/cairn.dev/v1alpha1/namespaces/ns/backups/b/status → backups/status.
func apiResource(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) > 0 && parts[0] == "api":
		parts = parts[min(2, len(parts)):]
	case len(parts) > 0 && parts[0] == "apis":
		parts = parts[min(3, len(parts)):]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "namespaces"
	case 1, 2:
		return parts[0]
	}
	return parts[0] + "/" + parts[2]
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
