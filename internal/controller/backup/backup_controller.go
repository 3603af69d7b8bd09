// Package backup holds Reconciler, which runs backups: the owner of a backup's ReadyToStart and
// InProgress phases (DESIGN.md section 4). The run itself is internal/backup's; what it shares
// with the finalizer (the cancelled runs whose log upload is in flight) is passed in setup.go.
package backup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

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
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/failure"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/requester"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/validation"
)

// Reconciler runs backups (DESIGN.md section 4). It owns ReadyToStart and InProgress: it
// checks the storage location and the tenancy rule again (→ FailedValidation), moves the backup
// to InProgress and starts its run (internal/backup: the run owns its discovery, worker pool,
// archive, side files, log and progress end to end), observes how the run ended and writes it:
// WaitingForPluginOperations[PartiallyFailed] when async operations are pending, else
// Finalizing[PartiallyFailed]; FinalizingCancelled when cancelled; Failed on a fatal error. The
// run lasts as long as the reconcile (MaxConcurrentReconciles = --concurrent-backups); a cancel
// reaches it through a watch event, which cancels its context.
type Reconciler struct {
	client.Client
	// APIReader reads around the cache, where a stale phase would mislead.
	APIReader client.Reader
	Namespace string
	Runner    *backup.Runner
	Stores    stores.Stores
	Clock     clock.Clock
	Recorder  events.EventRecorder
	Gate      interface {
		Wait(ctx context.Context) error
	}
	// ConcurrentBackups is MaxConcurrentReconciles.
	ConcurrentBackups int
	// Requesters says whom a backup acts for: it reads only what they may read (DESIGN.md
	// section 15); nil acts for the operator everywhere (tests of other behaviour).
	Requesters *requester.Resolver
	// PhaseTimeout bounds how long a ReadyToStart backup waits for its storage.
	PhaseTimeout time.Duration
	// DefaultBackupTTL is the ttl of a backup without spec.ttl (--default-backup-ttl).
	DefaultBackupTTL time.Duration
	// Logs is told while a cancelled run's log upload is in flight, so that the finalizer
	// appends to that log only after it: setup.go passes both the same lifecycle.LogUploads.
	Logs interface {
		Hold(uid types.UID)
		Release(uid types.UID)
	}

	// runs is what this process remembers of its runs (lifecycle.RunKind.EndRun, Orphaned).
	runs lifecycle.Runs[cairnv1.BackupStatus]
}

// +kubebuilder:rbac:groups=cairn.dev,resources=backups,verbs=get;list;watch
// +kubebuilder:rbac:groups=cairn.dev,resources=backups/status,verbs=get;update;patch
// The resources a backup reads: config/rbac/resources_role.yaml (named, not "*").

// Reconcile starts a ReadyToStart backup and runs it; it fails an InProgress backup that no
// longer runs anywhere.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b cairnv1.Backup
	if found, err := lifecycle.Fetch(ctx, r.Gate, r.Client, req, &b); !found {
		return ctrl.Result{}, err
	}
	switch b.Status.Phase {
	case cairnv1.BackupPhaseReadyToStart:
		return r.start(ctx, &b)
	case cairnv1.BackupPhaseInProgress:
		return ctrl.Result{}, lifecycle.Backups.Orphaned(ctx, r.Client, r.APIReader, r.Clock, &r.runs, &b)
	}
	return ctrl.Result{}, nil
}

