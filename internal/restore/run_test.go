package restore_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	discoveryfake "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

// item is one backed-up object for an archive.
type item struct {
	resource, group, namespace string
	obj                        map[string]any
}

func object(apiVersion, kind, namespace, name string, extra map[string]any) map[string]any {
	meta := map[string]any{"name": name}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
	for k, v := range extra {
		obj[k] = v
	}
	return obj
}

// commitBackup writes a committed backup of items into a filesystem store, in their order.
func commitBackup(t *testing.T, items []item) (storage.ObjectStore, storage.BackupKeys) {
	t.Helper()
	entries := make([]archiveEntry, 0, len(items))
	for _, it := range items {
		name := it.obj["metadata"].(map[string]any)["name"].(string)
		entries = append(entries, archiveEntry{path: archive.ItemPath(it.resource, it.group, it.namespace, name), obj: it.obj})
	}
	return writeBackup(t, "cairn-system", "b1", entries)
}

// recorder records the creates a fake dynamic client sees, and holds the creates of one
// resource until several are in flight at once.
type recorder struct {
	mu       sync.Mutex
	order    []string // resource of each create, in the order they started
	inFlight map[string]int
	maxIn    map[string]int
	// gate: creates of gateResource wait (up to a second) until gateWant are in flight.
	gateResource string
	gateWant     int
	cond         *sync.Cond
}

func newRecorder(gateResource string, gateWant int) *recorder {
	r := &recorder{inFlight: map[string]int{}, maxIn: map[string]int{}, gateResource: gateResource, gateWant: gateWant}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// create records one create of res and, for the gated resource, holds it until enough are
// in flight (or a second passed), once.
func (r *recorder) create(res string) (done func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.order = append(r.order, res)
	r.inFlight[res]++
	r.maxIn[res] = max(r.maxIn[res], r.inFlight[res])
	r.cond.Broadcast()
	if res == r.gateResource {
		deadline := time.Now().Add(time.Second)
		for r.inFlight[res] < r.gateWant && time.Now().Before(deadline) {
			go func() { time.Sleep(10 * time.Millisecond); r.cond.Broadcast() }()
			r.cond.Wait()
		}
		if r.inFlight[res] >= r.gateWant {
			r.gateResource = "" // shown once: the rest go through
		}
	}
	return func() {
		r.mu.Lock()
		r.inFlight[res]--
		r.mu.Unlock()
	}
}

// countingDynamic is a dynamic client whose creates go through a recorder (the fake client
// serializes its reactors, so concurrency is observed around it).
type countingDynamic struct {
	dynamic.Interface
	rec *recorder
}

func (c countingDynamic) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return countingResource{NamespaceableResourceInterface: c.Interface.Resource(gvr), rec: c.rec, res: gvr.Resource}
}

type countingResource struct {
	dynamic.NamespaceableResourceInterface
	rec *recorder
	res string
}

func (c countingResource) Namespace(ns string) dynamic.ResourceInterface {
	return countingNamespaced{ResourceInterface: c.NamespaceableResourceInterface.Namespace(ns), rec: c.rec, res: c.res}
}

func (c countingResource) Create(ctx context.Context, obj *unstructured.Unstructured, opts metav1.CreateOptions, sub ...string) (*unstructured.Unstructured, error) {
	defer c.rec.create(c.res)()
	return c.NamespaceableResourceInterface.Create(ctx, obj, opts, sub...)
}

type countingNamespaced struct {
	dynamic.ResourceInterface
	rec *recorder
	res string
}

func (c countingNamespaced) Create(ctx context.Context, obj *unstructured.Unstructured, opts metav1.CreateOptions, sub ...string) (*unstructured.Unstructured, error) {
	defer c.rec.create(c.res)()
	return c.ResourceInterface.Create(ctx, obj, opts, sub...)
}

