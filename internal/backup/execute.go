package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/clock"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

// DefaultStorageTimeout bounds each small storage call of a run (the side files, the log, the
// removal of a failed run's objects).
const DefaultStorageTimeout = 30 * time.Second

// DefaultProgressInterval is how often a run reports its progress, at most.
const DefaultProgressInterval = time.Second

// ErrCancelRequested is the cause to cancel a run's context with when the backup is cancelled
// (spec.cancel or a deletion): the run then stops at once and touches storage no more. A run
// whose context ends for any other cause (the manager stopping) is Interrupted.
var ErrCancelRequested = errors.New("backup cancel requested")

// Ending is how a run ended.
type Ending string

const (
	// Finished: every item was written and the side files and log were uploaded.
	Finished Ending = "Finished"
	// Failed: the run could not finish; the operations it started were cancelled and its log
	// uploaded where possible. Result.FailureReason says why; its partial objects are left for
	// the finalizer to remove.
	Failed Ending = "Failed"
	// Cancelled: the run stopped on ErrCancelRequested without another storage call; the
	// caller records the cancel and then calls Result.FinishCancelled.
	Cancelled Ending = "Cancelled"
	// Interrupted: the run's context ended for another cause (the manager is stopping); nothing
	// was written after that, and the restart recovery ends the backup.
	Interrupted Ending = "Interrupted"
)

// Result is what a run produced.
type Result struct {
	Ending Ending
	// FailureReason says why a Failed run failed.
	FailureReason string
	ItemsBackedUp int64
	TotalItems    int64
	// Warnings and Errors are the counts of the run's log.
	Warnings, Errors int32
	// Operations are the async operations the run's actions started.
	Operations []Operation
	// Hooks counts the hooks run while the items were backed up (the post hooks that wait
	// for volume copies are counted by their operations).
	Hooks HookCounts
	// Digest is the archive's SHA-256 and size as uploaded (Finished runs).
	Digest storage.ArchiveDigest

	// What FinishCancelled needs.
	runner *Runner
	req    Request
	log    *Log
	reg    *Registry
}

// Run runs one backup from the start of InProgress to its end: it discovers the cluster's
// resources, lists and streams the selected items into the archive on the backup's own worker
// pool, reports progress through req.OnProgress, and uploads the side files (resource list,
// results, operations) and the log. A failure ends the run Failed, its log uploaded; a cancel (ctx cancelled with ErrCancelRequested) ends it Cancelled at once, with no
// further storage call. Run never returns an error: how it ended is in the Result.
func (r *Runner) Run(ctx context.Context, req Request) *Result {
	if req.Progress == nil {
		req.Progress = &Progress{}
	}
	log := NewLog()
	res := &Result{runner: r, req: req, log: log}
	log.WithField("backup", req.Backup.Namespace+"/"+req.Backup.Name).WithField("storageLocation", req.LocationName).Info("Backup started")

	stopProgress := r.reportProgress(ctx, req)
	sel, resources, customResources, err := r.prepare(ctx, req, log)
	var out outcome
	if err == nil {
		res.reg = NewRegistry(customResources, r.ExtraActions...)
		out, err = r.stream(ctx, req, sel, resources, res.reg, log)
	}
	stopProgress()
	res.Operations, res.Hooks = out.Operations, out.Hooks
	res.ItemsBackedUp, res.TotalItems = req.Progress.Counts()
	switch {
	case stopped(ctx, res):
	case err != nil:
		r.failRun(ctx, res, err.Error())
	default:
		r.finishRun(ctx, res, out)
	}
	res.Warnings, res.Errors = log.Counts()
	return res
}

// stopped reports whether the run's context ended, and then sets how the run ended: Cancelled
// when a cancel ended it, else Interrupted. A run that stops touches storage no more.
func stopped(ctx context.Context, res *Result) bool {
	switch {
	case errors.Is(context.Cause(ctx), ErrCancelRequested):
		res.Ending = Cancelled
	case ctx.Err() != nil:
		res.Ending = Interrupted
	default:
		return false
	}
	return true
}

