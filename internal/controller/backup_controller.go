package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
)

// DefaultProgressInterval is how often a running backup's progress is written, at most.
const DefaultProgressInterval = time.Second

// cancelPollInterval is how often a running backup looks for spec.cancel or a deletion in the
// cache (an in-memory read): a cancel stops the worker pool within this much plus the time the
// workers take to notice.
const cancelPollInterval = 200 * time.Millisecond

// errCancelRequested is the cause of a running backup's cancelled context.
var errCancelRequested = errors.New("backup cancel requested")

// FailureReasonRestarted is the failureReason of a backup that was running when the operator
// stopped.
const FailureReasonRestarted = "the operator restarted during the backup"

// BackupReconciler runs backups (DESIGN.md section 4). It owns ReadyToStart and InProgress: it
// checks the storage location (→ FailedValidation), moves the backup to InProgress, runs it to
// the end on the backup's own worker pool inside the reconcile (MaxConcurrentReconciles =
// --concurrent-backups), and hands it on: WaitingForPluginOperations[PartiallyFailed] when
// async operations are pending, else Finalizing[PartiallyFailed]; Failed on a fatal error.
type BackupReconciler struct {
	client.Client
	// APIReader reads around the cache, where a stale phase would mislead.
	APIReader client.Reader
	Namespace string
	Runner    *backup.Runner
	// Registry finds the action of an operation to cancel.
	Registry  *backup.Registry
	Discovery discovery.DiscoveryInterface
	// Dynamic deletes what a backup's async operations created.
	Dynamic  dynamic.Interface
	stores   stores
	Clock    clock.Clock
	Recorder events.EventRecorder
	Gate     interface {
		Wait(ctx context.Context) error
	}
	// ConcurrentBackups is MaxConcurrentReconciles.
	ConcurrentBackups int
	// ProgressInterval is how often progress is written, at most.
	ProgressInterval time.Duration

	// unwritten holds the status write that ends a run and could not be written, for the next
	// reconcile: it finds the backup still InProgress and must write this, not mistake the
	// backup for one a restart interrupted.
	unwritten uidMap[func(*cairnv1.BackupStatus)]
}

// maxEndRunAttempts bounds the retries of a run's last status write on conflicts.
const maxEndRunAttempts = 5

// endRun writes the status that ends a run. Someone else's write meanwhile (a label, an
// annotation, a cancel) makes the optimistic lock fail: the write is retried on the fresh
// object, and a cancel seen there wins when onCancel is given. A write that still fails is kept
// for the next reconcile (see orphaned).
func (r *BackupReconciler) endRun(ctx context.Context, b *cairnv1.Backup, mutate func(*cairnv1.BackupStatus), onCancel func() error) error {
	for attempt := 1; ; attempt++ {
		err := patchBackupStatus(ctx, r.Client, r.Clock, b, mutate)
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) || attempt == maxEndRunAttempts {
			r.unwritten.set(b.UID, mutate)
			return err
		}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			r.unwritten.set(b.UID, mutate)
			return err
		}
		if b.Status.Phase != cairnv1.BackupPhaseInProgress {
			return nil
		}
		if _, _, cancelled := cancellation(b); cancelled && onCancel != nil {
			return onCancel()
		}
	}
}

// +kubebuilder:rbac:groups=cairn.dev,resources=backups,verbs=get;list;watch
// +kubebuilder:rbac:groups=cairn.dev,resources=backups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=*,resources=*,verbs=get;list

// Reconcile starts a ReadyToStart backup and runs it; it fails an InProgress backup that no
// longer runs anywhere.
func (r *BackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.Gate.Wait(ctx); err != nil {
		return ctrl.Result{}, err
	}
	var b cairnv1.Backup
	if err := r.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	switch b.Status.Phase {
	case cairnv1.BackupPhaseReadyToStart:
		return r.start(ctx, &b)
	case cairnv1.BackupPhaseInProgress:
		return r.orphaned(ctx, &b)
	}
	return ctrl.Result{}, nil
}

