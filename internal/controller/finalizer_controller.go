package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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

// FinalizerReconciler finishes backups. It owns Finalizing, FinalizingPartiallyFailed and
// FinalizingCancelled. For the first two it adds the post-operation items of completed async
// operations to a rebuilt archive, writes the metadata object (the commit marker, with the
// archive's checksum) and moves the backup to Completed or PartiallyFailed; a cancel (or a
// deletion) seen before the metadata is written sends it to FinalizingCancelled instead. For
// FinalizingCancelled it removes everything of the backup from its location but the log (which
// it appends the cancel to) and the VolumeSnapshots its operations created, then ends it in
// Failed with condition Cancelled=True. A cleanup that fails is retried with backoff and the
// backup stays in FinalizingCancelled, saying why.
type FinalizerReconciler struct {
	client.Client
	// APIReader reads around the cache: a cancel must be seen before the commit marker is written.
	APIReader client.Reader
	Namespace string
	// Runner fetches post-operation items and rebuilds the archive with them.
	Runner    *backup.Runner
	Discovery discovery.DiscoveryInterface
	// Dynamic deletes the VolumeSnapshots of cancelled backups.
	Dynamic  dynamic.Interface
	stores   stores
	Clock    clock.Clock
	Recorder events.EventRecorder
	Gate     interface {
		Wait(ctx context.Context) error
	}
	// CleanupBackoffMin and CleanupBackoffMax bound the wait between cleanup attempts.
	CleanupBackoffMin, CleanupBackoffMax time.Duration
	retries                              *retryBackoff
	// logged holds the cancelled backups whose log already says so (in this process): a
	// retried cleanup does not repeat the line.
	logged uidMap[struct{}]
}

// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshots,verbs=get;list;watch;create;delete

// Reconcile finalizes one backup.
func (r *FinalizerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.Gate.Wait(ctx); err != nil {
		return ctrl.Result{}, err
	}
	var b cairnv1.Backup
	if err := r.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if b.Status.Phase == cairnv1.BackupPhaseFinalizingCancelled {
		return r.cleanUpCancelled(ctx, &b)
	}
	final, ok := finalPhase(b.Status.Phase)
	if !ok {
		return ctrl.Result{}, nil
	}
	if _, _, cancelled := cancellation(&b); cancelled {
		return ctrl.Result{}, r.toCancelled(ctx, &b)
	}
	return ctrl.Result{}, r.finalize(ctx, &b, final)
}

// finalize writes the final archive and the metadata and ends the backup in final.
func (r *FinalizerReconciler) finalize(ctx context.Context, b *cairnv1.Backup, final cairnv1.BackupPhase) error {
	store, err := r.stores.forBackup(ctx, b)
	if err != nil {
		return err // the location may come back; retried with backoff
	}
	keys := store.Layout.Backup(b.Namespace, b.Name)
	digest, warnings, err := r.finalArchive(ctx, store, keys)
	if err != nil {
		return err
	}
	// The last moment to honour a cancel: once the metadata is written the backup is restorable.
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
		return client.IgnoreNotFound(err)
	}
	if _, _, cancelled := cancellation(b); cancelled {
		return r.toCancelled(ctx, b)
	}
	for _, w := range warnings {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "PostOperationItem", "Finalize", w)
	}
	now := r.Clock.Now()
	meta := storage.BackupMetadata{
		FormatVersion: archive.FormatVersion, Namespace: b.Namespace, Name: b.Name, UID: string(b.UID),
		Phase: string(final), ArchiveSHA256: digest.SHA256, ArchiveSize: digest.Size,
		CompletionTimestamp: now, Warnings: int(b.Status.Warnings) + len(warnings), Errors: int(b.Status.Errors),
	}
	if b.Status.StartTimestamp != nil {
		meta.StartTimestamp = b.Status.StartTimestamp.Time
	}
	metaCtx, cancel := r.stores.bounded(ctx)
	defer cancel()
	if err := storage.WriteMetadata(metaCtx, store, keys, meta); err != nil {
		return err
	}
	t := metav1.NewTime(now)
	if err := patchBackupStatus(ctx, r.Client, r.Clock, b, func(s *cairnv1.BackupStatus) {
		s.Phase = final
		s.CompletionTimestamp = &t
		s.Warnings += int32(len(warnings))
	}); err != nil {
		return err
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, string(final), "Finalize", "Backup %s", final)
	return nil
}

