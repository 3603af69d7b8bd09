// Package finalizer ends backups and restores: the backup finalizer (owner of Finalizing*,
// FinalizingCancelled and FinalizingFailed) commits a backup or removes the data of one that
// will not be, and the restore finalizer (owner of a restore's Finalizing*) ends restores and
// removes deleted ones' files (DESIGN.md sections 1, 6 and 9). The one thing the backup
// finalizer shares with another reconciler is LogUploads, passed in by setup.go.
package finalizer

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/failure"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/storage"
)

// BackupReconciler finishes backups. It owns Finalizing, FinalizingPartiallyFailed,
// FinalizingCancelled and FinalizingFailed. For the first two it adds the post-operation items
// of completed async operations to a rebuilt archive, checks the stored archive, writes the
// metadata object (the commit marker, with the archive's checksum) and moves the backup to
// Completed or PartiallyFailed; a cancel (or a deletion) seen before the metadata is written
// sends it to FinalizingCancelled instead, and a backup that cannot be committed goes to
// FinalizingFailed. For FinalizingCancelled and FinalizingFailed it removes everything of the
// backup from its location but the log (which it appends the reason to) and the VolumeSnapshots
// its operations created, then ends it in Failed (with Cancelled=True, or CleanedUp=True). A
// cleanup that fails is retried with backoff and the backup stays where it is, saying why.
type BackupReconciler struct {
	client.Client
	// APIReader reads around the cache: a cancel must be seen before the commit marker is written.
	APIReader client.Reader
	Namespace string
	// Runner fetches post-operation items and rebuilds the archive with them.
	Runner    *backup.Runner
	Discovery discovery.DiscoveryInterface
	// Leftovers removes what the async operations of cancelled and failed backups made (CSI
	// VolumeSnapshots, volume snapshots).
	Leftovers lifecycle.Leftovers
	Stores    stores.Stores
	Clock     clock.Clock
	Recorder  events.EventRecorder
	Gate      interface {
		Wait(ctx context.Context) error
	}
	// CleanupBackoffMin and CleanupBackoffMax bound the wait between cleanup attempts.
	CleanupBackoffMin, CleanupBackoffMax time.Duration
	// PhaseTimeout bounds how long a backup stays in Finalizing* or FinalizingCancelled when
	// storage keeps failing; 0 means lifecycle.DefaultPhaseTimeout.
	PhaseTimeout time.Duration
	// MaxArchiveEntrySize is the largest archive entry the verification of a written archive
	// accepts; 0 means archive.DefaultMaxEntrySize.
	MaxArchiveEntrySize int64
	// Workers is how many backups are finalized at once (MaxConcurrentReconciles); cancelled
	// backups are cleaned up by workers of their own, so a long finalize never holds a cancel.
	Workers int
	// Logs are the cancelled runs whose log upload is in flight: the backup reconciler holds
	// them (lifecycle.LogUploads, made in setup.go); nil means none ever is.
	Logs LogUploads

	retries *lifecycle.RetryBackoff
	// logged holds the cancelled backups whose log already says so (in this process): a
	// retried cleanup does not repeat the line.
	logged lifecycle.UIDMap[struct{}]
}

// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshots,verbs=get;list;watch;create;delete

// Reconcile finalizes one backup.
func (r *BackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b cairnv1.Backup
	if found, err := lifecycle.Fetch(ctx, r.Gate, r.Client, req, &b); !found {
		return ctrl.Result{}, err
	}
	switch b.Status.Phase {
	case cairnv1.BackupPhaseFinalizingCancelled:
		return r.cleanUp(ctx, &b, r.cancelCleanup(&b))
	case cairnv1.BackupPhaseFinalizingFailed:
		return r.cleanUp(ctx, &b, r.failCleanup(&b))
	}
	final, ok := finalPhase(b.Status.Phase)
	if !ok {
		return ctrl.Result{}, nil
	}
	if _, _, cancelled := lifecycle.Backups.Cancellation(&b); cancelled {
		return ctrl.Result{}, r.toCancelled(ctx, &b)
	}
	err := r.finalize(ctx, &b, final)
	switch {
	case err == nil:
		return ctrl.Result{}, nil
	case failure.IsPermanent(err):
		return ctrl.Result{}, r.failFinalizing(ctx, &b, err.Error())
	case lifecycle.Backups.PhaseTimedOut(&b, r.Clock.Now(), r.PhaseTimeout):
		return ctrl.Result{}, r.failFinalizing(ctx, &b, fmt.Sprintf("could not be finalized within %s: %v", r.PhaseTimeout, err))
	}
	return ctrl.Result{}, err // storage or the API server failing: retried with backoff
}