// start moves a ReadyToStart backup on: cancelled → Failed; bad location → FailedValidation;
// else InProgress, and runs it.
func (r *BackupReconciler) start(ctx context.Context, b *cairnv1.Backup) (ctrl.Result, error) {
	now := metav1.NewTime(r.Clock.Now())
	if reason, failureReason, ok := cancellation(b); ok {
		message := failureReason + " before it started"
		if err := patchBackupStatus(ctx, r.Client, r.Clock, b, func(s *cairnv1.BackupStatus) {
			cancelledStatus(s, b.Generation, reason, failureReason, message, now)
		}); err != nil {
			return ctrl.Result{}, err
		}
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Cancelled", "Cancel", message)
		return ctrl.Result{}, nil
	}
	bsl, problem, err := r.usableLocation(ctx, b)
	if err != nil {
		return ctrl.Result{}, err
	}
	if errors.Is(problem, errNotValidatedYet) {
		// A location created a moment ago: wait for its first validation rather than fail.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	var store *location.Store
	if problem == nil {
		if store, problem, err = r.openFor(ctx, b, bsl); err != nil {
			return ctrl.Result{}, err
		}
	}
	if problem != nil {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "FailedValidation", "Start", "Backup cannot start: %s", problem)
		return ctrl.Result{}, patchBackupStatus(ctx, r.Client, r.Clock, b, func(s *cairnv1.BackupStatus) {
			s.Phase = cairnv1.BackupPhaseFailedValidation
			s.ValidationErrors = []string{problem.Error()}
			s.CompletionTimestamp = &now
		})
	}
	expiration := metav1.NewTime(now.Add(b.Spec.GetTTL()))
	if err := patchBackupStatus(ctx, r.Client, r.Clock, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseInProgress
		s.StartTimestamp = &now
		s.Expiration = &expiration
		s.FormatVersion = archive.FormatVersion
		s.Progress = cairnv1.NewBackupProgress(0, 0)
	}); err != nil {
		return ctrl.Result{}, err
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Started", "Start", "Backup started")
	return ctrl.Result{}, r.run(ctx, b, bsl, store)
}

// openFor opens the store a backup will write to. problem says why it must not: the location's
// configuration is wrong, or it already holds a committed backup of that namespace and name
// made by another Backup object (one deleted with cairn.dev/keep-data, or another cluster's),
// which writing would overwrite. err is a failure that may pass.
func (r *BackupReconciler) openFor(ctx context.Context, b *cairnv1.Backup, bsl *cairnv1.BackupStorageLocation) (store *location.Store, problem, err error) {
	ctx, cancel := r.stores.bounded(ctx)
	defer cancel()
	store, err = r.stores.open(ctx, bsl)
	if errors.Is(err, location.ErrConfig) {
		return nil, fmt.Errorf("opening storage location %s: %w", bsl.Name, err), nil
	}
	if err != nil {
		return nil, nil, err
	}
	meta, err := storage.ReadMetadata(ctx, store, store.Layout.Backup(b.Namespace, b.Name))
	switch {
	case errors.Is(err, storage.ErrNotCommitted):
		return store, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("checking storage location %s for an earlier backup named %s: %w", bsl.Name, qualifiedName(b), err)
	case meta.UID == string(b.UID):
		return store, nil, nil
	}
	return nil, fmt.Errorf("storage location %s already holds a backup named %s, made by another Backup object (UID %s); writing this one would overwrite it: choose another name, or delete that data first",
		bsl.Name, qualifiedName(b), meta.UID), nil
}

// errNotValidatedYet: the location exists but was not validated yet.
var errNotValidatedYet = errors.New("the storage location has not been validated yet")