// toCancelled moves a finalizing backup that was cancelled to FinalizingCancelled.
func (r *FinalizerReconciler) toCancelled(ctx context.Context, b *cairnv1.Backup) error {
	_, failureReason, _ := cancellation(b)
	if err := patchBackupStatus(ctx, r.Client, r.Clock, b, func(s *cairnv1.BackupStatus) {
		s.Phase = cairnv1.BackupPhaseFinalizingCancelled
	}); err != nil {
		return err
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Cancelling", "Cancel", "%s while finalizing; removing its data", failureReason)
	return nil
}

// cleanUpCancelled removes a cancelled backup's data and ends it in Failed, or, when that
// fails, records why and tries again after a backoff.
func (r *FinalizerReconciler) cleanUpCancelled(ctx context.Context, b *cairnv1.Backup) (ctrl.Result, error) {
	if wait := r.retries.wait(b.UID); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	reason, failureReason, cancelled := cancellation(b)
	if !cancelled {
		// Cannot happen through the API (cancel never goes back), but no backup may stay here.
		reason, failureReason = cairnv1.ReasonCancelledByUser, cairnv1.FailureReasonCancelled
	}
	if kept := dataKeptReason(ctx, r.stores, b); kept != "" {
		// Nothing can (or may) be removed: end now rather than retry forever.
		message := fmt.Sprintf("%s; its data was not removed: %s", failureReason, kept)
		return ctrl.Result{}, r.endCancelled(ctx, b, reason, failureReason, message, corev1.EventTypeWarning)
	}
	removed, snapshots, err := r.removeCancelledData(ctx, b)
	if err != nil {
		failures, next := r.retries.failed(b.UID)
		message := fmt.Sprintf("Removing the cancelled backup's data failed (attempt %d): %v; next attempt at %s",
			failures, err, next.UTC().Format(time.RFC3339))
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, cairnv1.ReasonCleanupFailed, "Cancel", message)
		if perr := patchBackupStatus(ctx, r.Client, r.Clock, b, func(s *cairnv1.BackupStatus) {
			meta.SetStatusCondition(&s.Conditions, metav1.Condition{
				Type: cairnv1.BackupConditionCancelled, Status: metav1.ConditionFalse, Reason: cairnv1.ReasonCleanupFailed,
				Message: message, ObservedGeneration: b.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now()),
			})
		}); perr != nil {
			ctrl.LoggerFrom(ctx).Info("Could not record a failed cleanup", "error", perr.Error())
		}
		return ctrl.Result{RequeueAfter: next.Sub(r.Clock.Now())}, nil
	}
	message := fmt.Sprintf("%s: removed %d objects from the storage location and %d VolumeSnapshots; the log is kept",
		failureReason, removed, snapshots)
	return ctrl.Result{}, r.endCancelled(ctx, b, reason, failureReason, message, corev1.EventTypeNormal)
}

// endCancelled ends a cancelled backup in Failed, with a Cancelled event of eventType, and
// forgets what this process remembered of its cleanup.
func (r *FinalizerReconciler) endCancelled(ctx context.Context, b *cairnv1.Backup, reason, failureReason, message, eventType string) error {
	if err := patchBackupStatus(ctx, r.Client, r.Clock, b, func(s *cairnv1.BackupStatus) {
		cancelledStatus(s, b.Generation, reason, failureReason, message, metav1.NewTime(r.Clock.Now()))
	}); err != nil {
		return err
	}
	r.retries.forget(b.UID)
	r.logged.forget(b.UID)
	r.Recorder.Eventf(b, nil, eventType, "Cancelled", "Cancel", message)
	return nil
}

// dataKeptReason says why a cancelled backup's data cannot or must not be removed, if so: its
// location is gone or ReadOnly, or the backup is being deleted with cairn.dev/keep-data.
func dataKeptReason(ctx context.Context, st stores, b *cairnv1.Backup) string {
	if b.DeletionTimestamp != nil && b.Annotations[cairnv1.KeepDataAnnotation] == "true" {
		return fmt.Sprintf("the backup is being deleted with the annotation %s", cairnv1.KeepDataAnnotation)
	}
	bsl, err := st.location(ctx, b)
	switch {
	case errors.Is(err, location.ErrMissing):
		return err.Error()
	case err == nil && bsl.Spec.AccessMode == cairnv1.AccessModeReadOnly:
		return fmt.Sprintf("storage location %s is ReadOnly", bsl.Name)
	}
	return "" // other errors are met, and retried, by the cleanup itself
}