// finalize writes the final archive and the metadata and ends the backup in final. Once this
// backup's commit marker is in its location, a retried finalize only writes the status: the
// archive is never rewritten.
func (r *BackupReconciler) finalize(ctx context.Context, b *cairnv1.Backup, final cairnv1.BackupPhase) error {
	var store *location.Store
	var committed *storage.BackupMetadata
	if err := r.Stores.Call(ctx, func(ctx context.Context) (err error) {
		if store, err = r.writableStore(ctx, b); err != nil {
			return err
		}
		meta, err := storage.ReadMetadata(ctx, store, store.Layout.Backup(b.Namespace, b.Name))
		switch {
		case errors.Is(err, storage.ErrNotCommitted):
			return nil
		case err != nil:
			return err
		case meta.UID != string(b.UID):
			return failure.Permanent(fmt.Errorf("the storage location holds a backup named %s made by another Backup object (UID %s)", lifecycle.ObjectName(b), meta.UID))
		}
		committed = &meta
		return nil
	}); err != nil {
		return err
	}
	if committed != nil {
		if store.Lock != nil && !committed.RetainUntil.IsZero() {
			// The commit may have stopped before the marker was locked.
			if err := r.lockObjects(ctx, store, store.Layout.Backup(b.Namespace, b.Name), committed.RetainUntil); err != nil {
				return err
			}
		}
		return r.endFinalized(ctx, b, final, committed.CompletionTimestamp, committed.Warnings-int(b.Status.Warnings), nil)
	}
	keys := store.Layout.Backup(b.Namespace, b.Name)
	digest, warnings, err := r.finalArchive(ctx, b, store, keys)
	if err != nil {
		return err
	}
	// The last moment to honour a cancel: once the metadata is written the backup is restorable.
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
		return client.IgnoreNotFound(err)
	}
	if _, _, cancelled := lifecycle.Backups.Cancellation(b); cancelled {
		return r.toCancelled(ctx, b)
	}
	now := r.Clock.Now()
	meta, err := backupsync.Marker(b, final, archive.FormatVersion, digest, now, int(b.Status.Warnings)+len(warnings))
	if err != nil {
		return failure.Permanent(err)
	}
	// Every file beside the archive is final now: downloads of them are verified against these.
	if err := r.Stores.Call(ctx, func(ctx context.Context) (err error) {
		meta.Files, err = storage.DigestFiles(ctx, store, keys)
		return err
	}); err != nil {
		return err
	}
	if store.Lock != nil {
		meta.RetainUntil = store.Lock.RetainUntil(now, meta.Expiration)
		if err := r.lockObjects(ctx, store, keys, meta.RetainUntil); err != nil {
			return err
		}
	}
	if err := r.Stores.Call(ctx, func(ctx context.Context) error { return storage.WriteMetadata(ctx, store, keys, meta) }); err != nil {
		return err
	}
	if store.Lock != nil {
		if err := r.Stores.Call(ctx, func(ctx context.Context) error {
			return store.Lock.Retain(ctx, []string{keys.Metadata}, meta.RetainUntil)
		}); err != nil {
			return err
		}
	}
	return r.endFinalized(ctx, b, final, now, len(warnings), warnings)
}

// lockObjects locks every object of the backup until until (DESIGN.md section 18): before
// the commit marker is written, and again on a retried commit, whose marker may not be locked
// yet. An object already locked as long is left as it is; nothing is written again.
func (r *BackupReconciler) lockObjects(ctx context.Context, store *location.Store, keys storage.BackupKeys, until time.Time) error {
	return r.Stores.Call(ctx, func(ctx context.Context) error {
		objects, err := store.List(ctx, keys.Dir)
		if err != nil {
			return fmt.Errorf("listing the backup's objects to lock them: %w", err)
		}
		return store.Lock.Retain(ctx, objects, until)
	})
}

