package finalizer

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
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/storage"
)

// LogUploads says whether the run of a cancelled backup is still uploading its log, which the
// finalizer appends the cancel to once the upload is over (lifecycle.LogUploads says why).
type LogUploads interface {
	InFlight(uid types.UID) bool
}

// logUploadWait is how soon a cancelled backup whose run is still uploading its log is looked
// at again.
const logUploadWait = 100 * time.Millisecond

// cleanup is what removing the data of a backup that will not be committed means for one of
// the two phases that do it: FinalizingCancelled and FinalizingFailed. Both remove everything
// under the backup's directory but its log, and the VolumeSnapshots it made, retried with
// backoff, and end in Failed; they differ in what the log and the status say.
type cleanup struct {
	// what names the backup in messages ("cancelled backup", "failed backup").
	what string
	// failureReason is the backup's failureReason.
	failureReason string
	// condition is the condition type that says how the cleanup goes.
	condition string
	// logLine appends the reason of the cleanup to the backup's log.
	logLine func(l *backup.Log)
	// end writes the terminal status with message; eventType Warning when data was left.
	end func(ctx context.Context, b *cairnv1.Backup, message, eventType string) error
}

// cancelCleanup is the cleanup of a cancelled backup: Failed with the cancel's failureReason,
// Cancelled=True and a Cancelled event.
func (r *BackupReconciler) cancelCleanup(b *cairnv1.Backup) cleanup {
	_, failureReason := lifecycle.Backups.StopReasons(b)
	return cleanup{
		what: "cancelled backup", failureReason: failureReason, condition: cairnv1.BackupConditionCancelled,
		logLine: func(l *backup.Log) {
			l.WithField("backup", lifecycle.ObjectName(b)).WithField("requestedBy", lifecycle.CancelRequester(b)).
				WithField("phase", string(cairnv1.BackupPhaseFinalizingCancelled)).
				Warn(failureReason + "; removing the backup's data and keeping this log")
		},
		end: func(ctx context.Context, b *cairnv1.Backup, message, eventType string) error {
			if err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerFinalizer, b, func(s *cairnv1.BackupStatus) {
				lifecycle.Backups.CancelledStatus(b, s, message, metav1.NewTime(r.Clock.Now()))
			}); err != nil {
				return err
			}
			r.Recorder.Eventf(b, nil, eventType, "Cancelled", "Cancel", message)
			return nil
		},
	}
}

// failCleanup is the cleanup of a failed backup: Failed with the failureReason it already has,
// and CleanedUp=True (or False, saying what was left).
func (r *BackupReconciler) failCleanup(b *cairnv1.Backup) cleanup {
	failureReason := b.Status.FailureReason
	if failureReason == "" {
		failureReason = "the backup failed"
	}
	return cleanup{
		what: "failed backup", failureReason: failureReason, condition: cairnv1.BackupConditionCleanedUp,
		logLine: func(l *backup.Log) {
			l.WithField("backup", lifecycle.ObjectName(b)).WithField("phase", string(cairnv1.BackupPhaseFinalizingFailed)).
				Error("Backup failed: " + failureReason + "; removing its partial data and keeping this log")
		},
		end: func(ctx context.Context, b *cairnv1.Backup, message, eventType string) error {
			now := metav1.NewTime(r.Clock.Now())
			status, reason := metav1.ConditionTrue, cairnv1.ReasonDataRemoved
			if eventType == corev1.EventTypeWarning {
				status, reason = metav1.ConditionFalse, cairnv1.ReasonDataKept
			}
			if err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerFinalizer, b, func(s *cairnv1.BackupStatus) {
				s.Phase = cairnv1.BackupPhaseFailed
				s.FailureReason = failureReason
				s.CompletionTimestamp = &now
				meta.SetStatusCondition(&s.Conditions, metav1.Condition{
					Type: cairnv1.BackupConditionCleanedUp, Status: status, Reason: reason,
					Message: message, ObservedGeneration: b.Generation, LastTransitionTime: now,
				})
			}); err != nil {
				return err
			}
			return nil
		},
	}
}

// cleanUp removes the data of a backup that will not be committed and ends it in Failed, or,
// when that fails, records why and tries again after a backoff; once that lasted
// --phase-timeout it ends Failed anyway, saying what was left.
func (r *BackupReconciler) cleanUp(ctx context.Context, b *cairnv1.Backup, c cleanup) (ctrl.Result, error) {
	if wait := r.retries.Wait(b.UID); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if r.Logs.InFlight(b.UID) {
		// The run is uploading its log (bounded by the storage timeout): append after it.
		return ctrl.Result{RequeueAfter: logUploadWait}, nil
	}
	if kept := dataKeptReason(ctx, r.Stores, b); kept != "" {
		// Nothing can (or may) be removed: end now rather than retry forever.
		return ctrl.Result{}, r.endCleanup(ctx, b, c, fmt.Sprintf("%s; its data was not removed: %s", c.failureReason, kept), corev1.EventTypeWarning)
	}
	removed, snapshots, err := r.removeData(ctx, b, c)
	if err != nil && lifecycle.Backups.PhaseTimedOut(b, r.Clock.Now(), r.PhaseTimeout) {
		message := fmt.Sprintf("%s; not all of its data could be removed within %s: %v", c.failureReason, r.PhaseTimeout, err)
		return ctrl.Result{}, r.endCleanup(ctx, b, c, message, corev1.EventTypeWarning)
	}
	if err != nil {
		failures, next := r.retries.Failed(b.UID)
		message := fmt.Sprintf("Removing the %s's data failed (attempt %d): %v; next attempt at %s",
			c.what, failures, err, next.UTC().Format(time.RFC3339))
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, cairnv1.ReasonCleanupFailed, "Cleanup", message)
		if perr := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerFinalizer, b, func(s *cairnv1.BackupStatus) {
			meta.SetStatusCondition(&s.Conditions, metav1.Condition{
				Type: c.condition, Status: metav1.ConditionFalse, Reason: cairnv1.ReasonCleanupFailed,
				Message: message, ObservedGeneration: b.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now()),
			})
		}); perr != nil {
			ctrl.LoggerFrom(ctx).Info("Could not record a failed cleanup", "error", perr.Error())
		}
		return ctrl.Result{RequeueAfter: next.Sub(r.Clock.Now())}, nil
	}
	message := fmt.Sprintf("%s: removed %d objects from the storage location and %d snapshots; the log is kept",
		c.failureReason, removed, snapshots)
	return ctrl.Result{}, r.endCleanup(ctx, b, c, message, corev1.EventTypeNormal)
}