// usableLocation finds the backup's storage location. problem says what keeps it from being
// used (errNotValidatedYet for a location still waiting for its first validation); err is a
// failure to read.
func (r *BackupReconciler) usableLocation(ctx context.Context, b *cairnv1.Backup) (bsl *cairnv1.BackupStorageLocation, problem, err error) {
	var locations cairnv1.BackupStorageLocationList
	if err := r.List(ctx, &locations, client.InNamespace(r.Namespace)); err != nil {
		return nil, nil, err
	}
	name := b.Status.StorageLocation
	if name == "" {
		name = b.Spec.StorageLocation
	}
	bsl, problem = location.Resolve(locations.Items, r.Namespace, name)
	switch {
	case problem != nil:
		return nil, problem, nil
	case bsl.Spec.AccessMode == cairnv1.AccessModeReadOnly:
		return nil, fmt.Errorf("storage location %s is ReadOnly", bsl.Name), nil
	case bsl.Status.Phase == "":
		return nil, errNotValidatedYet, nil
	case bsl.Status.Phase != cairnv1.StorageLocationPhaseAvailable:
		return nil, fmt.Errorf("storage location %s is not Available: %s", bsl.Name, bsl.Status.Message), nil
	}
	return bsl, nil, nil
}

// run runs an InProgress backup to the end of InProgress.
func (r *BackupReconciler) run(ctx context.Context, b *cairnv1.Backup, bsl *cairnv1.BackupStorageLocation, store *location.Store) error {
	log := backup.NewLog()
	log.WithField("backup", qualifiedName(b)).WithField("storageLocation", bsl.Name).Info("Backup started")
	keys := store.Layout.Backup(b.Namespace, b.Name)
	resources, err := r.discover(log)
	if err != nil {
		return r.fail(ctx, b, log, store, nil, err.Error())
	}
	customResources, err := backup.CustomResources(ctx, r.Runner.Dynamic)
	if err != nil {
		log.Warnf("Could not list the CRDs; custom resources are backed up without their CRDs: %v", err)
	}
	var namespaces corev1.NamespaceList
	if err := r.List(ctx, &namespaces); err != nil {
		return err
	}
	clusterNamespaces := make([]string, 0, len(namespaces.Items))
	for _, ns := range namespaces.Items {
		clusterNamespaces = append(clusterNamespaces, ns.Name)
	}

	progress := &backup.Progress{}
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	stopWatching := r.watchCancel(runCtx, b, stopRun)
	stopProgress := r.reportProgress(runCtx, b, progress)
	outcome, runErr := r.Runner.Run(runCtx, backup.Request{
		Backup: b, OperatorNamespace: r.Namespace, Resources: resources, CustomResources: customResources, ClusterNamespaces: clusterNamespaces,
		Store: store, Keys: keys, Log: log, Progress: progress,
	})
	stopWatching()
	stopProgress()
	// The progress writes moved the object on: the final write starts from what is stored.
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
		return err
	}
	onCancel := func() error { return r.cancelled(ctx, b, log, store, outcome.Operations, progress) }
	if _, _, cancelled := cancellation(b); cancelled {
		return onCancel()
	}
	if runErr != nil {
		return r.fail(ctx, b, log, store, outcome.Operations, fmt.Sprintf("backing up items: %v", runErr))
	}

	sidecarCtx, cancelSidecars := r.stores.bounded(ctx)
	defer cancelSidecars()
	if err := r.putSidecars(sidecarCtx, store, keys, outcome); err != nil {
		return r.fail(ctx, b, log, store, outcome.Operations, fmt.Sprintf("uploading to storage location %s: %v", bsl.Name, err))
	}
	done, total := progress.Counts()
	log.WithField("itemsBackedUp", done).WithField("totalItems", total).Info("Backup items written")
	warnings, errs := log.Counts()
	if err := r.putLogs(sidecarCtx, store, keys, log); err != nil {
		return r.fail(ctx, b, log, store, outcome.Operations, fmt.Sprintf("uploading the log to storage location %s: %v", bsl.Name, err))
	}
	next := nextAfterInProgress(errs > 0, len(outcome.Operations) > 0)
	return r.endRun(ctx, b, func(s *cairnv1.BackupStatus) {
		s.Phase = next
		s.Progress = cairnv1.NewBackupProgress(done, total)
		s.Warnings, s.Errors = warnings, errs
		s.BackupItemOperationsAttempted = int32(len(outcome.Operations))
	}, onCancel)
}