// endFinalized writes the terminal phase of a committed backup.
func (r *BackupReconciler) endFinalized(ctx context.Context, b *cairnv1.Backup, final cairnv1.BackupPhase, completed time.Time, moreWarnings int, warnings []string) error {
	for _, w := range warnings {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "PostOperationItem", "Finalize", w)
	}
	t := metav1.NewTime(completed)
	if err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerFinalizer, b, func(s *cairnv1.BackupStatus) {
		s.Phase = final
		s.CompletionTimestamp = &t
		s.Warnings += int32(max(moreWarnings, 0))
	}); err != nil {
		return err
	}
	// The phase change's event is PhaseWatcher's.
	return nil
}

// writableStore opens the store of a backup that is to be written. A location that is gone,
// misconfigured or was made ReadOnly is a permanent problem: the backup cannot be committed.
func (r *BackupReconciler) writableStore(ctx context.Context, b *cairnv1.Backup) (*location.Store, error) {
	bsl, err := r.Stores.Location(ctx, b)
	if err != nil {
		return nil, err
	}
	if bsl.Spec.AccessMode == cairnv1.AccessModeReadOnly {
		return nil, failure.Permanent(fmt.Errorf("storage location %s was made ReadOnly before the backup was committed", bsl.Name))
	}
	return r.Stores.Open(ctx, bsl)
}

// failFinalizing moves a finalizing backup that cannot be committed to FinalizingFailed, with
// the reason: its partial data is then removed like any failed backup's, and it ends Failed
// (DESIGN.md section 1: a backup without a commit marker is not restorable, so neither
// Completed nor PartiallyFailed would be true).
func (r *BackupReconciler) failFinalizing(ctx context.Context, b *cairnv1.Backup, reason string) error {
	if err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerFinalizer, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseFinalizingFailed
		s.FailureReason = reason
	}); err != nil {
		return err
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "Failing", "Finalize", "Backup failed: %s; removing its partial data", reason)
	return nil
}

// toCancelled moves a finalizing backup that was cancelled to FinalizingCancelled.
func (r *BackupReconciler) toCancelled(ctx context.Context, b *cairnv1.Backup) error {
	_, failureReason, _ := lifecycle.Backups.Cancellation(b)
	if err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerFinalizer, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseFinalizingCancelled
	}); err != nil {
		return err
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Cancelling", "Cancel", "%s while finalizing; removing its data", failureReason)
	return nil
}

// finalPhase is the terminal phase a finalizing backup ends in.
func finalPhase(p cairnv1.BackupPhase) (cairnv1.BackupPhase, bool) {
	switch p {
	case cairnv1.BackupPhaseFinalizing:
		return cairnv1.BackupPhaseCompleted, true
	case cairnv1.BackupPhaseFinalizingPartiallyFailed:
		return cairnv1.BackupPhasePartiallyFailed, true
	}
	return "", false
}