// endCleanup ends the cleanup with c.end and forgets what this process remembered of it.
func (r *BackupReconciler) endCleanup(ctx context.Context, b *cairnv1.Backup, c cleanup, message, eventType string) error {
	if err := c.end(ctx, b, message, eventType); err != nil {
		return err
	}
	r.retries.Forget(b.UID)
	r.logged.Forget(b.UID)
	return nil
}

// dataKeptReason says why a backup's data cannot or must not be removed, if so: its location
// is gone or ReadOnly, or the backup is being deleted with cairn.dev/keep-data.
func dataKeptReason(ctx context.Context, st stores.Stores, b *cairnv1.Backup) string {
	if b.DeletionTimestamp != nil && b.Annotations[cairnv1.KeepDataAnnotation] == "true" {
		return fmt.Sprintf("the backup is being deleted with the annotation %s", cairnv1.KeepDataAnnotation)
	}
	bsl, err := st.Location(ctx, b)
	switch {
	case errors.Is(err, location.ErrMissing):
		return err.Error()
	case err == nil && bsl.Spec.AccessMode == cairnv1.AccessModeReadOnly:
		return fmt.Sprintf("storage location %s is ReadOnly", bsl.Name)
	}
	return "" // other errors are met, and retried, by the cleanup itself
}

// removeData appends the cleanup's reason to the backup's log, then deletes every other object
// under the backup's own directory (the metadata first: without it the backup is not
// restorable, whatever else is left) and the VolumeSnapshots its operations created. Each call
// is bounded by the storage timeout; every step is safe to repeat.
func (r *BackupReconciler) removeData(ctx context.Context, b *cairnv1.Backup, c cleanup) (removed, snapshots int, err error) {
	var store *location.Store
	var objects []string
	if err := r.Stores.Call(ctx, func(ctx context.Context) (err error) {
		if store, err = r.Stores.ForBackup(ctx, b); err != nil {
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
	// The operations file records the volume snapshots: they go before it does.
	if err := r.Stores.Call(ctx, func(ctx context.Context) (err error) {
		snapshots, err = r.Leftovers.Remove(ctx, b.UID, store.ObjectStore, keys.ItemOperations)
		return err
	}); err != nil {
		return 0, snapshots, err
	}
	if _, done := r.logged.Get(b.UID); !done {
		if err := r.Stores.Call(ctx, func(ctx context.Context) error { return appendToLog(ctx, store, keys, objects, c.logLine) }); err != nil {
			return 0, 0, err
		}
		r.logged.Set(b.UID, struct{}{})
	}
	removed, err = r.Stores.DeleteObjects(ctx, store, keys, objects, func(key string) bool { return key == keys.Logs })
	if err != nil {
		return removed, 0, err
	}
	// What List does not show: an upload a killed manager left incomplete (an S3 multipart
	// upload, whose parts the bucket keeps and bills; a filesystem temp file).
	if err := r.Stores.Call(ctx, func(ctx context.Context) error {
		aborted, err := storage.AbortIncompleteUploads(ctx, store.ObjectStore, keys.Dir)
		removed += aborted
		return err
	}); err != nil {
		return removed, 0, err
	}
	return removed, snapshots, nil
}

// maxAppendedLogSize bounds the stored (compressed) log that appendToLog reads to append to it.
const maxAppendedLogSize = 64 << 20

// appendToLog adds what write logs to the backup's log (creating the log when the backup never
// wrote one).
func appendToLog(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys, objects []string, write func(l *backup.Log)) error {
	var stored []byte
	if slices.Contains(objects, keys.Logs) {
		rc, err := store.Get(ctx, keys.Logs)
		if err != nil {
			return fmt.Errorf("reading the log: %w", err)
		}
		stored, err = io.ReadAll(io.LimitReader(rc, maxAppendedLogSize+1))
		_ = rc.Close()
		if err != nil {
			return fmt.Errorf("reading the log: %w", err)
		}
		if len(stored) > maxAppendedLogSize {
			// Not a log this manager wrote in a backup's lifetime: the bucket holds something
			// else under its name. It is left as it is rather than read into memory.
			ctrl.LoggerFrom(ctx).Info("Did not append to a backup's stored log: it is larger than a backup's log can be", "key", keys.Logs, "limit", maxAppendedLogSize)
			return nil
		}
	}
	data, err := backup.AppendLog(stored, write)
	if err != nil {
		return err
	}
	if err := store.Put(ctx, keys.Logs, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("writing the log: %w", err)
	}
	return nil
}
