package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// floorClients is how many goroutines the floor creates the objects with.
const floorClients = 16

// BenchmarkRestore10kConfigMaps restores 10,000 ConfigMaps of 1 KiB in 10 namespaces with the
// real manager binary at its default --restore-worker-count (8), in turns with the floor.
func BenchmarkRestore10kConfigMaps(b *testing.B) { benchRestore(b) }

// BenchmarkRestore10kConfigMapsWorkers16 is the same with --restore-worker-count=16.
func BenchmarkRestore10kConfigMapsWorkers16(b *testing.B) {
	benchRestore(b, "--restore-worker-count", "16")
}

// BenchmarkRestore10kConfigMapsWorkers1 is the same with --restore-worker-count=1: one item at a
// time, as a restore without a worker pool goes.
func BenchmarkRestore10kConfigMapsWorkers1(b *testing.B) {
	benchRestore(b, "--restore-worker-count", "1")
}

// restoreRounds is how many times the floor and the restore are each measured, in turns
// (CAIRN_BENCH_RESTORE_ROUNDS, 3 by default).
func restoreRounds(b *testing.B) int {
	b.Helper()
	s := os.Getenv("CAIRN_BENCH_RESTORE_ROUNDS")
	if s == "" {
		return 3
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("CAIRN_BENCH_RESTORE_ROUNDS=%q: want a whole number, at least 1", s)
	}
	return n
}

// benchRestore backs up 10,000 ConfigMaps of 1 KiB in 10 namespaces, then measures in turns,
// restoreRounds times: the floor (the ConfigMaps deleted, then the same objects created by
// floorClients goroutines) and a Restore of them (deleted again, then a Restore timed from its
// creation to Completed). A busy moment of a shared machine then falls on both alike; the
// ratio reported is the median of the rounds' ratios. ns/op is the restores' time.
//
// The ConfigMaps are deleted, not their namespaces: the envtest control plane has no
// namespace controller, so a deleted namespace would stay Terminating. The restore and the
// floor then do the same work, creating the same objects into the same namespaces. The
// restore is limited to configmaps so that it restores exactly those objects (the Namespace
// objects in the backup still exist and would only be compared).
func benchRestore(b *testing.B, managerArgs ...string) {
	const n = 10000
	pprof, pprofAddr := pprofArgs(b)
	cl := startBackupCluster(b, 1, append(managerArgs, pprof...)...)
	defer cl.stop()
	namespaces := benchNamespaces()
	fillConfigMaps(b, cl.c, namespaces, n)
	backedUp := countConfigMaps(b, cl.c, namespaces)
	timeBackup(b, cl.c, "source", namespaces)
	fc := unthrottledClient(b, cl.cfg)
	b.StopTimer()
	b.ResetTimer()

	var floors, restores, ratios, toInProgress, inProgress, finalizing []float64
	var rss, rssBefore, anonBefore, fileAfter float64
	for round := range restoreRounds(b) {
		name := fmt.Sprintf("restore-%d", round)
		// The floor: the same objects (with the labels the restore puts on them) into the same
		// namespaces, by a client configured as the manager's: no client-side rate limit.
		deleteConfigMaps(b, cl.c, namespaces)
		start := time.Now()
		createConfigMaps(b, fc, namespaces, n, 1024, floorClients, map[string]string{
			cairnv1.BackupNameLabel: "source", cairnv1.RestoreNameLabel: name,
		})
		floor := time.Since(start).Seconds()
		if got := countConfigMaps(b, cl.c, namespaces); got != n {
			b.Fatalf("the floor left %d ConfigMaps, want %d", got, n)
		}
		deleteConfigMaps(b, cl.c, namespaces)

		// The peak of the restore alone, not of the backup or the restores before it; what the
		// manager held when it started is the floor of that peak.
		cl.manager.resetRSSPeak(b)
		rssBefore = max(rssBefore, cl.manager.rssMiB(b, "VmRSS:"))
		anonBefore = max(anonBefore, cl.manager.rssMiB(b, "RssAnon:"))
		requestsBefore := apiRequests(b, cl.cfg)
		var profile *managerProfile
		if round == 0 {
			profile = startCPUProfile(b, pprofAddr, "restore")
		}
		b.StartTimer()
		run := timeRestore(b, cl.cfg, cl.c, &cairnv1.Restore{
			ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name},
			Spec:       cairnv1.RestoreSpec{BackupName: "source", IncludedResources: []string{"configmaps"}},
		})
		b.StopTimer()
		requests, perVerb := requestsSince(requestsBefore, apiRequests(b, cl.cfg))
		rss = max(rss, cl.manager.rssPeakMiB(b))
		fileAfter = max(fileAfter, cl.manager.rssMiB(b, "RssFile:"))
		profile.wait(b)
		if round == 0 {
			writeHeapProfile(b, pprofAddr, "restore")
			reportRequests(b, requests, perVerb)
		}
		checkRestored(b, cl.c, namespaces, run.restore, backedUp)

		wall := run.entered[cairnv1.RestorePhaseCompleted].Seconds()
		floors, restores, ratios = append(floors, floor), append(restores, wall), append(ratios, wall/floor)
		toInProgress = append(toInProgress, run.since("", cairnv1.RestorePhaseInProgress)*1000)
		inProgress = append(inProgress, run.since(cairnv1.RestorePhaseInProgress, cairnv1.RestorePhaseFinalizing))
		finalizing = append(finalizing, run.since(cairnv1.RestorePhaseFinalizing, cairnv1.RestorePhaseCompleted)*1000)
		b.Logf("round %d: floor %.2f s, restore %.2f s, ratio %.3f, load average %s", round, floor, wall, wall/floor, loadAverage())
	}

	b.ReportMetric(medianOf(restores), "restore-s")
	b.ReportMetric(medianOf(floors), "floor-s")
	b.ReportMetric(medianOf(ratios), "x-floor")
	b.ReportMetric(slices.Max(ratios), "x-floor-max")
	b.ReportMetric(float64(n)/medianOf(restores), "items/s")
	b.ReportMetric(rss, "peak-rss-MiB")
	b.ReportMetric(rssBefore, "rss-before-MiB")
	b.ReportMetric(anonBefore, "rss-anon-before-MiB")
	b.ReportMetric(fileAfter, "rss-file-MiB")
	b.ReportMetric(float64(len(ratios)), "rounds")
	// Where the time went: the queue and the start (creation → InProgress), the run (reading the
	// archive, creating the items, storing the files: InProgress → Finalizing), the finalizer
	// (Finalizing → Completed).
	b.ReportMetric(medianOf(toInProgress), "to-inprogress-ms")
	b.ReportMetric(medianOf(inProgress), "inprogress-s")
	b.ReportMetric(medianOf(finalizing), "finalizing-ms")
	b.ReportMetric(load1(), "load-avg")
}