// prepare discovers what the run needs: the cluster's resources, the resources CRDs serve, its
// namespaces, and from them the backup's selection. API calls that fail transiently are retried.
func (r *Runner) prepare(ctx context.Context, req Request, log *Log) (Selection, []Resource, []CustomResource, error) {
	var lists []*metav1.APIResourceList
	err := r.retryTransient(ctx, func() error {
		var err error
		lists, err = r.Discovery.ServerPreferredResources()
		var partial *discovery.ErrGroupDiscoveryFailed
		if errors.As(err, &partial) && len(lists) > 0 {
			for gv, gerr := range partial.Groups {
				log.WithField("groupVersion", gv.String()).Warnf("Skipped an API group whose discovery failed: %v", gerr)
			}
			return nil
		}
		return err
	})
	if err != nil {
		return Selection{}, nil, nil, fmt.Errorf("discovering the cluster's resources: %w", err)
	}
	resources := ResourcesFromDiscovery(lists)

	var customResources []CustomResource
	if err := r.retryTransient(ctx, func() (err error) {
		customResources, err = CustomResources(ctx, r.Dynamic)
		return err
	}); err != nil {
		log.Warnf("Could not list the CRDs; custom resources are backed up without their CRDs: %v", err)
	}

	var namespaces []string
	if err := r.retryTransient(ctx, func() (err error) {
		namespaces, err = r.namespaceNames(ctx)
		return err
	}); err != nil {
		return Selection{}, nil, nil, fmt.Errorf("listing the cluster's namespaces: %w", err)
	}
	sel, warnings, err := NewSelection(req.Backup, req.OperatorNamespace, resources, namespaces)
	for _, w := range warnings {
		log.Warn(w)
	}
	return sel, resources, customResources, err
}

// namespaceNames lists the names of the cluster's namespaces, a page at a time.
func (r *Runner) namespaceNames(ctx context.Context) ([]string, error) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	var names []string
	opts := metav1.ListOptions{Limit: DefaultPageSize}
	for {
		list, err := r.Dynamic.Resource(gvr).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, ns := range list.Items {
			names = append(names, ns.GetName())
		}
		if list.GetContinue() == "" {
			return names, nil
		}
		opts.Continue = list.GetContinue()
	}
}

// finishRun uploads the side files and the log of a run whose items are all written; a failed
// upload fails the run.
func (r *Runner) finishRun(ctx context.Context, res *Result, out outcome) {
	req := res.req
	if err := r.putSideFiles(ctx, req, out); err != nil {
		if !stopped(ctx, res) {
			r.failRun(ctx, res, fmt.Sprintf("uploading to storage location %s: %v", req.LocationName, err))
		}
		return
	}
	res.Digest = out.Digest
	done, total := req.Progress.Counts()
	res.log.WithField("itemsBackedUp", done).WithField("totalItems", total).Info("Backup items written")
	if err := r.putLog(ctx, req, res.log); err != nil {
		if !stopped(ctx, res) {
			r.failRun(ctx, res, fmt.Sprintf("uploading the log to storage location %s: %v", req.LocationName, err))
		}
		return
	}
	res.Ending = Finished
}

// failRun ends a run Failed: the operations it started are cancelled and its log is uploaded
// where the store allows (bounded). Its other objects are left for the finalizer, which
// removes them (FinalizingFailed) with retries, whatever the storage does now.
func (r *Runner) failRun(ctx context.Context, res *Result, reason string) {
	res.Ending, res.FailureReason = Failed, reason
	res.log.Error("Backup failed: " + reason)
	res.Operations = r.cancelOperations(ctx, res, "the backup failed")
	_ = r.putLog(ctx, res.req, res.log)
}

