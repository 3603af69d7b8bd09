package restore_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	discoveryfake "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

// cancelProbe is what TestRunStopsItsPoolOnCancel watches: the actions' calls and the creates
// the run attempts, and whether the run was cancelled yet when each happened.
type cancelProbe struct {
	mu sync.Mutex
	// open is how many items the action lets through before it holds every item it sees
	// until the run's context ends.
	open      int
	executed  int
	held      int
	cancelled bool
	// After the cancel: the items the action was called for, and the creates attempted.
	executedAfter, createsAfter int
	createsBefore               int
	started, cancelledOps       []string
}

func (p *cancelProbe) heldItems() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func (p *cancelProbe) markCancelled() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cancelled = true
}

// counts returns the creates attempted before and after the cancel, and the items the action
// was called for after it.
func (p *cancelProbe) counts() (createsBefore, createsAfter, executedAfter int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.createsBefore, p.createsAfter, p.executedAfter
}

// holdingAction starts an async operation for every fifth ConfigMap, and holds every item past
// the probe's open ones until the run's context ends (a slow action): the run is still going
// when the test cancels it.
type holdingAction struct{ probe *cancelProbe }

func (holdingAction) Name() string { return "test/holding" }
func (holdingAction) AppliesTo() []schema.GroupResource {
	return []schema.GroupResource{{Resource: "configmaps"}}
}

func (a holdingAction) Execute(ctx context.Context, in restore.ActionInput) (restore.ActionOutput, error) {
	p := a.probe
	p.mu.Lock()
	if p.cancelled {
		p.executedAfter++
	}
	p.executed++
	hold := p.executed > p.open
	if hold {
		p.held++
	}
	p.mu.Unlock()
	if hold {
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Second): // the test fails on its own; never hang it
		}
	}
	out := restore.ActionOutput{Item: in.Item}
	var n int
	if _, err := fmt.Sscanf(in.Item.GetName(), "cm-%d", &n); err == nil && n%5 == 0 {
		out.OperationID = "op-" + in.Item.GetName()
		p.mu.Lock()
		p.started = append(p.started, out.OperationID)
		p.mu.Unlock()
	}
	return out, nil
}

func (holdingAction) Progress(context.Context, string, *cairnv1.Restore) (backup.OperationProgress, error) {
	return backup.OperationProgress{}, nil
}

func (a holdingAction) Cancel(_ context.Context, id string, _ *cairnv1.Restore) error {
	a.probe.mu.Lock()
	defer a.probe.mu.Unlock()
	a.probe.cancelledOps = append(a.probe.cancelledOps, id)
	return nil
}

// probedDynamic counts the creates a run attempts, and refuses those made on a context that
// has ended, as a real client does (the fake client ignores its context).
type probedDynamic struct {
	dynamic.Interface
	probe *cancelProbe
}

func (d probedDynamic) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return probedResource{NamespaceableResourceInterface: d.Interface.Resource(gvr), probe: d.probe}
}

type probedResource struct {
	dynamic.NamespaceableResourceInterface
	probe *cancelProbe
}

func (r probedResource) Namespace(ns string) dynamic.ResourceInterface {
	return probedNamespaced{ResourceInterface: r.NamespaceableResourceInterface.Namespace(ns), probe: r.probe}
}

type probedNamespaced struct {
	dynamic.ResourceInterface
	probe *cancelProbe
}

func (r probedNamespaced) Create(ctx context.Context, obj *unstructured.Unstructured, opts metav1.CreateOptions, sub ...string) (*unstructured.Unstructured, error) {
	r.probe.mu.Lock()
	if r.probe.cancelled {
		r.probe.createsAfter++
	} else {
		r.probe.createsBefore++
	}
	r.probe.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return r.ResourceInterface.Create(ctx, obj, opts, sub...)
}

// TestRunStopsItsPoolOnCancel cancels a run of 200 ConfigMaps whose workers are all busy with
// a slow action, as the restore reconciler does on spec.cancel: the pool takes no item after
// the cancel, nothing is created once the run has returned, the run ends Cancelled with its
// files written (the resource list naming exactly what was created), and every operation its
// action started is cancelled.
// countedPuts counts the objects a store was asked to write.
type countedPuts struct {
	storage.ObjectStore
	puts atomic.Int32
}

func (c *countedPuts) Put(ctx context.Context, key string, r io.Reader) error {
	c.puts.Add(1)
	return c.ObjectStore.Put(ctx, key, r)
}