func TestRunRestoresGroupsInOrderEachInParallel(t *testing.T) {
	var items []item
	items = append(items, item{"namespaces", "", "", object("v1", "Namespace", "", "shop", nil)})
	for i := range 12 {
		items = append(items, item{"configmaps", "", "shop", object("v1", "ConfigMap", "shop", fmt.Sprintf("cm-%02d", i), map[string]any{"data": map[string]any{"k": "v"}})})
	}
	items = append(items,
		item{"secrets", "", "shop", object("v1", "Secret", "shop", "s", nil)},
		item{"deployments", "apps", "shop", object("apps/v1", "Deployment", "shop", "web", nil)},
		item{"widgets", "example.com", "shop", object("example.com/v1", "Widget", "shop", "w", nil)},
		item{"customresourcedefinitions", "apiextensions.k8s.io", "", object("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets.example.com",
			map[string]any{"spec": map[string]any{"group": "example.com", "names": map[string]any{"plural": "widgets"}},
				"status": map[string]any{"conditions": []any{map[string]any{"type": "Established", "status": "True"}}}})},
		item{"events", "", "shop", object("v1", "Event", "shop", "ev", nil)},
		item{"pods", "", "shop", object("v1", "Pod", "shop", "done", map[string]any{"status": map[string]any{"phase": "Succeeded"}})},
	)
	store, keys := commitBackup(t, items)

	const workers = 4
	rec := newRecorder("configmaps", workers)
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	// The fake does not keep a created CRD's status: it is Established at once here.
	dyn.PrependReactor("get", "customresourcedefinitions", func(action clienttesting.Action) (bool, runtime.Object, error) {
		crd := &unstructured.Unstructured{Object: object("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", action.(clienttesting.GetAction).GetName(),
			map[string]any{"status": map[string]any{"conditions": []any{map[string]any{"type": "Established", "status": "True"}}}})}
		return true, crd, nil
	})
	runner := &restore.Runner{Dynamic: countingDynamic{Interface: dyn, rec: rec}, Discovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}, Workers: workers}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1"},
		Spec: cairnv1.RestoreSpec{BackupName: "b1"}, Status: cairnv1.RestoreStatus{BackupName: "b1"}}
	var progress []string
	var mu sync.Mutex
	res := runner.Run(context.Background(), restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: store, BackupKeys: keys,
		Files: store, FilesKeys: storage.Layout{}.Restore("cairn-system", "r1"),
		OnProgress: func(done, total int64) {
			mu.Lock()
			progress = append(progress, fmt.Sprintf("%d/%d", done, total))
			mu.Unlock()
		}})
	if res.Ending != restore.Finished || res.Errors != 0 {
		t.Fatalf("run ended %s (%s), %d errors", res.Ending, res.FailureReason, res.Errors)
	}
	// 12 ConfigMaps, the Secret, the Deployment, the Widget, the CRD, the Namespace, the
	// Event and the finished Pod (both skipped, but handled).
	if res.TotalItems != 19 || res.ItemsRestored != 19 {
		t.Errorf("items %d/%d, want 19/19", res.ItemsRestored, res.TotalItems)
	}

	// Groups one after another: the CRD, then the namespace, secrets, configmaps (priority
	// order), then the rest together.
	var groups []string
	for _, res := range rec.order {
		if len(groups) == 0 || groups[len(groups)-1] != res {
			groups = append(groups, res)
		}
	}
	wantPrefix := []string{"customresourcedefinitions", "namespaces", "secrets", "configmaps"}
	if len(groups) < len(wantPrefix)+2 || strings.Join(groups[:len(wantPrefix)], ",") != strings.Join(wantPrefix, ",") {
		t.Fatalf("creates by resource, in order: %v; want %v first, then deployments and widgets", groups, wantPrefix)
	}
	for _, res := range groups[len(wantPrefix):] {
		if res != "deployments" && res != "widgets" {
			t.Errorf("after configmaps came %s: %v", res, groups)
		}
	}
	if rec.maxIn["configmaps"] < workers {
		t.Errorf("at most %d ConfigMaps were created at once, want the pool's %d", rec.maxIn["configmaps"], workers)
	}
	for _, skipped := range []string{"events", "pods"} {
		for _, res := range rec.order {
			if res == skipped {
				t.Errorf("%s was created; it must be skipped", skipped)
			}
		}
	}

	// Every created object carries the restore's labels.
	cm, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("shop").Get(context.Background(), "cm-03", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.GetLabels()[cairnv1.RestoreNameLabel] != "r1" || cm.GetLabels()[cairnv1.BackupNameLabel] != "b1" {
		t.Errorf("labels = %v", cm.GetLabels())
	}
	// The resource list says what happened to each item.
	var list restore.ResourceList
	readGzipJSON(t, store, storage.Layout{}.Restore("cairn-system", "r1").ResourceList, &list)
	if got := len(list[restore.Created]["configmaps"]); got != 12 {
		t.Errorf("%d ConfigMaps listed as created, want 12", got)
	}
	if got := list[restore.Skipped]["pods"]; len(got) != 1 || got[0] != "shop/done" {
		t.Errorf("skipped pods = %v", got)
	}
}