// checkRestored fails the benchmark unless the restore handled every item and every
// ConfigMap carries its label, with no warning.
func checkRestored(b *testing.B, c client.Client, namespaces []string, rs *cairnv1.Restore, backedUp int) {
	b.Helper()
	if p := rs.Status.Progress; p == nil || p.ItemsRestored != int64(backedUp) || p.TotalItems != int64(backedUp) {
		b.Fatalf("the restore's progress is %+v, want %d/%d", p, backedUp, backedUp)
	}
	if rs.Status.Warnings != 0 || rs.Status.Errors != 0 {
		b.Fatalf("restore %s had %d warnings and %d errors", rs.Name, rs.Status.Warnings, rs.Status.Errors)
	}
	restored := countConfigMaps(b, c, namespaces, client.MatchingLabels{cairnv1.RestoreNameLabel: rs.Name})
	if restored != backedUp {
		b.Fatalf("%d ConfigMaps carry the restore's label, want %d", restored, backedUp)
	}
}

// reportRequests reports what the API server served during a restore: its creates of
// ConfigMaps, and everything else (the restore's own reads and status writes, the manager's
// other reconcilers, this benchmark's watch and counts); the whole list goes to the log.
func reportRequests(b *testing.B, requests map[string]float64, perVerb string) {
	b.Helper()
	other := 0.0
	for key, v := range requests {
		if key != "POST configmaps" {
			other += v
		}
	}
	b.ReportMetric(requests["POST configmaps"], "api-configmap-creates")
	b.ReportMetric(other, "api-other-requests")
	b.Logf("API requests during the restore: %s", perVerb)
}

// medianOf is the median of xs (the upper one of an even count).
func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// loadAverage is the machine's load averages (1, 5 and 15 minutes), as /proc/loadavg says.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

// load1 is the machine's 1-minute load average (0 when unknown).
func load1() float64 {
	v, _ := strconv.ParseFloat(strings.Fields(loadAverage() + " ")[0], 64)
	return v
}

// resetRSSPeak sets the process's peak resident set (VmHWM) back to its current resident set,
// so that the next rssPeakMiB is the peak of what runs from now on.
func (p *process) resetRSSPeak(b *testing.B) {
	b.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid), []byte("5"), 0); err != nil {
		b.Fatal(err)
	}
}

