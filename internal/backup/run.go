package backup

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/failure"
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
	// Discovery finds the cluster's resources when a run starts.
	Discovery discovery.DiscoveryInterface
	// Workers is the size of each backup's own worker pool (--item-block-worker-count).
	Workers int
	// PageSize is the LIST page size; 0 means DefaultPageSize.
	PageSize int64
	// ExtraActions are registered after the built-in ones.
	ExtraActions []BackupItemAction
	// OnWorkerPool, when set, is told when a backup's pool starts and stops (for tests and
	// metrics): delta is +Workers or -Workers.
	OnWorkerPool func(backup string, delta int)
	// Clock is the run's time source; nil means the real clock.
	Clock clock.Clock
	// StorageTimeout bounds each small storage call; 0 means DefaultStorageTimeout.
	StorageTimeout time.Duration
	// ProgressInterval is how often progress is reported, at most; 0 means DefaultProgressInterval.
	ProgressInterval time.Duration
	// Retry paces the retries of API calls that failed transiently; zero means DefaultRetry.
	Retry wait.Backoff
}

// DefaultRetry paces the retries of a run's API calls that failed transiently (a LIST page,
// discovery, the namespaces): about half a minute in all before the run gives up.
var DefaultRetry = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 6}

func (r *Runner) clock() clock.Clock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// Request is one backup to run.
type Request struct {
	Backup            *cairnv1.Backup
	OperatorNamespace string
	// LocationName names the storage location, for the log and messages.
	LocationName string
	Store        storage.ObjectStore
	Keys         storage.BackupKeys
	// Progress receives the counts as they change, from several goroutines; nil means a new one.
	Progress *Progress
	// OnProgress, when set, is told the counts at most once per ProgressInterval while they change.
	OnProgress func(done, total int64)
	// Access, when set, is asked before each resource is listed and each additional item is
	// read: what it denies is left out, and named once in a warning. nil reads what the
	// operator may read (an administrator's backup).
	Access Access
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
	// Result is what the operation produced, once Completed (OperationProgress.Result).
	Result json.RawMessage `json:"result,omitempty"`
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

// outcome is what streaming a backup's items produced.
type outcome struct {
	Digest     storage.ArchiveDigest
	Operations []Operation
	Results    Results
	// Hooks counts the hooks the actions ran while the items were backed up.
	Hooks HookCounts
	// ResourceList maps "resource.group" to the "namespace/name" of every item written.
	ResourceList map[string][]string
}

// run is the state of one Run.
type run struct {
	*Runner
	req       Request
	log       logrus.FieldLogger
	registry  *Registry
	byGR      map[schema.GroupResource]Resource
	selection Selection

	mu sync.Mutex
	// seen holds the items claimed so far, by itemKey: one string per item, whose tail is also
	// the item's entry in the resource list (a substring, no second copy).
	seen       map[string]struct{}
	operations []Operation
	results    Results
	resources  map[schema.GroupResource][]string
	access     *accessCache
	hooks      HookCounts

	out chan writtenItem
}

type writtenItem struct {
	id ItemID
	// entry is the item's resource-list entry (a substring of its key in seen).
	entry string
	data  []byte
}

// stream backs up the items the backup selects into the archive object: items are listed a
// page at a time, handed to the backup's own workers, and written by one writer into one
// upload. It returns when everything is written or ctx ends; when ctx ends, the workers and the
// upload stop at once and the error is ctx's. Problems with single items are warnings or errors
// in the outcome and the log; a returned error means the backup failed, and the outcome then
// holds only the operations that were started.
func (r *Runner) stream(ctx context.Context, req Request, sel Selection, resources []Resource, registry *Registry, log logrus.FieldLogger) (outcome, error) {
	ru := &run{Runner: r, req: req, log: log, registry: registry, byGR: map[schema.GroupResource]Resource{},
		selection: sel, seen: map[string]struct{}{}, resources: map[schema.GroupResource][]string{},
		access: &accessCache{access: req.Access}}
	for _, res := range resources {
		ru.byGR[res.GroupResource()] = res
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
	aw, err := archive.NewWriter(pw, r.clock().Now())
	if err != nil {
		_ = pw.CloseWithError(err)
		return outcome{}, firstError(err, <-uploaded)
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
			ru.recordResource(it.id.GroupResource, it.entry)
		}
		written <- werr
	}()

	// The backup's own worker pool.
	blocks := make(chan listedItem, 2*r.Workers)
	var workers sync.WaitGroup
	if r.OnWorkerPool != nil {
		r.OnWorkerPool(requestLabel(req.Backup), r.Workers)
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

	collectErr := ru.collect(ctx, ru.selection.ListTasks(resources), blocks)
	close(blocks)
	workers.Wait()
	if r.OnWorkerPool != nil {
		r.OnWorkerPool(requestLabel(req.Backup), -r.Workers)
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
		return outcome{Operations: ru.operations, Hooks: ru.hooks}, err
	}
	resourceList := make(map[string][]string, len(ru.resources))
	for gr, names := range ru.resources {
		sort.Strings(names)
		resourceList[gr.String()] = names
	}
	return outcome{Digest: digest, Operations: ru.operations, Results: ru.results, Hooks: ru.hooks, ResourceList: resourceList}, nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// listers is how many LISTs a backup runs at once: most (resource, namespace) pairs are empty,
// so their round trips, not their items, would dominate a sequential walk.
const listers = 8

// collect lists the collections of tasks a page at a time, listers at once, and hands each
// selected item to the workers as the root of an ItemBlock. The first list that fails, or the
// end of ctx, stops it from starting more; the lists already under way finish.
func (ru *run) collect(ctx context.Context, tasks []ListTask, blocks chan<- listedItem) error {
	// stop ends when a list fails (or ctx does); the lists themselves run on ctx.
	g, stop := errgroup.WithContext(ctx)
	g.SetLimit(listers)
	for _, t := range tasks {
		if stop.Err() != nil {
			if err := g.Wait(); err != nil {
				return err
			}
			return ctx.Err()
		}
		g.Go(func() error { return ru.listPages(ctx, t.Resource, t.Namespace, blocks) })
	}
	return g.Wait()
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

// maxListRestarts bounds how often one collection's LIST starts again from the beginning
// after its continue token expired without the API server offering a way to resume.
const maxListRestarts = 3

// listPages reads a resource's collection page by page as raw JSON, decoding only each item's
// metadata for the filters. A page that fails transiently is retried; a continue token that
// expired during a long backup (410 Gone) is resumed from the token the API server offers with
// the error, so a huge LIST never starts over forever. A resource that vanished is a warning;
// one this backup may not list (Forbidden) is an error: the backup is incomplete.
func (ru *run) listPages(ctx context.Context, res Resource, ns string, blocks chan<- listedItem) error {
	pageSize := ru.PageSize
	if pageSize == 0 {
		pageSize = DefaultPageSize
	}
	apiVersion := res.GroupVersion().String()
	log := ru.log.WithField("resource", res.GroupResource().String())
	if ns != "" {
		log = log.WithField("namespace", ns)
	}
	if ok, err := ru.mayRead(ctx, res.GroupResource(), ns, "list"); !ok || err != nil {
		return err
	}
	continueToken := ""
	restarts := 0
	for {
		var data []byte
		err := ru.retryTransient(ctx, func() (err error) {
			req := ru.Raw.Get().AbsPath(listPath(res, ns)).Param("limit", strconv.FormatInt(pageSize, 10)).
				SetHeader("Accept", "application/json")
			if continueToken != "" {
				req = req.Param("continue", continueToken)
			}
			if selector := ru.selection.ServerSideSelector(); selector != "" {
				req = req.Param("labelSelector", selector)
			}
			// Do, not DoRaw: only Result.Error decodes the Status the API server sends with an
			// error (a 410's reason Expired and its continue token).
			result := req.Do(ctx)
			if err := result.Error(); err != nil {
				return err
			}
			data, err = result.Raw()
			return err
		})
		if apierrors.IsResourceExpired(err) && continueToken != "" {
			next, resumed := nextAfterExpired(err)
			switch {
			case resumed:
				log.Warn("The LIST's continue token expired during the backup; resumed where the API server allows (items changed meanwhile may be missing or newer)")
			case next == "" && restarts < maxListRestarts:
				restarts++
				log.Warnf("The LIST's continue token expired during the backup; listing again from the start (%d of %d)", restarts, maxListRestarts)
			default:
				return fmt.Errorf("listing %s: the continue token expired %d times: %w", res.GroupResource(), restarts+1, err)
			}
			continueToken = next
			continue
		}
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err):
			log.Warnf("Skipped a resource that cannot be listed: %v", err)
			return nil
		case apierrors.IsForbidden(err):
			log.Errorf("Could not list a resource: the operator may not, so the backup is incomplete (a custom resource's group must be granted: the chart's rbac.customResourceGroups, docs/install.md): %v", err)
			return nil
		case err != nil:
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
				log.Errorf("Skipped an item that could not be read: %v", err)
				continue
			}
			if !ru.selection.Includes(res, item.namespace, item.name, item.labels, Listed) {
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

// mayRead reports whether the backup may read gr in namespace ns with verb (Request.Access),
// warning once about each resource it leaves out. A failure to find out is retried while
// transient, then returned.
func (ru *run) mayRead(ctx context.Context, gr schema.GroupResource, ns, verb string) (bool, error) {
	var ok, first bool
	var reason string
	err := ru.retryTransient(ctx, func() (err error) {
		ok, first, reason, err = ru.access.allowed(ctx, gr, ns, verb)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("asking whether the backup may %s %s: %w", verb, gr, err)
	}
	if first {
		ru.log.Warn(leftOutMessage(gr, ns, verb, reason))
	}
	return ok, nil
}

// nextAfterExpired is where a LIST goes on after its continue token expired (410 Gone): from
// the continue token the API server returns with the error, when it offers one (resumed); else
// from the start ("").
func nextAfterExpired(err error) (next string, resumed bool) {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if token := status.Status().Continue; token != "" {
			return token, true
		}
	}
	return "", false
}

// retryTransient runs f until it succeeds, fails with an error that waiting will not mend, or
// the retries (Runner.Retry) run out; it stops when ctx ends.
func (r *Runner) retryTransient(ctx context.Context, f func() error) error {
	return RetryTransient(ctx, r.Retry, f)
}

// RetryTransient calls f until it succeeds, fails with an error that is not transient
// (failure.IsTransient), or backoff (DefaultRetry when zero) runs out; it returns f's last error.
func RetryTransient(ctx context.Context, backoff wait.Backoff, f func() error) error {
	if backoff.Steps == 0 {
		backoff = DefaultRetry
	}
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(context.Context) (bool, error) {
		last = f()
		switch {
		case last == nil:
			return true, nil
		case failure.IsTransient(last):
			return false, nil
		}
		return false, last
	})
	if wait.Interrupted(err) && last != nil {
		return last
	}
	return err
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

// backUpBlock backs up a listed item and, on the same worker, the items its actions say
// belong with it (a pod's PVCs, a PVC's PV, a custom resource's CRD), each item once per
// backup. An item no action applies to is written as listed, never decoded.
func (ru *run) backUpBlock(ctx context.Context, root listedItem) {
	rootID := ItemID{GroupResource: root.res.GroupResource(), Namespace: root.namespace, Name: root.name}
	rootEntry, ok := ru.claim(rootID)
	if !ok {
		return
	}
	ru.req.Progress.total.Add(1)
	if len(ru.registry.For(rootID.GroupResource)) == 0 {
		ru.write(ctx, rootID, rootEntry, root.raw)
		return
	}
	var item unstructured.Unstructured
	if err := item.UnmarshalJSON(root.raw); err != nil {
		ru.itemError(rootID, fmt.Sprintf("decoding the item: %v", err))
		return
	}
	var queue []pending
	for _, extra := range ru.backUpItem(ctx, rootID, rootEntry, &item) {
		queue = append(queue, pending{id: extra})
	}
	for len(queue) > 0 && ctx.Err() == nil {
		next := queue[0]
		queue = queue[1:]
		entry, ok := ru.claim(next.id)
		if !ok {
			continue
		}
		ru.req.Progress.total.Add(1)
		fetched, ok := ru.fetch(ctx, next.id)
		if !ok {
			continue
		}
		for _, extra := range ru.backUpItem(ctx, next.id, entry, fetched) {
			queue = append(queue, pending{id: extra})
		}
	}
}

type pending struct {
	id ItemID
}

// claim marks an item as taken by this worker; false when another block already has it. It
// returns the item's resource-list entry ("namespace/name", or "name"), which shares its bytes
// with the key kept in seen: a run keeps one string per item, however large the cluster.
func (ru *run) claim(id ItemID) (entry string, ok bool) {
	key, entryStart := itemKey(id)
	ru.mu.Lock()
	defer ru.mu.Unlock()
	if _, taken := ru.seen[key]; taken {
		return "", false
	}
	ru.seen[key] = struct{}{}
	return key[entryStart:], true
}

// itemKey is the one string that names an item in a run: "group/resource|namespace/name" (or
// "...|name" for a cluster-scoped one), and where its resource-list entry starts in it.
func itemKey(id ItemID) (key string, entryStart int) {
	var b strings.Builder
	b.Grow(len(id.Group) + len(id.Resource) + len(id.Namespace) + len(id.Name) + 3)
	b.WriteString(id.Group)
	b.WriteByte('/')
	b.WriteString(id.Resource)
	b.WriteByte('|')
	entryStart = b.Len()
	if id.Namespace != "" {
		b.WriteString(id.Namespace)
		b.WriteByte('/')
	}
	b.WriteString(id.Name)
	return b.String(), entryStart
}

// fetch gets an additional item. An item that is gone, or that the backup may not hold (the
// selection decides: cluster-scoped in a team's backup, excluded by resource, namespace or
// label), is skipped.
func (ru *run) fetch(ctx context.Context, id ItemID) (*unstructured.Unstructured, bool) {
	res, ok := ru.byGR[id.GroupResource]
	if !ok || !ru.selection.Includes(res, id.Namespace, id.Name, nil, Additional) {
		return nil, false
	}
	if allowed, err := ru.mayRead(ctx, id.GroupResource, id.Namespace, "get"); err != nil || !allowed {
		if err != nil {
			ru.itemError(id, fmt.Sprintf("asking whether the backup may read the item: %v", err))
		}
		return nil, false
	}
	client := ru.Dynamic.Resource(res.GroupVersionResource)
	var item *unstructured.Unstructured
	err := ru.retryTransient(ctx, func() (err error) {
		if res.Namespaced {
			item, err = client.Namespace(id.Namespace).Get(ctx, id.Name, metav1.GetOptions{})
		} else {
			item, err = client.Get(ctx, id.Name, metav1.GetOptions{})
		}
		return err
	})
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
	if !ru.selection.Includes(res, id.Namespace, id.Name, item.GetLabels(), Additional) {
		return nil, false
	}
	return item, true
}

// backUpItem runs the item through its actions, hands it to the writer, and returns the
// additional items the actions named.
func (ru *run) backUpItem(ctx context.Context, id ItemID, entry string, item *unstructured.Unstructured) []ItemID {
	var additional []ItemID
	for _, action := range ru.registry.For(id.GroupResource) {
		res, err := action.Execute(ctx, item, ru.req.Backup)
		if res.Hooks != (HookCounts{}) {
			ru.mu.Lock()
			ru.hooks = ru.hooks.Add(res.Hooks)
			ru.mu.Unlock()
		}
		for _, note := range res.Notes {
			ru.log.WithField("item", id.String()).WithField("action", action.Name()).Info(note)
		}
		if err != nil {
			ru.itemError(id, fmt.Sprintf("action %s: %v", action.Name(), err))
			return nil
		}
		if res.Item != nil {
			item = res.Item
		}
		additional = append(additional, res.AdditionalItems...)
		for _, warning := range res.Warnings {
			ru.itemWarning(id, warning)
		}
		for _, message := range res.Errors {
			ru.itemError(id, message)
		}
		for i, opID := range res.OperationIDs {
			op := Operation{Action: action.Name(), OperationID: opID, Item: id, Started: ru.clock().Now()}
			if i == 0 {
				op.PostOperationItems = res.PostOperationItems // added once, whichever operation completes them
			}
			ru.mu.Lock()
			ru.operations = append(ru.operations, op)
			ru.mu.Unlock()
		}
	}
	data, err := json.Marshal(item.Object)
	if err != nil {
		ru.itemError(id, fmt.Sprintf("encoding the item: %v", err))
		return nil
	}
	ru.write(ctx, id, entry, data)
	return additional
}

// write hands an item's JSON to the archive writer; entry is its resource-list entry.
func (ru *run) write(ctx context.Context, id ItemID, entry string, data []byte) {
	select {
	case ru.out <- writtenItem{id: id, entry: entry, data: data}:
	case <-ctx.Done():
	}
}

func (ru *run) itemError(id ItemID, message string) {
	ru.mu.Lock()
	ru.results.Errors = append(ru.results.Errors, ItemResult{Item: id.String(), Message: message})
	ru.mu.Unlock()
	ru.log.WithField("item", id.String()).Error(message)
}

func (ru *run) itemWarning(id ItemID, message string) {
	ru.mu.Lock()
	ru.results.Warnings = append(ru.results.Warnings, ItemResult{Item: id.String(), Message: message})
	ru.mu.Unlock()
	ru.log.WithField("item", id.String()).Warn(message)
}

// recordResource adds a written item's entry to the resource list.
func (ru *run) recordResource(gr schema.GroupResource, entry string) {
	ru.mu.Lock()
	ru.resources[gr] = append(ru.resources[gr], entry)
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