func TestRunStopsItsPoolOnCancel(t *testing.T) {
	const n, workers, open = 200, 4, 40
	items := []item{{"namespaces", "", "", object("v1", "Namespace", "", "shop", nil)}}
	for i := range n {
		items = append(items, item{"configmaps", "", "shop", object("v1", "ConfigMap", "shop", fmt.Sprintf("cm-%03d", i), map[string]any{"data": map[string]any{"k": "v"}})})
	}
	store, keys := commitBackup(t, items)
	probe := &cancelProbe{open: open}
	cmGVR := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{cmGVR: "ConfigMapList"})
	runner := &restore.Runner{Dynamic: probedDynamic{Interface: dyn, probe: probe}, Discovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}},
		Workers: workers, Actions: restore.NewActions(holdingAction{probe})}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1"},
		Spec: cairnv1.RestoreSpec{BackupName: "b1", Cancel: true}, Status: cairnv1.RestoreStatus{BackupName: "b1"}}
	filesKeys := storage.Layout{}.Restore("cairn-system", "r1")
	files := &countedPuts{ObjectStore: store}

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ended := make(chan *restore.Result, 1)
	go func() {
		ended <- runner.Run(ctx, restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: store, BackupKeys: keys,
			Files: files, FilesKeys: filesKeys})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for probe.heldItems() < workers {
		if time.Now().After(deadline) {
			t.Fatalf("the workers were not all busy after 30 s: %d held", probe.heldItems())
		}
		time.Sleep(5 * time.Millisecond)
	}
	probe.markCancelled()
	cancel(restore.ErrCancelRequested)
	var res *restore.Result
	select {
	case res = <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not return 30 s after it was cancelled")
	}
	_, atReturn, executedAfter := probe.counts()
	time.Sleep(200 * time.Millisecond) // a worker still running would create in this grace
	before, after, _ := probe.counts()

	if res.Ending != restore.Cancelled {
		t.Fatalf("run ended %s (%s), want Cancelled", res.Ending, res.FailureReason)
	}
	if executedAfter != 0 {
		t.Errorf("%d items were taken by the pool after the cancel, want none", executedAfter)
	}
	if after > workers {
		t.Errorf("%d creates were attempted after the cancel, want at most one per worker (%d)", after, workers)
	}
	if after != atReturn {
		t.Errorf("%d creates were attempted after the run returned", after-atReturn)
	}
	if res.ItemsRestored >= res.TotalItems || res.TotalItems != n+1 {
		t.Errorf("progress %d/%d, want the run stopped before the end of %d items", res.ItemsRestored, res.TotalItems, n+1)
	}
	// A cancel never waits on storage: the run returns before it stores anything, and its
	// caller records the cancel before it stores the files (issue 41).
	if puts := files.puts.Load(); puts != 0 {
		t.Fatalf("the cancelled run stored %d files before it returned, want none: the cancel would wait on storage", puts)
	}
	if err := res.StoreFiles(context.Background()); err != nil {
		t.Fatal(err)
	}
	if puts := files.puts.Load(); puts != 4 { // operations, resource list, results, log
		t.Errorf("StoreFiles stored %d files, want 4", puts)
	}
	if err := res.StoreFiles(context.Background()); err != nil || files.puts.Load() != 4 {
		t.Errorf("a second StoreFiles stored again (%d files, error %v), want nothing more", files.puts.Load(), err)
	}

	// The resource list names exactly what exists; what was on its way is listed as skipped.
	list, err := dyn.Resource(cmGVR).Namespace("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var exist []string
	for _, u := range list.Items {
		exist = append(exist, "shop/"+u.GetName())
	}
	var listed restore.ResourceList
	readGzipJSON(t, store, filesKeys.ResourceList, &listed)
	created := append([]string(nil), listed[restore.Created]["configmaps"]...)
	sort.Strings(exist)
	sort.Strings(created)
	if strings.Join(created, ",") != strings.Join(exist, ",") {
		t.Errorf("the resource list has %d ConfigMaps created, %d exist:\nlisted %v\nexist  %v", len(created), len(exist), created, exist)
	}
	if len(exist) < open || len(exist) >= n {
		t.Errorf("%d ConfigMaps exist, want the %d let through before the cancel", len(exist), open)
	}
	if skipped := len(listed[restore.Skipped]["configmaps"]); skipped > workers || len(listed[restore.FailedItem]) > 0 {
		t.Errorf("%d ConfigMaps listed as skipped, want at most one per worker; failed: %v", skipped, listed[restore.FailedItem])
	}
	if before < len(exist) {
		t.Errorf("%d creates attempted before the cancel, %d ConfigMaps exist", before, len(exist))
	}
	var results restore.Results
	readGzipJSON(t, store, filesKeys.Results, &results)
	if skipped := len(listed[restore.Skipped]["configmaps"]); len(results.Warnings.Namespaces["shop"]) != skipped {
		t.Errorf("warnings %v, want one for each of the %d items that were on their way", results.Warnings.Namespaces["shop"], skipped)
	}
	log := readGzip(t, store, filesKeys.Logs)
	if !strings.Contains(log, "Restore cancelled") {
		t.Errorf("the log does not say the restore was cancelled:\n%s", log)
	}

	// Every operation the action started was cancelled: those of created items as the restore
	// was cancelled, those of items left uncreated as such; the restore records the former.
	probe.mu.Lock()
	started, cancelledOps := append([]string(nil), probe.started...), append([]string(nil), probe.cancelledOps...)
	probe.mu.Unlock()
	sort.Strings(started)
	sort.Strings(cancelledOps)
	if len(started) == 0 || strings.Join(started, ",") != strings.Join(cancelledOps, ",") {
		t.Errorf("operations started %v, cancelled %v: want every one cancelled once", started, cancelledOps)
	}
	var recorded []backup.Operation
	readGzipJSON(t, store, filesKeys.ItemOperations, &recorded)
	if len(recorded) != len(res.Operations) || len(recorded) == 0 {
		t.Fatalf("%d operations recorded in storage, %d in the result", len(recorded), len(res.Operations))
	}
	for _, op := range recorded {
		if op.Phase != backup.OperationFailed || op.Error != cairnv1.FailureReasonRestoreCancelled {
			t.Errorf("operation %s recorded %s %q, want Failed %q", op.OperationID, op.Phase, op.Error, cairnv1.FailureReasonRestoreCancelled)
		}
		if !slices.Contains(exist, op.Item.Namespace+"/"+op.Item.Name) {
			t.Errorf("operation %s is recorded for %s, which was not created", op.OperationID, op.Item)
		}
	}
}

func readGzip(t *testing.T, store storage.ObjectStore, key string) string {
	t.Helper()
	rc, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := gunzipAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
