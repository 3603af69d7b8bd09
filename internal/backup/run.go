package backup

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/scope"
	"github.com/cairn-backup/cairn/internal/storage"
)

// DefaultPageSize is the page size of every LIST.
const DefaultPageSize = 500

// Runner runs backups. One Runner serves every backup; each Run has its own worker pool.
type Runner struct {
	Dynamic dynamic.Interface
	// Raw is a REST client for any path (the discovery client's): LIST pages are read as raw
	// JSON, and items no action needs to see are written without ever being decoded.
	Raw rest.Interface
	// Workers is the size of each backup's own worker pool (--item-block-worker-count).
	Workers int
	// PageSize is the LIST page size; 0 means DefaultPageSize.
	PageSize int64
	// ExtraActions are registered after the built-in ones.
	ExtraActions []BackupItemAction
	// OnWorkerPool, when set, is told when a backup's pool starts and stops (for tests and
	// metrics): delta is +Workers or -Workers.
	OnWorkerPool func(backup string, delta int)
}

// Request is one backup to run.
type Request struct {
	Backup            *cairnv1.Backup
	OperatorNamespace string
	// Resources are the cluster's resources (ResourcesFromDiscovery).
	Resources []Resource
	// CustomResources are the resources CRDs serve (CustomResources).
	CustomResources []CustomResource
	// ClusterNamespaces are the cluster's namespaces, to resolve wildcards.
	ClusterNamespaces []string
	Store             storage.ObjectStore
	Keys              storage.BackupKeys
	// Log is the backup's own log; its warnings and errors are counted by the caller's hook.
	Log logrus.FieldLogger
	// Progress receives the counts as they change, from several goroutines.
	Progress *Progress
}

// Progress counts a backup's items; safe for concurrent use.
type Progress struct {
	total, done atomic.Int64
}

// Counts returns items backed up and items found.
func (p *Progress) Counts() (done, total int64) { return p.done.Load(), p.total.Load() }

// Operation is an async operation an action started.
type Operation struct {
	Action             string    `json:"action"`
	OperationID        string    `json:"operationID"`
	Item               ItemID    `json:"item"`
	PostOperationItems []ItemID  `json:"postOperationItems,omitempty"`
	Started            time.Time `json:"started"`
	// Phase is "" or OperationInProgress while it runs, then OperationCompleted or OperationFailed.
	Phase       string    `json:"phase,omitempty"`
	Error       string    `json:"error,omitempty"`
	NCompleted  int64     `json:"nCompleted,omitempty"`
	NTotal      int64     `json:"nTotal,omitempty"`
	Units       string    `json:"units,omitempty"`
	Description string    `json:"description,omitempty"`
	Updated     time.Time `json:"updated,omitzero"`
}

// Phases of an Operation.
const (
	OperationInProgress = "InProgress"
	OperationCompleted  = "Completed"
	OperationFailed     = "Failed"
)

// Running reports whether the operation has not finished.
func (o Operation) Running() bool { return o.Phase == "" || o.Phase == OperationInProgress }

// ItemResult is a warning or error about one item.
type ItemResult struct {
	Item    string `json:"item"`
	Message string `json:"message"`
}

// Results are the per-item warnings and errors of a backup (the -results.json.gz object).
type Results struct {
	Warnings []ItemResult `json:"warnings,omitempty"`
	Errors   []ItemResult `json:"errors,omitempty"`
}

// Outcome is what a Run produced.
type Outcome struct {
	Digest     storage.ArchiveDigest
	Operations []Operation
	Results    Results
	// ResourceList maps "resource.group" to the "namespace/name" of every item written.
	ResourceList map[string][]string
}

// run is the state of one Run.
type run struct {
	*Runner
	req        Request
	registry   *Registry
	byGR       map[schema.GroupResource]Resource
	nsFilter   scope.NamespaceFilter
	namespaces scope.NamespaceSet
	resFilter  ResourceFilter
	selectors  []labels.Selector
	// clusterScope: "all", "none" or "needed" (includeClusterResources true/false/nil).
	clusterScope string

	mu         sync.Mutex
	seen       map[ItemID]bool
	operations []Operation
	results    Results
	resources  map[string][]string

	out chan writtenItem
}

type writtenItem struct {
	id   ItemID
	data []byte
}