// watchCancel cancels the run (cause errCancelRequested) once the backup shows spec.cancel or
// a deletion timestamp, until stopped. It polls the cache, which costs no API call: the backup
// reconciler is busy with this backup for the whole run, so its own events cannot reach it.
func (r *BackupReconciler) watchCancel(ctx context.Context, b *cairnv1.Backup, cancel context.CancelCauseFunc) (stop func()) {
	ctx, stopWatch := context.WithCancel(ctx)
	done := make(chan struct{})
	key := client.ObjectKeyFromObject(b)
	go func() {
		defer close(done)
		for {
			var current cairnv1.Backup
			if err := r.Get(ctx, key, &current); err == nil {
				if _, _, cancelled := cancellation(&current); cancelled {
					cancel(errCancelRequested)
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-r.Clock.After(cancelPollInterval):
			}
		}
	}()
	return func() {
		stopWatch()
		<-done
	}
}

// cancelled ends a run that was cancelled (spec.cancel or a deletion): the operations it
// started are cancelled, its log says who asked and when, and it goes to FinalizingCancelled,
// where the finalizer removes its data. The worker pool has stopped when this runs.
func (r *BackupReconciler) cancelled(ctx context.Context, b *cairnv1.Backup, log *backup.Log, store *location.Store, started []backup.Operation, progress *backup.Progress) error {
	reason, failureReason, _ := cancellation(b)
	done, total := progress.Counts()
	log.WithField("requestedBy", cancelRequester(b)).WithField("itemsBackedUp", done).WithField("totalItems", total).
		Warn("Backup cancelled while running: the worker pool and the upload were stopped")
	ops := r.cancelStarted(ctx, b, log, started, failureReason)
	keys := store.Layout.Backup(b.Namespace, b.Name)
	putCtx, cancel := r.stores.bounded(ctx)
	defer cancel()
	if err := r.putLogs(putCtx, store, keys, log); err != nil {
		// The finalizer writes the cancel into the log again when it cleans up.
		ctrl.LoggerFrom(ctx).Info("Could not upload the log of a cancelled backup", "backup", qualifiedName(b), "error", err.Error())
	}
	warnings, errs := log.Counts()
	_, _, failed := backup.OperationCounts(ops)
	if err := r.endRun(ctx, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseFinalizingCancelled
		s.Progress = cairnv1.NewBackupProgress(done, total)
		s.Warnings, s.Errors = warnings, errs
		s.BackupItemOperationsAttempted = int32(len(ops))
		s.BackupItemOperationsFailed = int32(failed)
	}, nil); err != nil {
		return err
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Cancelling", "Cancel", "%s while it ran (%s); removing its data", failureReason, reason)
	return nil
}

// nextAfterInProgress is the phase a backup goes to when its items are written.
func nextAfterInProgress(hadErrors, operationsPending bool) cairnv1.BackupPhase {
	switch {
	case operationsPending && hadErrors:
		return cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed
	case operationsPending:
		return cairnv1.BackupPhaseWaitingForPluginOperations
	case hadErrors:
		return cairnv1.BackupPhaseFinalizingPartiallyFailed
	}
	return cairnv1.BackupPhaseFinalizing
}

// discover lists the cluster's resources at their preferred versions. Groups whose discovery
// failed are skipped with a warning.
func (r *BackupReconciler) discover(log *backup.Log) ([]backup.Resource, error) {
	lists, err := r.Discovery.ServerPreferredResources()
	if err != nil {
		var partial *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &partial) || len(lists) == 0 {
			return nil, fmt.Errorf("discovering the cluster's resources: %w", err)
		}
		for gv, gerr := range partial.Groups {
			log.WithField("groupVersion", gv.String()).Warnf("Skipped an API group whose discovery failed: %v", gerr)
		}
	}
	return backup.ResourcesFromDiscovery(lists), nil
}

