// Package restore holds Reconciler, which runs restores: the owner of a restore's ReadyToStart
// and InProgress phases (DESIGN.md section 9). The run itself is internal/restore's; the async
// operations of a restore with nowhere to store them are handed to the restore operations
// reconciler through Operations, passed in setup.go.
package restore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/failure"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/requester"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/validation"
)

// Reconciler runs restores (DESIGN.md section 9). It owns ReadyToStart and InProgress:
// it checks the restore again now (restore.Validate, the location reachable, the backup's commit
// marker in storage → FailedValidation), picks where the restore's files go, moves it to
// InProgress and runs it (internal/restore: the run owns the archive, its worker pool and the
// files end to end), and writes how it ended: Finalizing, FinalizingPartiallyFailed when items
// failed, Failed on a fatal error. The run lasts as long as the reconcile
// (MaxConcurrentReconciles = --concurrent-restores).
type Reconciler struct {
	client.Client
	// APIReader reads around the cache, where a stale phase would mislead.
	APIReader client.Reader
	Namespace string
	Runner    *restore.Runner
	Stores    stores.Stores
	Clock     clock.Clock
	Recorder  events.EventRecorder
	Gate      interface {
		Wait(ctx context.Context) error
	}
	ConcurrentRestores int
	// PhaseTimeout bounds how long a ReadyToStart restore waits for its storage.
	PhaseTimeout time.Duration
	// Requesters says whom a restore acts for: it writes as them (DESIGN.md section 15); nil
	// writes with the operator's own rights everywhere (tests of other behaviour).
	Requesters *requester.Resolver

	// Operations takes a run's async operations over for the restore operations reconciler
	// when the restore has no storage for its files, so no operations file (operations.Held,
	// shared with it through setup.go).
	Operations interface {
		Hold(uid types.UID, ops []backup.Operation)
	}

	// Files are the cancelled runs storing their files after their FinalizingCancelled write:
	// the restore finalizer ends such a restore only once they are stored (lifecycle.FileStores,
	// shared with it through setup.go).
	Files *lifecycle.FileStores

	// runs is what this process remembers of its runs (lifecycle.RunKind.EndRun, Orphaned).
	runs lifecycle.Runs[cairnv1.RestoreStatus]
}

// +kubebuilder:rbac:groups=cairn.dev,resources=restores,verbs=get;list;watch
// +kubebuilder:rbac:groups=cairn.dev,resources=restores/status,verbs=get;update;patch
// The resources a restore creates: config/rbac/resources_role.yaml (named, not "*").

// Reconcile starts a ReadyToStart restore and runs it; it fails an InProgress restore that no
// longer runs anywhere.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rs cairnv1.Restore
	if found, err := lifecycle.Fetch(ctx, r.Gate, r.Client, req, &rs); !found {
		return ctrl.Result{}, err
	}
	switch rs.Status.Phase {
	case cairnv1.RestorePhaseReadyToStart:
		return r.start(ctx, &rs)
	case cairnv1.RestorePhaseInProgress:
		return ctrl.Result{}, lifecycle.Restores.Orphaned(ctx, r.Client, r.APIReader, r.Clock, &r.runs, &rs)
	}
	return ctrl.Result{}, nil
}