// Run backs up the items the backup selects into the archive object, streaming: items are
// listed a page at a time, handed to the backup's own workers, and written by one writer into
// one upload. It returns when everything is written or ctx ends; when ctx ends, the workers
// and the upload stop at once and the error is ctx's. Problems with single items are warnings
// or errors in the outcome and the log; a returned error means the backup failed, and the
// outcome then holds only the operations that were started.
func (r *Runner) Run(ctx context.Context, req Request) (Outcome, error) {
	ru, err := r.newRun(req)
	if err != nil {
		return Outcome{}, err
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The upload: the archive streams through a pipe into the store.
	pr, pw := io.Pipe()
	uploaded := make(chan error, 1)
	var digest storage.ArchiveDigest
	go func() {
		d, err := storage.PutArchive(ctx, req.Store, req.Keys.Archive, pr)
		digest = d
		_ = pr.CloseWithError(err)
		uploaded <- err
	}()
	// A cancelled backup stops its upload at once: the store's reads fail, and so does the
	// writer's next write, instead of waiting for the workers to drain.
	stopUpload := context.AfterFunc(ctx, func() {
		_ = pr.CloseWithError(context.Cause(ctx))
		_ = pw.CloseWithError(context.Cause(ctx))
	})
	defer stopUpload()

	// The single writer.
	aw, err := archive.NewWriter(pw, time.Now())
	if err != nil {
		_ = pw.CloseWithError(err)
		return Outcome{}, firstError(err, <-uploaded)
	}
	ru.out = make(chan writtenItem, 64)
	written := make(chan error, 1)
	go func() {
		var werr error
		for it := range ru.out {
			if werr != nil {
				continue // drain, so workers never block
			}
			if werr = aw.AddItem(it.id.Resource, it.id.Group, it.id.Namespace, it.id.Name, it.data); werr != nil {
				cancel()
				continue
			}
			req.Progress.done.Add(1)
			ru.recordResource(it.id)
		}
		written <- werr
	}()

	// The backup's own worker pool.
	blocks := make(chan listedItem, 2*r.Workers)
	var workers sync.WaitGroup
	if r.OnWorkerPool != nil {
		r.OnWorkerPool(req.Backup.Namespace+"/"+req.Backup.Name, r.Workers)
	}
	for range r.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for item := range blocks {
				ru.backUpBlock(ctx, item)
			}
		}()
	}

	collectErr := ru.collect(ctx, blocks)
	close(blocks)
	workers.Wait()
	if r.OnWorkerPool != nil {
		r.OnWorkerPool(req.Backup.Namespace+"/"+req.Backup.Name, -r.Workers)
	}
	close(ru.out)
	writeErr := <-written
	if writeErr == nil {
		writeErr = aw.Close()
	}
	_ = pw.CloseWithError(firstError(collectErr, writeErr, ctx.Err()))
	uploadErr := <-uploaded

	ru.mu.Lock()
	defer ru.mu.Unlock()
	// The caller's cancellation first; then the writer's and the upload's errors, which cancel
	// the collection (its error is then only "context canceled").
	if err := firstError(parent.Err(), writeErr, uploadErr, collectErr); err != nil {
		// The operations already started are returned even so: the caller cancels them.
		return Outcome{Operations: ru.operations}, err
	}
	for k := range ru.resources {
		sort.Strings(ru.resources[k])
	}
	return Outcome{Digest: digest, Operations: ru.operations, Results: ru.results, ResourceList: ru.resources}, nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *Runner) newRun(req Request) (*run, error) {
	b := req.Backup
	ru := &run{
		Runner:    r,
		req:       req,
		registry:  NewRegistry(req.CustomResources, r.ExtraActions...),
		byGR:      map[schema.GroupResource]Resource{},
		nsFilter:  scope.ForBackup(b, req.OperatorNamespace),
		seen:      map[ItemID]bool{},
		resources: map[string][]string{},
	}
	for _, res := range req.Resources {
		ru.byGR[res.GroupResource()] = res
	}
	ru.namespaces = ru.nsFilter.Resolve(req.ClusterNamespaces)
	var warnings []string
	ru.resFilter, warnings = NewResourceFilter(b.Spec.IncludedResources, b.Spec.ExcludedResources, req.Resources)
	for _, w := range warnings {
		req.Log.Warn(w)
	}
	switch {
	case b.Namespace != req.OperatorNamespace:
		ru.clusterScope = "none" // tenancy: a team's backup never holds cluster-scoped items
	case b.Spec.IncludeClusterResources == nil:
		ru.clusterScope = "needed"
	case *b.Spec.IncludeClusterResources:
		ru.clusterScope = "all"
	default:
		ru.clusterScope = "none"
	}
	selectors := b.Spec.OrLabelSelectors
	if b.Spec.LabelSelector != nil {
		selectors = []*metav1.LabelSelector{b.Spec.LabelSelector}
	}
	for _, s := range selectors {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			return nil, fmt.Errorf("label selector: %w", err)
		}
		ru.selectors = append(ru.selectors, sel)
	}
	return ru, nil
}