// start moves a ReadyToStart backup on: cancelled → Failed; bad location or tenancy →
// FailedValidation; storage not reachable → a StorageReady=False condition saying why, and
// Failed once that lasted --phase-timeout (the slot is freed); else InProgress, and runs it.
func (r *Reconciler) start(ctx context.Context, b *cairnv1.Backup) (ctrl.Result, error) {
	now := metav1.NewTime(r.Clock.Now())
	if _, _, ok := lifecycle.Backups.Cancellation(b); ok {
		return ctrl.Result{}, lifecycle.Backups.EndBeforeStart(ctx, r.Client, r.Clock, r.Recorder, phases.OwnerBackup, b)
	}
	bsl, problem, err := r.usableLocation(ctx, b)
	if err != nil {
		return ctrl.Result{}, err
	}
	if failure.IsWaiting(problem) {
		// A location created a moment ago: wait for its first validation rather than fail.
		return lifecycle.Backups.WaitForStorage(ctx, r.Client, r.Clock, b, problem, r.PhaseTimeout)
	}
	if problem == nil {
		// The tenancy rule, the spec and the location's limits, checked again now: the queue
		// checked them when the backup was queued, which may be long ago. The location was
		// resolved above.
		facts := validation.LimitFacts{DefaultTTL: r.DefaultBackupTTL}
		if b.Namespace != r.Namespace { // an administrator's backup is not limited by its location
			var ns corev1.Namespace
			// A namespace gone has no labels: a selector that needs one refuses the backup.
			if err := r.Get(ctx, client.ObjectKey{Name: b.Namespace}, &ns); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("reading namespace %s: %w", b.Namespace, err)
			}
			facts.NamespaceLabels = ns.Labels
		}
		resolved := bsl.DeepCopy()
		resolved.Spec.Default = true
		if errs, _ := validation.Backup(b, r.Namespace, []cairnv1.BackupStorageLocation{*resolved}, facts); len(errs) > 0 {
			problem = errors.New(strings.Join(errs, "; "))
		}
	}
	var actAs *authenticationv1.UserInfo
	if problem == nil {
		var why string
		if actAs, why, err = r.Requesters.For(ctx, b); err != nil {
			return ctrl.Result{}, err
		}
		if why != "" {
			problem = errors.New(why)
		}
	}
	var store *location.Store
	if problem == nil {
		store, problem, err = r.openFor(ctx, b, bsl)
		if err != nil {
			ctrl.LoggerFrom(ctx).Info("Backup waits for its storage location", "backup", lifecycle.ObjectName(b), "error", err.Error())
			return lifecycle.Backups.WaitForStorage(ctx, r.Client, r.Clock, b, lifecycle.ToTenant(b, r.Namespace, bsl.Name, err), r.PhaseTimeout)
		}
		if errors.Is(problem, location.ErrConfig) {
			problem = lifecycle.ToTenant(b, r.Namespace, bsl.Name, problem)
		}
	}
	if problem != nil {
		return ctrl.Result{}, lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerBackup, b, func(s *cairnv1.BackupStatus) {
			s.Phase = cairnv1.BackupPhaseFailedValidation
			s.ValidationErrors = validation.Cap([]string{problem.Error()})
			s.CompletionTimestamp = &now
		})
	}

	runCtx, done := r.runs.Track(ctx, b.UID)
	defer done()
	expiration := expirationOf(b, now, r.DefaultBackupTTL)
	if err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerBackup, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseInProgress
		s.StartTimestamp = &now
		s.Expiration = expiration
		s.FormatVersion = archive.FormatVersion
		s.Progress = cairnv1.NewBackupProgress(0, 0)
		meta.RemoveStatusCondition(&s.Conditions, cairnv1.BackupConditionStorageReady)
	}); err != nil {
		return ctrl.Result{}, err
	}
	lifecycle.Backups.StopIfCancelled(&r.runs, b) // cancelled between the read and the write
	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Started", "Start", "Backup started")
	return ctrl.Result{}, r.run(ctx, runCtx, b, bsl, store, actAs)
}