// start moves a ReadyToStart restore on: cancelled or deleted → Failed; a problem with its
// spec, backup or location → FailedValidation; storage not reachable → a StorageReady=False
// condition, and Failed once that lasted --phase-timeout; else InProgress, and runs it.
func (r *Reconciler) start(ctx context.Context, rs *cairnv1.Restore) (ctrl.Result, error) {
	if _, _, ok := lifecycle.Restores.Cancellation(rs); ok {
		return ctrl.Result{}, lifecycle.Restores.EndBeforeStart(ctx, r.Client, r.Clock, r.Recorder, phases.OwnerRestore, rs)
	}
	facts, backupName, err := lifecycle.RestoreValidationFacts(ctx, r.APIReader, r.Namespace, rs)
	if err != nil {
		return ctrl.Result{}, err
	}
	problems := restore.Validate(rs, r.Namespace, facts)
	var writer dynamic.Interface
	if len(problems) == 0 {
		actAs, why, err := r.Requesters.For(ctx, rs)
		if err != nil {
			return ctrl.Result{}, err
		}
		switch {
		case why != "":
			problems = []string{why}
		case actAs != nil:
			if writer, err = r.Requesters.Writer(*actAs); err != nil {
				return ctrl.Result{}, fmt.Errorf("creating a client acting as %s: %w", actAs.Username, err)
			}
		}
	}
	var source, files *location.Store
	var filesLocation string
	if len(problems) == 0 {
		var problem error
		source, files, filesLocation, problem, err = r.openStores(ctx, rs, facts)
		switch {
		case failure.IsWaiting(err):
			return lifecycle.Restores.WaitForStorage(ctx, r.Client, r.Clock, rs, err, r.PhaseTimeout)
		case err != nil:
			return lifecycle.Restores.WaitForStorage(ctx, r.Client, r.Clock, rs, lifecycle.ToTenant(rs, r.Namespace, facts.Backup.Status.StorageLocation, err), r.PhaseTimeout)
		case errors.Is(problem, location.ErrConfig):
			problems = []string{lifecycle.ToTenant(rs, r.Namespace, facts.Backup.Status.StorageLocation, problem).Error()}
		case problem != nil:
			problems = []string{problem.Error()}
		}
	}
	now := metav1.NewTime(r.Clock.Now())
	if len(problems) > 0 {
		problems = validation.Cap(problems)
		return ctrl.Result{}, client.IgnoreNotFound(lifecycle.PatchRestoreStatus(ctx, r.Client, r.Clock, phases.OwnerRestore, rs, func(s *cairnv1.RestoreStatus) {
			s.Phase = cairnv1.RestorePhaseFailedValidation
			s.BackupName = backupName
			s.ValidationErrors = problems
			s.CompletionTimestamp = &now
		}))
	}

	runCtx, done := r.runs.Track(ctx, rs.UID)
	defer done()
	filesCondition := metav1.Condition{Type: cairnv1.RestoreConditionFilesStored, Status: metav1.ConditionUnknown, Reason: cairnv1.ReasonFilesStored,
		Message: fmt.Sprintf("the restore's log, results and resource list go to storage location %s", filesLocation), ObservedGeneration: rs.Generation, LastTransitionTime: now}
	if files == nil {
		filesCondition.Status, filesCondition.Reason = metav1.ConditionFalse, cairnv1.ReasonNoWritableLocation
		filesCondition.Message = fmt.Sprintf("storage location %s is ReadOnly and no default ReadWrite location is Available: the restore's log, results and resource list are not stored", facts.Backup.Status.StorageLocation)
	}
	if err := lifecycle.PatchRestoreStatus(ctx, r.Client, r.Clock, phases.OwnerRestore, rs, func(s *cairnv1.RestoreStatus) {
		s.Phase = cairnv1.RestorePhaseInProgress
		s.BackupName = backupName
		s.StorageLocation = filesLocation
		s.StartTimestamp = &now
		s.Progress = cairnv1.NewRestoreProgress(0, 0)
		meta.RemoveStatusCondition(&s.Conditions, cairnv1.RestoreConditionStorageReady)
		meta.SetStatusCondition(&s.Conditions, filesCondition)
		if source.Velero {
			meta.SetStatusCondition(&s.Conditions, metav1.Condition{
				Type: cairnv1.RestoreConditionArchiveVerified, Status: metav1.ConditionFalse, Reason: cairnv1.ReasonNoRecordedDigest,
				Message:            fmt.Sprintf("backup %s comes from storage location %s, which holds Velero's backups: Velero records no digest of its archives, so the archive is read to its end and checked as a gzip-compressed tar before anything is created, but it is not verified against a digest", backupName, facts.Backup.Status.StorageLocation),
				ObservedGeneration: rs.Generation, LastTransitionTime: now,
			})
		}
	}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	lifecycle.Restores.StopIfCancelled(&r.runs, rs) // cancelled between the read and the write
	r.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "Started", "Start", "Restore of backup %s started", backupName)
	return ctrl.Result{}, r.run(ctx, runCtx, rs, facts.Backup, source, files, writer)
}