// FinishCancelled does what a cancelled run leaves for after its cancel is recorded: the
// operations it started are cancelled (each call bounded) and its log, saying who asked, is
// uploaded (bounded). It returns the operations, marked failed with reason. Nothing here is
// needed for the backup to move on: the finalizer removes the data whatever happens here.
func (res *Result) FinishCancelled(ctx context.Context, reason, requestedBy string) ([]Operation, error) {
	r := res.runner
	res.log.WithField("requestedBy", requestedBy).WithField("itemsBackedUp", res.ItemsBackedUp).WithField("totalItems", res.TotalItems).
		Warn("Backup cancelled while running: the worker pool and the upload were stopped")
	ops := r.cancelOperations(ctx, res, reason)
	return ops, r.putLog(ctx, res.req, res.log)
}

// cancelOperations cancels the operations a run started, saying so in its log.
func (r *Runner) cancelOperations(ctx context.Context, res *Result, reason string) []Operation {
	if len(res.Operations) == 0 || res.reg == nil {
		return res.Operations
	}
	ops := CancelOperations(ctx, res.Operations, res.reg, res.req.Backup, r.clock().Now(), reason)
	for _, op := range ops {
		res.log.WithField("operation", op.OperationID).WithField("action", op.Action).Info("Operation cancelled: " + op.Error)
	}
	return ops
}

// putSideFiles uploads the resource list, the results and, when there are any, the operations,
// each call bounded.
func (r *Runner) putSideFiles(ctx context.Context, req Request, out outcome) error {
	objects := []struct {
		key   string
		value any
	}{{req.Keys.ResourceList, out.ResourceList}, {req.Keys.Results, out.Results}}
	for _, o := range objects {
		data, err := GzipJSON(o.value)
		if err != nil {
			return err
		}
		if err := r.storageCall(ctx, func(ctx context.Context) error { return req.Store.Put(ctx, o.key, bytes.NewReader(data)) }); err != nil {
			return err
		}
	}
	if len(out.Operations) == 0 {
		return nil
	}
	return r.storageCall(ctx, func(ctx context.Context) error {
		return PutOperations(ctx, req.Store, req.Keys.ItemOperations, out.Operations)
	})
}

// putLog uploads the run's log so far, bounded.
func (r *Runner) putLog(ctx context.Context, req Request, log *Log) error {
	data, err := log.Gzipped()
	if err != nil {
		return err
	}
	return r.storageCall(ctx, func(ctx context.Context) error { return req.Store.Put(ctx, req.Keys.Logs, bytes.NewReader(data)) })
}

// storageCall runs one small storage call bounded by the storage timeout.
func (r *Runner) storageCall(ctx context.Context, f func(context.Context) error) error {
	return StorageCall(ctx, r.StorageTimeout, f)
}

// StorageCall runs one small storage call of a backup or restore run bounded by timeout
// (DefaultStorageTimeout when 0).
func StorageCall(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	if timeout <= 0 {
		timeout = DefaultStorageTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(ctx)
}

// reportProgress tells req.OnProgress the counts at most once per ProgressInterval, when they
// changed, until stopped.
func (r *Runner) reportProgress(ctx context.Context, req Request) (stop func()) {
	return ReportProgress(ctx, r.clock(), r.ProgressInterval, req.Progress.Counts, req.OnProgress)
}

// ReportProgress calls report with counts() at most once per interval (DefaultProgressInterval
// when 0), when they changed, until stopped: the one progress reporter of backup and restore
// runs. A nil report reports nothing.
func ReportProgress(ctx context.Context, clk clock.Clock, interval time.Duration, counts func() (done, total int64), report func(done, total int64)) (stop func()) {
	if report == nil {
		return func() {}
	}
	if interval <= 0 {
		interval = DefaultProgressInterval
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var lastDone, lastTotal int64 = -1, -1
		for {
			select {
			case <-ctx.Done():
				return
			case <-clk.After(interval):
			}
			d, t := counts()
			if d != lastDone || t != lastTotal {
				lastDone, lastTotal = d, t
				report(d, t)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// requestLabel is how a run's request names its backup.
func requestLabel(b *cairnv1.Backup) string { return b.Namespace + "/" + b.Name }