func TestRunFailsOnAChecksumMismatchBeforeCreatingAnything(t *testing.T) {
	store, keys := commitBackup(t, []item{{"configmaps", "", "shop", object("v1", "ConfigMap", "shop", "a", nil)}})
	m, err := storage.ReadMetadata(context.Background(), store, keys)
	if err != nil {
		t.Fatal(err)
	}
	m.ArchiveSHA256 = strings.Repeat("0", 64)
	if err := storage.WriteMetadata(context.Background(), store, keys, m); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder("", 0)
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("*", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		rec.order = append(rec.order, action.GetVerb()+" "+action.GetResource().Resource)
		return false, nil, nil
	})
	runner := &restore.Runner{Dynamic: dyn, Discovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1"}, Status: cairnv1.RestoreStatus{BackupName: "b1"}}
	res := runner.Run(context.Background(), restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: store, BackupKeys: keys})
	if res.Ending != restore.Failed || !strings.Contains(res.FailureReason, "archive checksum mismatch") {
		t.Fatalf("run ended %s: %q", res.Ending, res.FailureReason)
	}
	if len(rec.order) != 0 {
		t.Errorf("the API server was called: %v", rec.order)
	}
}

func readGzipJSON(t *testing.T, store storage.ObjectStore, key string, v any) {
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
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

func gunzipAll(r io.Reader) ([]byte, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	defer gz.Close()
	return io.ReadAll(gz)
}

func TestRunCreatesNamespacesFirstWhateverThePriorities(t *testing.T) {
	store, keys := commitBackup(t, []item{
		{"configmaps", "", "shop", object("v1", "ConfigMap", "shop", "a", nil)},
		{"namespaces", "", "", object("v1", "Namespace", "", "shop", nil)},
	})
	rec := newRecorder("", 0)
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	runner := &restore.Runner{Dynamic: countingDynamic{Interface: dyn, rec: rec}, Discovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}},
		Priorities: []string{"configmaps"}}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1"}, Status: cairnv1.RestoreStatus{BackupName: "b1"}}
	res := runner.Run(context.Background(), restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: store, BackupKeys: keys})
	if res.Ending != restore.Finished || res.Errors != 0 {
		t.Fatalf("run ended %s (%s), %d errors", res.Ending, res.FailureReason, res.Errors)
	}
	if strings.Join(rec.order, ",") != "namespaces,configmaps" {
		t.Errorf("created %v, want the namespace first", rec.order)
	}
}

func TestRunTellsAScratchFailureFromAStorageFailure(t *testing.T) {
	store, keys := commitBackup(t, []item{{"configmaps", "", "shop", object("v1", "ConfigMap", "shop", "a", nil)}})
	notADir := t.TempDir() + "/file"
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	runner := &restore.Runner{Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()),
		Discovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}, ScratchDir: notADir}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1"}, Status: cairnv1.RestoreStatus{BackupName: "b1"}}
	res := runner.Run(context.Background(), restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: store, BackupKeys: keys})
	if res.Ending != restore.Failed || res.StorageFailure || !strings.Contains(res.FailureReason, "scratch directory") {
		t.Errorf("run ended %s, storage failure %v: %q; want Failed on the scratch directory, not storage", res.Ending, res.StorageFailure, res.FailureReason)
	}
}

func TestRunRetriesAStorageFailureThenSaysSo(t *testing.T) {
	store, keys := commitBackup(t, nil)
	flaky := &failingStore{ObjectStore: store, failures: 1}
	runner := &restore.Runner{Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()),
		Discovery:    &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}},
		StorageRetry: wait.Backoff{Duration: time.Millisecond, Steps: 3}}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1"}, Status: cairnv1.RestoreStatus{BackupName: "b1"}}
	if res := runner.Run(context.Background(), restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: flaky, BackupKeys: keys}); res.Ending != restore.Finished {
		t.Errorf("one failed read: run ended %s (%s), want Finished", res.Ending, res.FailureReason)
	}
	down := &failingStore{ObjectStore: store, failures: 100}
	res := runner.Run(context.Background(), restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: down, BackupKeys: keys})
	if res.Ending != restore.Failed || !res.StorageFailure || !strings.Contains(res.FailureReason, "storage down") || down.calls != 3 {
		t.Errorf("storage down: run ended %s, storage failure %v: %q after %d reads; want Failed after 3", res.Ending, res.StorageFailure, res.FailureReason, down.calls)
	}
}