// openStores opens the store of the backup's location (ReadOnly is fine) and checks that the
// backup is committed there, and picks where the restore's files go: the backup's location
// when it is ReadWrite, else the default location when it is ReadWrite and Available, else
// nowhere. problem is a reason the restore cannot run; err a failure that may pass.
func (r *Reconciler) openStores(ctx context.Context, rs *cairnv1.Restore, facts restore.ValidationFacts) (source, files *location.Store, filesLocation string, problem, err error) {
	b := facts.Backup
	var bsl *cairnv1.BackupStorageLocation
	for i := range facts.Locations {
		if facts.Locations[i].Name == b.Status.StorageLocation {
			bsl = &facts.Locations[i]
		}
	}
	if bsl.Status.Phase == "" {
		return nil, nil, "", nil, lifecycle.ErrLocationNotValidated
	}
	ctx, cancel := r.Stores.Bounded(ctx)
	defer cancel()
	source, err = r.Stores.Open(ctx, bsl)
	if errors.Is(err, location.ErrConfig) {
		return nil, nil, "", fmt.Errorf("opening storage location %s: %w", bsl.Name, err), nil
	}
	if err != nil {
		return nil, nil, "", nil, err
	}
	keys := source.Layout.Backup(rs.Namespace, b.Name)
	committed, err := source.Exists(ctx, keys.Metadata)
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("looking for the commit marker of backup %s: %w", b.Name, err)
	}
	if !committed {
		return nil, nil, "", fmt.Errorf("backup %s has no commit marker in storage location %s: it never completed there, or its data was removed, and it cannot be restored", b.Name, bsl.Name), nil
	}
	if bsl.Spec.AccessMode != cairnv1.AccessModeReadOnly {
		return source, source, bsl.Name, nil, nil
	}
	for i := range facts.Locations {
		d := &facts.Locations[i]
		if d.Spec.Default && d.Spec.AccessMode != cairnv1.AccessModeReadOnly && d.Status.Phase == cairnv1.StorageLocationPhaseAvailable {
			if files, err := r.Stores.Open(ctx, d); err == nil {
				return source, files, d.Name, nil, nil
			}
		}
	}
	return source, nil, "", nil, nil
}

// run runs the restore and writes how it ended.
func (r *Reconciler) run(ctx, runCtx context.Context, rs *cairnv1.Restore, b *cairnv1.Backup, source, files *location.Store, writer dynamic.Interface) error {
	var mu sync.Mutex // the progress and namespace-wait writes come from the run's goroutines
	live := rs.DeepCopy()
	write := func(mutate func(*cairnv1.RestoreStatus)) {
		mu.Lock()
		defer mu.Unlock()
		old := live.DeepCopy()
		mutate(&live.Status)
		// Only this run writes the status of an InProgress restore: no optimistic lock needed.
		if err := r.Status().Patch(ctx, live, client.MergeFrom(old)); err != nil {
			ctrl.LoggerFrom(ctx).Info("Could not write a running restore's status", "restore", lifecycle.ObjectName(rs), "error", err.Error())
		}
	}
	req := restore.Request{
		Restore: rs, OperatorNamespace: r.Namespace,
		Source: source, BackupKeys: source.Layout.Backup(rs.Namespace, b.Name), BackupLocation: b.Status.StorageLocation,
		UnverifiedArchive: source.Velero,
		Writer:            writer,
		OnProgress: func(done, total int64) {
			write(func(s *cairnv1.RestoreStatus) { s.Progress = cairnv1.NewRestoreProgress(done, total) })
		},
		OnNamespaceWait: func(message string) {
			now := metav1.NewTime(r.Clock.Now())
			c := metav1.Condition{Type: cairnv1.RestoreConditionNamespacesReady, Status: metav1.ConditionTrue, Reason: cairnv1.ReasonNamespacesReady,
				Message: "every target namespace is ready", ObservedGeneration: rs.Generation, LastTransitionTime: now}
			if message != "" {
				c.Status, c.Reason, c.Message = metav1.ConditionFalse, cairnv1.ReasonNamespaceTerminating, message
				r.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "WaitingForNamespace", "Restore", "Restore is %s", message)
			}
			write(func(s *cairnv1.RestoreStatus) { meta.SetStatusCondition(&s.Conditions, c) })
		},
	}
	if files != nil {
		req.Files, req.FilesKeys = files, files.Layout.Restore(rs.Namespace, rs.Name)
	}
	res := r.Runner.Run(runCtx, req)
	if res.Ending == restore.Interrupted {
		return nil // the manager is stopping: the restart recovery ends the restore
	}
	mu.Lock()
	rs = live
	mu.Unlock()
	if rs.Namespace != r.Namespace {
		// A team sees nothing of a location's configuration in its restore's status.
		if res.StorageFailure {
			res.FailureReason = fmt.Sprintf("reading backup %s failed: %s", b.Name, location.TenantMessage(b.Status.StorageLocation))
		}
		if res.FilesError != nil {
			res.FilesError = lifecycle.ToTenant(rs, r.Namespace, live.Status.StorageLocation, res.FilesError)
		}
	}
	if files == nil && len(res.Operations) > 0 && r.Operations != nil {
		// Nowhere to store them: the operations reconciler follows them from memory (a
		// restart loses them, and the restore then ends PartiallyFailed).
		r.Operations.Hold(rs.UID, res.Operations)
	}
	mutate := restoreEnding(res, rs.Generation, metav1.NewTime(r.Clock.Now()))
	if res.Ending == restore.Cancelled {
		return r.endCancelledRun(ctx, rs, res, mutate)
	}
	if res.Ending != restore.Failed {
		r.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "ItemsRestored", "Restore", "Restore handled %d of %d items: %d warnings, %d errors",
			res.ItemsRestored, res.TotalItems, res.Warnings, res.Errors)
	}
	return lifecycle.Restores.EndRun(ctx, r.Client, r.APIReader, r.Clock, &r.runs, rs, mutate, nil)
}