// openFor opens the store a backup will write to. problem says why it must not: the location's
// configuration is wrong, or it already holds a committed backup of that namespace and name
// made by another Backup object (one deleted with cairn.dev/keep-data, or another cluster's),
// which writing would overwrite. err is a failure that may pass.
func (r *Reconciler) openFor(ctx context.Context, b *cairnv1.Backup, bsl *cairnv1.BackupStorageLocation) (store *location.Store, problem, err error) {
	ctx, cancel := r.Stores.Bounded(ctx)
	defer cancel()
	store, err = r.Stores.Open(ctx, bsl)
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
		return nil, nil, fmt.Errorf("checking storage location %s for an earlier backup named %s: %w", bsl.Name, lifecycle.ObjectName(b), err)
	case meta.UID == string(b.UID):
		return store, nil, nil
	}
	return nil, fmt.Errorf("storage location %s already holds a backup named %s, made by another Backup object (UID %s); writing this one would overwrite it: choose another name, or delete that data first",
		bsl.Name, lifecycle.ObjectName(b), meta.UID), nil
}

// usableLocation finds the backup's storage location. problem says what keeps it from being
// used (lifecycle.ErrLocationNotValidated for a location still waiting for its first validation); err is a
// failure to read.
func (r *Reconciler) usableLocation(ctx context.Context, b *cairnv1.Backup) (bsl *cairnv1.BackupStorageLocation, problem, err error) {
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
	case bsl.Spec.Format == cairnv1.LocationFormatVelero:
		return nil, fmt.Errorf("storage location %s holds Velero's backups, which Cairn reads and never writes", bsl.Name), nil
	case bsl.Spec.AccessMode == cairnv1.AccessModeReadOnly:
		return nil, fmt.Errorf("storage location %s is ReadOnly", bsl.Name), nil
	case bsl.Status.Phase == "":
		return nil, lifecycle.ErrLocationNotValidated, nil
	case bsl.Status.Phase != cairnv1.StorageLocationPhaseAvailable:
		return nil, lifecycle.ToTenant(b, r.Namespace, bsl.Name, fmt.Errorf("storage location %s is not Available: %s", bsl.Name, bsl.Status.Message)), nil
	}
	return bsl, nil, nil
}

// run runs an InProgress backup to the end of InProgress and writes how it ended. runCtx is
// the run's own context, which a cancel ends; every write here uses ctx.
func (r *Reconciler) run(ctx, runCtx context.Context, b *cairnv1.Backup, bsl *cairnv1.BackupStorageLocation, store *location.Store, actAs *authenticationv1.UserInfo) error {
	req := backup.Request{
		Backup: b.DeepCopy(), OperatorNamespace: r.Namespace, LocationName: bsl.Name,
		Store: store, Keys: store.Layout.Backup(b.Namespace, b.Name),
		OnProgress: func(done, total int64) { r.writeProgress(runCtx, b, done, total) },
	}
	if actAs != nil {
		req.Access = r.Requesters.BackupAccess(*actAs)
	}
	res := r.Runner.Run(runCtx, req)
	progress := cairnv1.NewBackupProgress(res.ItemsBackedUp, res.TotalItems)
	cancelledWrite := func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseFinalizingCancelled
		s.Progress = progress
		s.Warnings, s.Errors = res.Warnings, res.Errors
		// The operations it started were running: each is cancelled, and fails.
		s.BackupItemOperationsAttempted = int32(len(res.Operations))
		s.BackupItemOperationsFailed = int32(len(res.Operations))
		s.HookStatus = res.Hooks.Status()
	}
	switch res.Ending {
	case backup.Interrupted:
		return ctx.Err() // the manager is stopping; the restart recovery ends the backup
	case backup.Cancelled:
		return r.endCancelledRun(ctx, b, res, cancelledWrite)
	case backup.Failed:
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "Failing", "Run", "Backup failed: %s; removing its partial data", res.FailureReason)
		return lifecycle.Backups.EndRun(ctx, r.Client, r.APIReader, r.Clock, &r.runs, b, func(s *cairnv1.BackupStatus) {
			s.Phase = cairnv1.BackupPhaseFinalizingFailed
			s.FailureReason = res.FailureReason
			s.Progress = progress
			s.Warnings, s.Errors = res.Warnings, res.Errors
			s.HookStatus = res.Hooks.Status()
		}, nil)
	}
	// Any operation it started is waited for; items that failed make it PartiallyFailed.
	next := lifecycle.Backups.AfterRun(len(res.Operations) > 0, res.Errors > 0)
	return lifecycle.Backups.EndRun(ctx, r.Client, r.APIReader, r.Clock, &r.runs, b, func(s *cairnv1.BackupStatus) {
		s.Phase = next
		s.Progress = progress
		s.Warnings, s.Errors = res.Warnings, res.Errors
		s.BackupItemOperationsAttempted = int32(len(res.Operations))
		s.ArchiveSHA256, s.ArchiveSize = res.Digest.SHA256, res.Digest.Size
		s.HookStatus = res.Hooks.Status()
	}, cancelledWrite)
}