// listers is how many LISTs a backup runs at once: most (resource, namespace) pairs are empty,
// so their round trips, not their items, would dominate a sequential walk.
const listers = 8

// collect lists every selected resource a page at a time and hands each selected item to the
// workers as the root of an ItemBlock.
func (ru *run) collect(ctx context.Context, blocks chan<- listedItem) error {
	type listTask struct {
		res       Resource
		namespace string
	}
	var tasks []listTask
	for _, res := range ru.req.Resources {
		gr := res.GroupResource()
		if !ru.resFilter.Includes(gr) {
			continue
		}
		if !res.Namespaced && gr != nsGR && ru.clusterScope != "all" {
			continue // cluster-scoped items come in only as items that namespaced ones need
		}
		switch {
		case gr == nsGR:
			if ru.clusterScope == "none" && ru.req.Backup.Namespace == ru.req.OperatorNamespace {
				continue
			}
			tasks = append(tasks, listTask{res, ""})
		case !res.Namespaced || ru.namespaces.All:
			tasks = append(tasks, listTask{res, ""})
		default:
			for _, ns := range ru.namespaces.Names {
				tasks = append(tasks, listTask{res, ns})
			}
		}
	}
	work := make(chan listTask)
	errs := make(chan error, listers)
	var wg sync.WaitGroup
	for range listers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range work {
				if err := ru.listPages(ctx, t.res, t.namespace, blocks); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for _, t := range tasks {
		select {
		case work <- t:
		case err = <-errs:
			break feed
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if err != nil {
		return err
	}
	return <-errs // nil when the channel is empty and closed
}

// listedItem is an item as a LIST page returned it: raw JSON (with apiVersion and kind set),
// and the few fields the filters need.
type listedItem struct {
	res       Resource
	raw       []byte
	namespace string
	name      string
	labels    map[string]string
}

// listPath is the API path of a resource's collection, in namespace ns ("" for all or none).
func listPath(res Resource, ns string) string {
	path := "/apis/" + res.Group + "/" + res.Version
	if res.Group == "" {
		path = "/api/" + res.Version
	}
	if ns != "" {
		path += "/namespaces/" + ns
	}
	return path + "/" + res.Resource
}

// listPages reads a resource's collection page by page as raw JSON, decoding only each item's
// metadata for the filters.
func (ru *run) listPages(ctx context.Context, res Resource, ns string, blocks chan<- listedItem) error {
	pageSize := ru.PageSize
	if pageSize == 0 {
		pageSize = DefaultPageSize
	}
	apiVersion := res.GroupVersion().String()
	continueToken := ""
	for {
		req := ru.Raw.Get().AbsPath(listPath(res, ns)).Param("limit", strconv.FormatInt(pageSize, 10)).
			SetHeader("Accept", "application/json")
		if continueToken != "" {
			req = req.Param("continue", continueToken)
		}
		if len(ru.selectors) == 1 {
			req = req.Param("labelSelector", ru.selectors[0].String())
		}
		data, err := req.DoRaw(ctx)
		if apierrors.IsResourceExpired(err) && continueToken != "" {
			// The continue token expired on a long backup: start the list again; items
			// already seen are skipped.
			continueToken = ""
			continue
		}
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsMethodNotSupported(err) {
			ru.req.Log.WithField("resource", res.GroupResource().String()).Warnf("Skipped a resource that cannot be listed: %v", err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", res.GroupResource(), err)
		}
		var page struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(data, &page); err != nil {
			return fmt.Errorf("decoding the list of %s: %w", res.GroupResource(), err)
		}
		for _, raw := range page.Items {
			item, err := parseListed(res, apiVersion, raw)
			if err != nil {
				ru.req.Log.WithField("resource", res.GroupResource().String()).Errorf("Skipped an item that could not be read: %v", err)
				continue
			}
			if !ru.selected(res, item.namespace, item.name, item.labels) {
				continue
			}
			select {
			case blocks <- item:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if page.Metadata.Continue == "" {
			return nil
		}
		continueToken = page.Metadata.Continue
	}
}

// parseListed reads an item's metadata and makes sure its JSON carries apiVersion and kind,
// which the items of a LIST of built-in types leave out.
func parseListed(res Resource, apiVersion string, raw []byte) (listedItem, error) {
	var head struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return listedItem{}, err
	}
	if head.Kind == "" {
		if len(raw) < 2 || raw[0] != '{' {
			return listedItem{}, fmt.Errorf("an item of %s is not a JSON object", res.GroupResource())
		}
		prefix := fmt.Sprintf(`{"apiVersion":%q,"kind":%q`, apiVersion, res.Kind)
		rest := raw[1:]
		if len(bytes.TrimSpace(rest)) > 1 { // not "{}"
			prefix += ","
		}
		raw = append([]byte(prefix), rest...)
	}
	return listedItem{res: res, raw: raw, namespace: head.Metadata.Namespace, name: head.Metadata.Name, labels: head.Metadata.Labels}, nil
}

// selected applies the namespace, label and exclusion filters to a listed item.
func (ru *run) selected(res Resource, namespace, name string, itemLabels map[string]string) bool {
	if itemLabels[cairnv1.ExcludeFromBackupLabel] == "true" {
		return false
	}
	if res.GroupResource() == nsGR {
		return ru.nsFilter.Matches(name) && (ru.clusterScope != "none" || ru.req.Backup.Namespace != ru.req.OperatorNamespace)
	}
	if res.Namespaced && !ru.nsFilter.Matches(namespace) {
		return false
	}
	if len(ru.selectors) > 1 {
		set := labels.Set(itemLabels)
		for _, s := range ru.selectors {
			if s.Matches(set) {
				return true
			}
		}
		return false
	}
	return true
}

// backUpBlock backs up a listed item and, on the same worker, the items its actions say
// belong with it (a pod's PVCs, a PVC's PV, a custom resource's CRD), each item once per
// backup. An item no action applies to is written as listed, never decoded.
func (ru *run) backUpBlock(ctx context.Context, root listedItem) {
	rootID := ItemID{GroupResource: root.res.GroupResource(), Namespace: root.namespace, Name: root.name}
	if !ru.claim(rootID) {
		return
	}
	ru.req.Progress.total.Add(1)
	if len(ru.registry.For(rootID.GroupResource)) == 0 {
		ru.write(ctx, rootID, root.raw)
		return
	}
	var item unstructured.Unstructured
	if err := item.UnmarshalJSON(root.raw); err != nil {
		ru.itemError(rootID, fmt.Sprintf("decoding the item: %v", err))
		return
	}
	var queue []pending
	for _, extra := range ru.backUpItem(ctx, rootID, &item) {
		queue = append(queue, pending{id: extra})
	}
	for len(queue) > 0 && ctx.Err() == nil {
		next := queue[0]
		queue = queue[1:]
		if !ru.claim(next.id) {
			continue
		}
		ru.req.Progress.total.Add(1)
		fetched, ok := ru.fetch(ctx, next.id)
		if !ok {
			continue
		}
		for _, extra := range ru.backUpItem(ctx, next.id, fetched) {
			queue = append(queue, pending{id: extra})
		}
	}
}

type pending struct {
	id ItemID
}

// claim marks an item as taken by this worker; false when another block already has it.
func (ru *run) claim(id ItemID) bool {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	if ru.seen[id] {
		return false
	}
	ru.seen[id] = true
	return true
}

// fetch gets an additional item. An item that is gone, or that the backup may not include
// (cluster-scoped in a team's backup, excluded by resource or label), is skipped.
func (ru *run) fetch(ctx context.Context, id ItemID) (*unstructured.Unstructured, bool) {
	res, ok := ru.byGR[id.GroupResource]
	if !ok || !ru.resFilter.Includes(id.GroupResource) {
		return nil, false
	}
	if !res.Namespaced && ru.clusterScope == "none" {
		return nil, false
	}
	if res.Namespaced && !ru.nsFilter.Matches(id.Namespace) {
		return nil, false
	}
	client := ru.Dynamic.Resource(res.GroupVersionResource)
	var item *unstructured.Unstructured
	var err error
	if res.Namespaced {
		item, err = client.Namespace(id.Namespace).Get(ctx, id.Name, metav1.GetOptions{})
	} else {
		item, err = client.Get(ctx, id.Name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		if id.GroupResource != crdsGR { // a CRD is looked up by name and may well not exist
			ru.itemWarning(id, "the item is gone: it was deleted during the backup, or never existed")
		}
		return nil, false
	}
	if err != nil {
		ru.itemError(id, fmt.Sprintf("getting the item: %v", err))
		return nil, false
	}
	if item.GetLabels()[cairnv1.ExcludeFromBackupLabel] == "true" {
		return nil, false
	}
	return item, true
}

// backUpItem runs the item through its actions, hands it to the writer, and returns the
// additional items the actions named.
func (ru *run) backUpItem(ctx context.Context, id ItemID, item *unstructured.Unstructured) []ItemID {
	var additional []ItemID
	for _, action := range ru.registry.For(id.GroupResource) {
		res, err := action.Execute(ctx, item, ru.req.Backup)
		if err != nil {
			ru.itemError(id, fmt.Sprintf("action %s: %v", action.Name(), err))
			return nil
		}
		if res.Item != nil {
			item = res.Item
		}
		additional = append(additional, res.AdditionalItems...)
		if res.OperationID != "" {
			ru.mu.Lock()
			ru.operations = append(ru.operations, Operation{Action: action.Name(), OperationID: res.OperationID, Item: id,
				PostOperationItems: res.PostOperationItems, Started: time.Now()})
			ru.mu.Unlock()
		}
	}
	data, err := json.Marshal(item.Object)
	if err != nil {
		ru.itemError(id, fmt.Sprintf("encoding the item: %v", err))
		return nil
	}
	ru.write(ctx, id, data)
	return additional
}

// write hands an item's JSON to the archive writer.
func (ru *run) write(ctx context.Context, id ItemID, data []byte) {
	select {
	case ru.out <- writtenItem{id: id, data: data}:
	case <-ctx.Done():
	}
}

func (ru *run) itemError(id ItemID, message string) {
	ru.mu.Lock()
	ru.results.Errors = append(ru.results.Errors, ItemResult{Item: id.String(), Message: message})
	ru.mu.Unlock()
	ru.req.Log.WithField("item", id.String()).Error(message)
}

func (ru *run) itemWarning(id ItemID, message string) {
	ru.mu.Lock()
	ru.results.Warnings = append(ru.results.Warnings, ItemResult{Item: id.String(), Message: message})
	ru.mu.Unlock()
	ru.req.Log.WithField("item", id.String()).Warn(message)
}

func (ru *run) recordResource(id ItemID) {
	key := id.GroupResource.String()
	name := id.Name
	if id.Namespace != "" {
		name = id.Namespace + "/" + id.Name
	}
	ru.mu.Lock()
	ru.resources[key] = append(ru.resources[key], name)
	ru.mu.Unlock()
}

// GzipJSON encodes v as gzipped JSON, for the resource list, results and operations objects.
func GzipJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if err := json.NewEncoder(gz).Encode(v); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// CustomResources lists the CRDs and returns the resources they serve.
func CustomResources(ctx context.Context, dyn dynamic.Interface) ([]CustomResource, error) {
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	var out []CustomResource
	opts := metav1.ListOptions{Limit: DefaultPageSize}
	for {
		list, err := dyn.Resource(gvr).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, crd := range list.Items {
			group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
			plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
			kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
			out = append(out, CustomResource{GroupResource: schema.GroupResource{Group: group, Resource: plural}, Kind: kind, CRD: crd.GetName()})
		}
		if list.GetContinue() == "" {
			return out, nil
		}
		opts.Continue = list.GetContinue()
	}
}