// endCancelledRun writes FinalizingCancelled for a run that stopped on a cancel — with no
// storage call before it, so a slow or hung storage service cannot hold a cancel — and then
// lets the run store its files (each call bounded). The restore finalizer, which may run
// meanwhile, ends the restore only once they are stored, and says whether they were.
func (r *Reconciler) endCancelledRun(ctx context.Context, rs *cairnv1.Restore, res *restore.Result, mutate func(*cairnv1.RestoreStatus)) error {
	r.Files.Hold(rs.UID)
	err := lifecycle.Restores.EndRun(ctx, r.Client, r.APIReader, r.Clock, &r.runs, rs, mutate, nil)
	_, failureReason := lifecycle.Restores.StopReasons(rs)
	r.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "Cancelled", "Cancel", "%s: its worker pool was stopped after %d of %d items; the objects it created stay",
		failureReason, res.ItemsRestored, res.TotalItems)
	filesErr := res.StoreFiles(ctx)
	if filesErr != nil && rs.Namespace != r.Namespace {
		// A team sees nothing of a location's configuration in its restore's status.
		filesErr = lifecycle.ToTenant(rs, r.Namespace, rs.Status.StorageLocation, filesErr)
	}
	r.Files.Release(rs.UID, filesErr)
	return err
}

// restoreEnding is the status write that ends a run: for a run that went through every item,
// WaitingForPluginOperations[PartiallyFailed] while operations its actions started run, else
// Finalizing[PartiallyFailed] (errors); FinalizingCancelled for a cancelled run; Failed with
// the reason for one that could not go on; the counts, and whether the files were stored.
func restoreEnding(res *restore.Result, generation int64, now metav1.Time) func(*cairnv1.RestoreStatus) {
	return func(s *cairnv1.RestoreStatus) {
		switch res.Ending {
		case restore.Cancelled:
			s.Phase = cairnv1.RestorePhaseFinalizingCancelled
		case restore.Failed:
			s.Phase = cairnv1.RestorePhaseFailed
			s.FailureReason = res.FailureReason
			s.CompletionTimestamp = &now
		default:
			// Waiting while an operation its actions started runs; PartiallyFailed when items
			// or operations failed.
			s.Phase = lifecycle.Restores.AfterRun(backup.AfterOperations(res.Errors > 0, res.Operations))
		}
		_, completed, failed := backup.OperationCounts(res.Operations)
		s.RestoreItemOperationsAttempted = int32(len(res.Operations))
		s.RestoreItemOperationsCompleted, s.RestoreItemOperationsFailed = int32(completed), int32(failed)
		s.Progress = cairnv1.NewRestoreProgress(res.ItemsRestored, res.TotalItems)
		s.Warnings, s.Errors = res.Warnings, res.Errors
		// A cancelled run stores its files after this write: the finalizer says whether it did.
		if c := meta.FindStatusCondition(s.Conditions, cairnv1.RestoreConditionFilesStored); c != nil && c.Status == metav1.ConditionUnknown && res.Ending != restore.Cancelled {
			meta.SetStatusCondition(&s.Conditions, lifecycle.FilesStoredCondition(*c, res.FilesError, generation, now))
		}
	}
}

// SetupWithManager registers the reconciler for restores in its phases, and the watch that
// cancels a running restore's context when it shows spec.cancel or a deletion timestamp.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.PhaseTimeout <= 0 {
		r.PhaseTimeout = lifecycle.DefaultPhaseTimeout
	}
	if r.Files == nil {
		r.Files = &lifecycle.FileStores{}
	}
	return lifecycle.Register("restore", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Restore{}, builder.WithPredicates(lifecycle.Restores.InRunPhases())).
		Watches(&cairnv1.Restore{}, lifecycle.Restores.RunWatch(&r.runs)).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: max(r.ConcurrentRestores, 1), RateLimiter: lifecycle.StorageRateLimiter()}),
		r)
}