// endCancelledRun writes FinalizingCancelled for a run that stopped on a cancel — with no
// storage call before it, so a hung storage service cannot hold a cancel — and then lets the
// run finish what it leaves for after: its operations cancelled and its log uploaded (each call
// bounded). The finalizer, which removes the data meanwhile, appends to that log only once the
// upload is over.
func (r *Reconciler) endCancelledRun(ctx context.Context, b *cairnv1.Backup, res *backup.Result, write func(*cairnv1.BackupStatus)) error {
	r.Logs.Hold(b.UID)
	defer r.Logs.Release(b.UID)
	err := lifecycle.Backups.EndRun(ctx, r.Client, r.APIReader, r.Clock, &r.runs, b, write, nil)
	reason, failureReason := lifecycle.Backups.StopReasons(b)
	if err == nil {
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Cancelling", "Cancel", "%s while it ran (%s); removing its data", failureReason, reason)
	}
	if _, uploadErr := res.FinishCancelled(context.WithoutCancel(ctx), failureReason, lifecycle.CancelRequester(b)); uploadErr != nil {
		// The finalizer writes the cancel into the log again when it cleans up.
		ctrl.LoggerFrom(ctx).Info("Could not upload the log of a cancelled backup", "backup", lifecycle.ObjectName(b), "error", uploadErr.Error())
	}
	return err
}

// writeProgress writes a running backup's progress; the run calls it at most once per
// progress interval. A failed write is only logged: the next one carries newer counts.
func (r *Reconciler) writeProgress(ctx context.Context, b *cairnv1.Backup, done, total int64) {
	current := b.DeepCopy()
	patch := client.MergeFrom(current.DeepCopy())
	current.Status.Progress = cairnv1.NewBackupProgress(done, total)
	if err := r.Status().Patch(ctx, current, patch); err != nil && ctx.Err() == nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Could not write backup progress", "error", err.Error())
	}
}

// expirationOf is when a backup starting at start expires: start + spec.ttl, or + defaultTTL
// when it has none; nil for a ttl of 0, which never expires.
func expirationOf(b *cairnv1.Backup, start metav1.Time, defaultTTL time.Duration) *metav1.Time {
	ttl := b.Spec.GetTTL(defaultTTL)
	if ttl <= 0 {
		return nil
	}
	expiration := metav1.NewTime(start.Add(ttl))
	return &expiration
}

// SetupWithManager registers the reconciler for backups in its phases, and a watch that
// cancels a running backup's context the moment the backup shows spec.cancel or a deletion
// timestamp (the reconcile is busy running it, so its own events cannot reach it).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Logs == nil {
		r.Logs = &lifecycle.LogUploads{}
	}
	if r.PhaseTimeout <= 0 {
		r.PhaseTimeout = lifecycle.DefaultPhaseTimeout
	}
	return lifecycle.Register("backup", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Backup{}, builder.WithPredicates(lifecycle.Backups.InRunPhases())).
		Watches(&cairnv1.Backup{}, lifecycle.Backups.RunWatch(&r.runs)).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: r.ConcurrentBackups, RateLimiter: lifecycle.StorageRateLimiter()}),
		r)
}