// failingStore fails its first failures Gets.
type failingStore struct {
	storage.ObjectStore
	mu              sync.Mutex
	failures, calls int
}

func (f *failingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	f.mu.Lock()
	f.calls++
	fail := f.calls <= f.failures
	f.mu.Unlock()
	if fail {
		return nil, errors.New("storage down")
	}
	return f.ObjectStore.Get(ctx, key)
}

// needsSecret names the Secret "s" of the item's backed-up namespace as an additional item of
// every ConfigMap.
type needsSecret struct{ restore.SyncAction }

func (needsSecret) Name() string { return "test/needs-secret" }
func (needsSecret) AppliesTo() []schema.GroupResource {
	return []schema.GroupResource{{Resource: "configmaps"}}
}
func (needsSecret) Execute(_ context.Context, in restore.ActionInput) (restore.ActionOutput, error) {
	return restore.ActionOutput{Item: in.Item, AdditionalItems: []restore.ItemRef{
		{GR: schema.GroupResource{Resource: "secrets"}, Namespace: in.Original.GetNamespace(), Name: "s"},
		{GR: schema.GroupResource{Resource: "secrets"}, Namespace: in.Original.GetNamespace(), Name: "not-in-the-backup"},
	}}, nil
}

func TestRunRestoresAdditionalItemsFirstAndOnce(t *testing.T) {
	store, keys := commitBackup(t, []item{
		{"configmaps", "", "shop", object("v1", "ConfigMap", "shop", "a", nil)},
		{"configmaps", "", "shop", object("v1", "ConfigMap", "shop", "b", nil)},
		{"secrets", "", "shop", object("v1", "Secret", "shop", "s", map[string]any{"metadata": map[string]any{"name": "s", "namespace": "shop", "labels": map[string]any{"tier": "db"}}})},
	})
	rec := newRecorder("", 0)
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	// The ConfigMaps go first; the Secret, an additional item of theirs, must come before them.
	runner := &restore.Runner{Dynamic: countingDynamic{Interface: dyn, rec: rec}, Discovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}},
		Priorities: []string{"configmaps", "secrets"}, Workers: 1, Actions: restore.NewActions(needsSecret{})}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1"}, Status: cairnv1.RestoreStatus{BackupName: "b1"},
		Spec: cairnv1.RestoreSpec{IncludedResources: []string{"configmaps", "secrets"}, NamespaceMapping: map[string]cairnv1.NamespaceName{"shop": "copy"}}}
	res := runner.Run(context.Background(), restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: store, BackupKeys: keys})
	if res.Ending != restore.Finished || res.Errors != 0 {
		t.Fatalf("run ended %s (%s), %d errors", res.Ending, res.FailureReason, res.Errors)
	}
	if got := strings.Join(rec.order, ","); got != "namespaces,secrets,configmaps,configmaps" {
		t.Errorf("created %s; want the namespace, the Secret once and before the ConfigMaps, then the ConfigMaps", got)
	}
	if res.TotalItems != 3 || res.ItemsRestored != 3 {
		t.Errorf("items %d/%d, want 3/3", res.ItemsRestored, res.TotalItems)
	}
}

// hungStore answers nothing: every Get blocks until its context ends, as a storage service
// that accepted the connection and went silent.
type hungStore struct {
	storage.ObjectStore
	started chan struct{}
	once    sync.Once
}

func (h *hungStore) Get(ctx context.Context, _ string) (io.ReadCloser, error) {
	h.once.Do(func() { close(h.started) })
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestRunCancelledWhileStorageHangs(t *testing.T) {
	store, keys := commitBackup(t, []item{{"configmaps", "", "shop", object("v1", "ConfigMap", "shop", "a", nil)}})
	hung := &hungStore{ObjectStore: store, started: make(chan struct{})}
	runner := &restore.Runner{Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()),
		Discovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}, StorageTimeout: time.Hour}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1"}, Status: cairnv1.RestoreStatus{BackupName: "b1"}}
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan *restore.Result)
	go func() {
		done <- runner.Run(ctx, restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: hung, BackupKeys: keys})
	}()
	<-hung.started
	cancel(restore.ErrCancelRequested)
	select {
	case res := <-done:
		if res.Ending != restore.Cancelled {
			t.Errorf("run ended %s (%s), want Cancelled", res.Ending, res.FailureReason)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a cancel did not end a run whose storage hangs")
	}
}