// putSidecars uploads the resource list, the results and, when there are any, the operations.
func (r *BackupReconciler) putSidecars(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys, outcome backup.Outcome) error {
	objects := []struct {
		key   string
		value any
	}{{keys.ResourceList, outcome.ResourceList}, {keys.Results, outcome.Results}}
	if len(outcome.Operations) > 0 {
		objects = append(objects, struct {
			key   string
			value any
		}{keys.ItemOperations, outcome.Operations})
	}
	for _, o := range objects {
		data, err := backup.GzipJSON(o.value)
		if err != nil {
			return err
		}
		if err := store.Put(ctx, o.key, bytes.NewReader(data)); err != nil {
			return err
		}
	}
	return nil
}

func (r *BackupReconciler) putLogs(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys, log *backup.Log) error {
	data, err := log.Gzipped()
	if err != nil {
		return err
	}
	return store.Put(ctx, keys.Logs, bytes.NewReader(data))
}

// cancelStarted cancels the async operations a run started, saying so in the backup's log, and
// returns them marked failed with reason.
func (r *BackupReconciler) cancelStarted(ctx context.Context, b *cairnv1.Backup, log *backup.Log, started []backup.Operation, reason string) []backup.Operation {
	if len(started) == 0 {
		return nil
	}
	ctx, cancel := r.stores.bounded(ctx)
	defer cancel()
	ops := backup.CancelOperations(ctx, started, r.Registry, b, r.Clock.Now(), reason)
	for _, op := range ops {
		log.WithField("operation", op.OperationID).WithField("action", op.Action).Info("Operation cancelled: " + op.Error)
	}
	return ops
}

// fail ends a backup in Failed, cancelling the operations it started, keeping its log where
// the store allows and removing whatever else it wrote.
func (r *BackupReconciler) fail(ctx context.Context, b *cairnv1.Backup, log *backup.Log, store *location.Store, started []backup.Operation, reason string) error {
	log.Error("Backup failed: " + reason)
	r.cancelStarted(ctx, b, log, started, "the backup failed")
	storeCtx, cancel := r.stores.bounded(ctx)
	keys := store.Layout.Backup(b.Namespace, b.Name)
	removePartialBackup(storeCtx, store, keys)
	_ = r.putLogs(storeCtx, store, keys, log)
	cancel()
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "Failed", "Run", "Backup failed: %s", reason)
	now := metav1.NewTime(r.Clock.Now())
	warnings, errs := log.Counts()
	return r.endRun(ctx, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseFailed
		s.FailureReason = reason
		s.CompletionTimestamp = &now
		s.Warnings, s.Errors = warnings, errs
	}, nil)
}

// removePartialBackup deletes every object of a backup but its log.
func removePartialBackup(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys) {
	for _, key := range []string{keys.Metadata, keys.Archive, keys.ResourceList, keys.Results, keys.ItemOperations} {
		_ = store.Delete(ctx, key)
	}
}