// removeCancelledData appends the cancel to the backup's log, then deletes every other object
// under the backup's own directory (the metadata first: without it the backup is not
// restorable, whatever else is left) and the VolumeSnapshots its operations created. Each call
// is bounded by the storage timeout; every step is safe to repeat.
func (r *FinalizerReconciler) removeCancelledData(ctx context.Context, b *cairnv1.Backup) (removed, snapshots int, err error) {
	var store *location.Store
	var objects []string
	if err := r.stores.call(ctx, func(ctx context.Context) (err error) {
		if store, err = r.stores.forBackup(ctx, b); err != nil {
			return err
		}
		if objects, err = store.List(ctx, store.Layout.Backup(b.Namespace, b.Name).Dir); err != nil {
			return fmt.Errorf("listing the backup's objects: %w", err)
		}
		return nil
	}); err != nil {
		return 0, 0, err
	}
	keys := store.Layout.Backup(b.Namespace, b.Name)
	if _, done := r.logged.get(b.UID); !done {
		if err := r.stores.call(ctx, func(ctx context.Context) error { return r.appendCancelToLog(ctx, store, keys, b, objects) }); err != nil {
			return 0, 0, err
		}
		r.logged.set(b.UID, struct{}{})
	}
	removed, err = r.stores.deleteObjects(ctx, store, keys, objects, func(key string) bool { return key == keys.Logs })
	if err != nil {
		return removed, 0, err
	}
	if r.Dynamic != nil {
		if err := r.stores.call(ctx, func(ctx context.Context) (err error) {
			snapshots, err = backup.DeleteSnapshots(ctx, r.Dynamic, b.UID)
			return err
		}); err != nil {
			return removed, snapshots, err
		}
	}
	return removed, snapshots, nil
}

// appendCancelToLog adds who cancelled the backup, and when, to its log (creating the log when
// the backup never wrote one).
func (r *FinalizerReconciler) appendCancelToLog(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys, b *cairnv1.Backup, objects []string) error {
	var stored []byte
	if slices.Contains(objects, keys.Logs) {
		rc, err := store.Get(ctx, keys.Logs)
		if err != nil {
			return fmt.Errorf("reading the log: %w", err)
		}
		stored, err = io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			return fmt.Errorf("reading the log: %w", err)
		}
	}
	_, failureReason, _ := cancellation(b)
	data, err := backup.AppendLog(stored, func(l *backup.Log) {
		l.WithField("backup", qualifiedName(b)).WithField("requestedBy", cancelRequester(b)).
			WithField("phase", string(cairnv1.BackupPhaseFinalizingCancelled)).
			Warn(failureReason + "; removing the backup's data and keeping this log")
	})
	if err != nil {
		return err
	}
	if err := store.Put(ctx, keys.Logs, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("writing the log: %w", err)
	}
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
// there are any, and returns the final archive's checksum.
func (r *FinalizerReconciler) finalArchive(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys) (storage.ArchiveDigest, []string, error) {
	var postItems []backup.ItemID
	if ok, err := store.Exists(ctx, keys.ItemOperations); err != nil {
		return storage.ArchiveDigest{}, nil, err
	} else if ok {
		ops, err := readOperations(ctx, store, keys)
		if err != nil {
			return storage.ArchiveDigest{}, nil, err
		}
		for _, op := range ops {
			if op.Phase == backup.OperationCompleted {
				postItems = append(postItems, op.PostOperationItems...)
			}
		}
	}
	if len(postItems) == 0 {
		d, err := archiveDigest(ctx, store, keys)
		return d, nil, err
	}
	lists, err := r.Discovery.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return storage.ArchiveDigest{}, nil, fmt.Errorf("discovering the cluster's resources: %w", err)
	}
	return r.Runner.AddPostOperationItems(ctx, store, keys, backup.ResourcesFromDiscovery(lists), postItems)
}

// archiveDigest reads the uploaded archive back and computes its checksum.
func archiveDigest(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys) (storage.ArchiveDigest, error) {
	rc, err := store.Get(ctx, keys.Archive)
	if err != nil {
		return storage.ArchiveDigest{}, fmt.Errorf("reading the archive back: %w", err)
	}
	defer rc.Close()
	return storage.Digest(rc)
}

// SetupWithManager registers the reconciler for backups in its phases.
func (r *FinalizerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.CleanupBackoffMin <= 0 {
		r.CleanupBackoffMin = DefaultRetryBackoffMin
	}
	if r.CleanupBackoffMax < r.CleanupBackoffMin {
		r.CleanupBackoffMax = max(DefaultRetryBackoffMax, r.CleanupBackoffMin)
	}
	r.retries = newRetryBackoff(r.Clock, r.CleanupBackoffMin, r.CleanupBackoffMax)
	owned := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		b, ok := obj.(*cairnv1.Backup)
		if !ok {
			return false
		}
		_, finalizing := finalPhase(b.Status.Phase)
		return finalizing || b.Status.Phase == cairnv1.BackupPhaseFinalizingCancelled
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("finalizer").
		For(&cairnv1.Backup{}, builder.WithPredicates(owned)).
		WithOptions(crcontroller.Options{RateLimiter: storageRateLimiter()}).
		Complete(r)
}