// finalArchive adds the post-operation items of completed operations to the archive, when
// there are any, and checks the stored archive before it is committed: it must have the
// digest computed while it was uploaded and be a readable gzip+tar to its end. It returns the
// final archive's digest and warnings about post-operation items.
func (r *BackupReconciler) finalArchive(ctx context.Context, b *cairnv1.Backup, store storage.ObjectStore, keys storage.BackupKeys) (storage.ArchiveDigest, []string, error) {
	var postItems []backup.ItemID
	var hasOperations bool
	if err := r.Stores.Call(ctx, func(ctx context.Context) (err error) {
		hasOperations, err = store.Exists(ctx, keys.ItemOperations)
		return err
	}); err != nil {
		return storage.ArchiveDigest{}, nil, err
	}
	if hasOperations {
		var ops []backup.Operation
		if err := r.Stores.Call(ctx, func(ctx context.Context) (err error) {
			ops, err = backup.ReadOperations(ctx, store, keys.ItemOperations)
			return err
		}); err != nil {
			return storage.ArchiveDigest{}, nil, err
		}
		for _, op := range ops {
			if op.Phase == backup.OperationCompleted {
				postItems = append(postItems, op.PostOperationItems...)
			}
		}
	}
	want := storage.ArchiveDigest{SHA256: b.Status.ArchiveSHA256, Size: b.Status.ArchiveSize}
	var warnings []string
	if len(postItems) > 0 {
		lists, err := r.Discovery.ServerPreferredResources()
		if err != nil && len(lists) == 0 {
			return storage.ArchiveDigest{}, nil, fmt.Errorf("discovering the cluster's resources: %w", err)
		}
		if want, warnings, err = r.Runner.AddPostOperationItems(ctx, b, r.Namespace, store, keys, backup.ResourcesFromDiscovery(lists), postItems); err != nil {
			return storage.ArchiveDigest{}, warnings, err
		}
	}
	if want.SHA256 == "" {
		// A backup written before the digest was kept in its status: take the stored one.
		var err error
		if want, err = archiveDigest(ctx, store, keys); err != nil {
			return storage.ArchiveDigest{}, warnings, err
		}
	}
	// Before the commit marker: the stored archive must be the one uploaded, and readable.
	if err := storage.VerifyArchive(ctx, store, keys.Archive, want, storage.WithMaxEntrySize(r.MaxArchiveEntrySize)); err != nil {
		if errors.Is(err, storage.ErrChecksumMismatch) || errors.Is(err, storage.ErrArchiveUnreadable) {
			return storage.ArchiveDigest{}, warnings, failure.Permanent(err)
		}
		return storage.ArchiveDigest{}, warnings, err
	}
	return want, warnings, nil
}

// archiveDigest reads the stored archive and computes its checksum.
func archiveDigest(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys) (storage.ArchiveDigest, error) {
	rc, err := store.Get(ctx, keys.Archive)
	if err != nil {
		return storage.ArchiveDigest{}, fmt.Errorf("reading the archive back: %w", err)
	}
	defer rc.Close()
	return storage.Digest(rc)
}

// DefaultWorkers is how many backups the finalizer finalizes at once.
const DefaultWorkers = 4

// cancelCleanupWorkers is how many cancelled or failed backups are cleaned up at once, by
// workers that finalizing backups never occupy.
const cancelCleanupWorkers = 2

// SetupWithManager registers the reconciler twice: for Finalizing* backups, with Workers
// workers, and for FinalizingCancelled backups, with workers of their own, so that a cancel is
// never queued behind long finalizes. Both are the finalizer: the owner of these phases.
func (r *BackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.CleanupBackoffMin <= 0 {
		r.CleanupBackoffMin = lifecycle.DefaultRetryBackoffMin
	}
	if r.CleanupBackoffMax < r.CleanupBackoffMin {
		r.CleanupBackoffMax = max(lifecycle.DefaultRetryBackoffMax, r.CleanupBackoffMin)
	}
	if r.PhaseTimeout <= 0 {
		r.PhaseTimeout = lifecycle.DefaultPhaseTimeout
	}
	if r.Workers < 1 {
		r.Workers = DefaultWorkers
	}
	if r.Logs == nil {
		r.Logs = &lifecycle.LogUploads{}
	}
	r.retries = lifecycle.NewRetryBackoff(r.Clock, r.CleanupBackoffMin, r.CleanupBackoffMax)
	forget := handler.Funcs{DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		r.retries.Forget(e.Object.GetUID())
		r.logged.Forget(e.Object.GetUID())
	}}
	finalizing := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		b, ok := obj.(*cairnv1.Backup)
		if !ok {
			return false
		}
		_, ok = finalPhase(b.Status.Phase)
		return ok
	})
	if err := lifecycle.Register("finalizer", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Backup{}, builder.WithPredicates(finalizing)).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: r.Workers, RateLimiter: lifecycle.StorageRateLimiter()}),
		r); err != nil {
		return err
	}
	cancelled := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		b, ok := obj.(*cairnv1.Backup)
		return ok && (b.Status.Phase == cairnv1.BackupPhaseFinalizingCancelled || b.Status.Phase == cairnv1.BackupPhaseFinalizingFailed)
	})
	return lifecycle.Register("finalizer-cleanup", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.Backup{}, builder.WithPredicates(cancelled)).
		Watches(&cairnv1.Backup{}, forget).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: cancelCleanupWorkers, RateLimiter: lifecycle.StorageRateLimiter()}),
		r)
}