// reportProgress writes the backup's progress at most once per ProgressInterval until stopped.
func (r *BackupReconciler) reportProgress(ctx context.Context, b *cairnv1.Backup, p *backup.Progress) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var lastDone, lastTotal int64 = -1, -1
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.Clock.After(r.ProgressInterval):
			}
			d, t := p.Counts()
			if d == lastDone && t == lastTotal {
				continue
			}
			lastDone, lastTotal = d, t
			current := b.DeepCopy()
			patch := client.MergeFrom(current.DeepCopy())
			current.Status.Progress = cairnv1.NewBackupProgress(d, t)
			if err := r.Status().Patch(ctx, current, patch); err != nil && ctx.Err() == nil {
				ctrl.LoggerFrom(ctx).V(1).Info("Could not write backup progress", "error", err.Error())
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// orphaned ends an InProgress backup that this process is not running: the process that ran
// it stopped. The API server is asked, not the cache, which may still show InProgress for a
// backup that this process just finished.
func (r *BackupReconciler) orphaned(ctx context.Context, b *cairnv1.Backup) (ctrl.Result, error) {
	var fresh cairnv1.Backup
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(b), &fresh); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if fresh.Status.Phase != cairnv1.BackupPhaseInProgress {
		return ctrl.Result{}, nil
	}
	// A run of this process whose last write failed: write it now.
	if mutate, ok := r.unwritten.take(fresh.UID); ok {
		return ctrl.Result{}, r.endRun(ctx, &fresh, mutate, nil)
	}
	return ctrl.Result{}, endInterruptedRun(ctx, r.Client, r.stores, r.Dynamic, &fresh, r.Clock)
}

// afterInterruptedRun is where a backup goes that was InProgress when the operator stopped: a
// cancelled (or deleted) one is cleaned up as cancelled, so a cancel is never lost; any other
// fails.
func afterInterruptedRun(b *cairnv1.Backup) (cairnv1.BackupPhase, string) {
	if _, _, cancelled := cancellation(b); cancelled {
		return cairnv1.BackupPhaseFinalizingCancelled, ""
	}
	return cairnv1.BackupPhaseFailed, FailureReasonRestarted
}

// endInterruptedRun moves on a backup that was InProgress when the operator stopped (see
// afterInterruptedRun). A failed one has its partial uploads and snapshots removed and keeps
// its log; a cancelled one is cleaned up by the finalizer.
func endInterruptedRun(ctx context.Context, c client.Client, st stores, dyn dynamic.Interface, b *cairnv1.Backup, clk clock.PassiveClock) error {
	next, failureReason := afterInterruptedRun(b)
	if next == cairnv1.BackupPhaseFailed {
		storeCtx, cancel := st.bounded(ctx)
		if store, err := st.forBackup(storeCtx, b); err == nil {
			removePartialBackup(storeCtx, store, store.Layout.Backup(b.Namespace, b.Name))
		}
		if dyn != nil {
			_, _ = backup.DeleteSnapshots(storeCtx, dyn, b.UID)
		}
		cancel()
	}
	t := metav1.NewTime(clk.Now())
	return patchBackupStatus(ctx, c, clk, b, func(s *cairnv1.BackupStatus) {
		s.Phase = next
		if next == cairnv1.BackupPhaseFailed {
			s.FailureReason = failureReason
			s.CompletionTimestamp = &t
		}
	})
}

// endInterruptedBackups is the restart-recovery step for InProgress backups (DESIGN.md
// section 7): each fails, with its partial uploads removed, or, when it was cancelled or
// deleted, goes to FinalizingCancelled.
func endInterruptedBackups(c client.Client, st stores, dyn dynamic.Interface, clk clock.PassiveClock) RecoveryStep {
	return RecoveryStep{Name: "end-interrupted-backups", Run: func(ctx context.Context) error {
		var list cairnv1.BackupList
		if err := c.List(ctx, &list); err != nil {
			return err
		}
		for i := range list.Items {
			if b := &list.Items[i]; b.Status.Phase == cairnv1.BackupPhaseInProgress {
				if err := endInterruptedRun(ctx, c, st, dyn, b, clk); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("ending backup %s: %w", qualifiedName(b), err)
				}
			}
		}
		return nil
	}}
}

// SetupWithManager registers the reconciler for backups in its phases.
func (r *BackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	owned := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		b, ok := obj.(*cairnv1.Backup)
		return ok && (b.Status.Phase == cairnv1.BackupPhaseReadyToStart || b.Status.Phase == cairnv1.BackupPhaseInProgress)
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("backup").
		For(&cairnv1.Backup{}, builder.WithPredicates(owned)).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: r.ConcurrentBackups, RateLimiter: storageRateLimiter()}).
		Complete(r)
}