// rssMiB is the process's resident set now, in MiB: field "VmRSS:" (all of it), "RssAnon:" (its
// heap, stacks and other anonymous memory) or "RssFile:" (its binary's pages).
func (p *process) rssMiB(b *testing.B, field string) float64 {
	b.Helper()
	mib, err := statusMiB(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid), field)
	if err != nil {
		b.Fatal(err)
	}
	return mib
}

// unthrottledClient is a client for cfg with client-side rate limiting off, as the manager's
// (cmd/manager restConfig sets QPS -1): a limit of 1,000 requests a second would itself bound
// the floor.
func unthrottledClient(b *testing.B, cfg *rest.Config) client.Client {
	b.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// countConfigMaps counts the ConfigMaps in the namespaces that match opts, 1,000 a page.
func countConfigMaps(b *testing.B, c client.Client, namespaces []string, opts ...client.ListOption) int {
	b.Helper()
	total := 0
	for _, ns := range namespaces {
		cont := ""
		for {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
			listOpts := append([]client.ListOption{client.InNamespace(ns), client.Limit(1000), client.Continue(cont)}, opts...)
			if err := c.List(context.Background(), list, listOpts...); err != nil {
				b.Fatal(err)
			}
			total += len(list.Items)
			if cont = list.GetContinue(); cont == "" {
				break
			}
		}
	}
	return total
}

// deleteConfigMaps deletes every ConfigMap in the namespaces and waits until they are gone.
func deleteConfigMaps(b *testing.B, c client.Client, namespaces []string) {
	b.Helper()
	for _, ns := range namespaces {
		if err := c.DeleteAllOf(context.Background(), &corev1.ConfigMap{}, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); countConfigMaps(b, c, namespaces) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the ConfigMaps were not gone 2 minutes after they were deleted")
		}
	}
}

// restoreRun is how a restore went: when it first entered each phase, counted from its
// creation, and the restore as it ended.
type restoreRun struct {
	entered map[cairnv1.RestorePhase]time.Duration
	restore *cairnv1.Restore
}

// timeRestore creates the restore and follows it through a watch (an informer, so a busy
// machine closing the watch loses nothing) until it ends. Any end but Completed fails the
// benchmark.
func timeRestore(b *testing.B, cfg *rest.Config, c client.Client, rs *cairnv1.Restore) restoreRun {
	b.Helper()
	log.SetLogger(zap.New(zap.WriteTo(io.Discard))) // the watch's informer logs through it
	var mu sync.Mutex
	var start time.Time
	run := restoreRun{entered: map[cairnv1.RestorePhase]time.Duration{}}
	ended := make(chan struct{})
	seen := func(obj any) {
		cur, ok := obj.(*cairnv1.Restore)
		if !ok || cur.Name != rs.Name {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := run.entered[cur.Status.Phase]; ok || run.restore != nil {
			return
		}
		run.entered[cur.Status.Phase] = time.Since(start)
		if cur.Status.Phase.IsTerminal() {
			run.restore = cur.DeepCopy()
			close(ended)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	watch, err := cache.New(cfg, cache.Options{Scheme: testenv.Scheme(), DefaultNamespaces: map[string]cache.Config{rs.Namespace: {}}})
	if err != nil {
		b.Fatal(err)
	}
	inf, err := watch.GetInformer(ctx, &cairnv1.Restore{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, cur any) { seen(cur) },
	}); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = watch.Start(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	if !watch.WaitForCacheSync(ctx) {
		b.Fatal("the bench's cache did not sync")
	}

	mu.Lock()
	start = time.Now()
	mu.Unlock()
	mustCreate(b, c, rs)
	select {
	case <-ended:
	case <-time.After(10 * time.Minute):
		b.Fatalf("restore %s did not end in 10 minutes", rs.Name)
	}
	mu.Lock()
	defer mu.Unlock()
	if st := run.restore.Status; st.Phase != cairnv1.RestorePhaseCompleted {
		b.Fatalf("restore %s ended %s: %s %v (%d errors)", rs.Name, st.Phase, st.FailureReason, st.ValidationErrors, st.Errors)
	}
	return run
}

// since is how long after entering phase from (or, for "", after its creation) the restore
// entered phase to, in seconds; 0 when it was not seen in either (watch events can coalesce a
// short phase away).
func (r restoreRun) since(from, to cairnv1.RestorePhase) float64 {
	f, ok1 := r.entered[from]
	if from == "" {
		f, ok1 = 0, true
	}
	t, ok2 := r.entered[to]
	if !ok1 || !ok2 {
		return 0
	}
	return (t - f).Seconds()
}
