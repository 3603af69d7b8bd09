package schedule

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/retention"
)

// retain applies a schedule's spec.retention (docs/schedules.md, "Retention"): it deletes the
// backups retention.ForSchedule keeps under no rule, with the ordinary Delete, as `kubectl
// delete` and the expiry GC do, so the deletion reconciler removes their data first, and
// holds a backup a restore still reads until that restore ends. It returns what the status
// shows, or nil for a schedule without retention.
//
// Before deleting anything it decides again from the backups read past the cache: a backup
// that ended, or was created, a moment ago changes what the policy keeps, and the decision to
// delete must not rest on an older view. A backup whose data cannot be deleted (its storage
// location is ReadOnly or gone) is left, with a Warning event, as the expiry GC leaves it.
func (r *Reconciler) retain(ctx context.Context, s *cairnv1.Schedule, backups []cairnv1.Backup, locations []cairnv1.BackupStorageLocation, now time.Time) (*cairnv1.RetentionStatus, error) {
	verdicts, err := retention.ForSchedule(s, backups)
	if err != nil || verdicts == nil {
		return nil, err
	}
	if anyDeleted(verdicts) && r.APIReader != nil {
		var live cairnv1.BackupList
		if err := r.APIReader.List(ctx, &live, client.InNamespace(s.Namespace), client.MatchingLabels{cairnv1.ScheduleNameLabel: s.Name}); err != nil {
			return nil, fmt.Errorf("listing the backups of schedule %s: %w", lifecycle.ObjectName(s), err)
		}
		backups = live.Items
		if verdicts, err = retention.ForSchedule(s, backups); err != nil {
			return nil, err
		}
	}
	byName := map[string]*cairnv1.Backup{}
	for i := range backups {
		byName[backups[i].Name] = &backups[i]
	}
	kept, total, _ := retention.Counts(verdicts)
	st := &cairnv1.RetentionStatus{Kept: kept, Total: total}
	var deleted, blocked []string
	for _, v := range verdicts {
		b := byName[v.Name]
		if !v.Deleted() || b == nil {
			continue
		}
		if why := undeletable(b, locations, r.Namespace); why != "" {
			blocked = append(blocked, fmt.Sprintf("%s (%s)", b.Name, why))
			continue
		}
		if err := r.Delete(ctx, b, client.Preconditions{UID: &b.UID}); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("deleting backup %s, which the retention of schedule %s keeps no longer: %w", b.Name, lifecycle.ObjectName(s), err)
		}
		deleted = append(deleted, b.Name)
	}
	st.Deleted = int32(len(deleted))
	if len(deleted) > 0 {
		ctrl.LoggerFrom(ctx).Info("Deleted backups the schedule's retention keeps no longer", "schedule", lifecycle.ObjectName(s), "backups", deleted)
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "RetentionDeleted", "Delete", "Deleted %d backup(s) no retention rule keeps: %s", len(deleted), abbreviate(deleted))
	}
	if len(blocked) > 0 {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, "RetentionBlocked", "Delete", "%d backup(s) no retention rule keeps cannot be deleted: %s", len(blocked), abbreviate(blocked))
	}
	st.LastApplied = &metav1.Time{Time: now}
	return st, nil
}

// anyDeleted reports whether a verdict deletes its backup.
func anyDeleted(vs []retention.Verdict) bool {
	for _, v := range vs {
		if v.Deleted() {
			return true
		}
	}
	return false
}

// undeletable says why deleting backup b would not remove its data, as the expiry GC decides:
// its storage location is missing or ReadOnly. "" when it can be deleted (or its deletion
// touches no storage: it never started, or keeps its data).
func undeletable(b *cairnv1.Backup, locations []cairnv1.BackupStorageLocation, namespace string) string {
	if b.Status.StartTimestamp == nil || b.Annotations[cairnv1.KeepDataAnnotation] == "true" {
		return ""
	}
	bsl, err := location.Resolve(locations, namespace, b.Status.StorageLocation)
	switch {
	case err != nil: // location.ErrMissing: Resolve fails for nothing else
		return err.Error()
	case bsl.Spec.AccessMode == cairnv1.AccessModeReadOnly:
		return fmt.Sprintf("storage location %s is ReadOnly", bsl.Name)
	}
	return ""
}

// abbreviate joins names for an event, the first ten and a count of the rest.
func abbreviate(names []string) string {
	if len(names) <= 10 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:10], ", "), len(names)-10)
}

// retentionStatus is status.retention after a pass: cur, except that a pass that deleted
// nothing and counts the same as the last one keeps the last one's time and deletion count,
// so that a schedule's status is not rewritten at every wake.
func retentionStatus(last, cur *cairnv1.RetentionStatus) *cairnv1.RetentionStatus {
	if cur == nil {
		return nil
	}
	if last != nil && cur.Deleted == 0 && last.Kept == cur.Kept && last.Total == cur.Total {
		return last
	}
	return cur
}
