// Package metrics defines Cairn's Prometheus metrics (docs/metrics.md), on controller-runtime's
// registry so that the manager's /metrics endpoint serves them with its own.
//
// Two kinds, fed two ways:
//   - counters and histograms move on phase changes (ObserveBackup, ObserveRestore), which the
//     manager's phase watcher reports as the leader sees them happen; like every Prometheus
//     counter they start from zero in a new process;
//   - gauges are never stored: Collector computes them from the cluster's objects (the
//     manager's cache) at every scrape, so they are right at once after a restart and can never
//     drift from what the API says.
package metrics

import (
	"regexp"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// syncedFromAnnotation marks a Backup that the sync reconciler made from a backup it found in
// storage (DESIGN.md section 11); its value is the location. (The sync reconciler's API constant
// replaces it when both are merged.)
const syncedFromAnnotation = "cairn.dev/synced-from"

// Label names.
const (
	labelSchedule   = "schedule"
	labelPhase      = "phase"
	labelLocation   = "location"
	labelController = "controller"
	labelKind       = "kind"
	labelFrom       = "from"
	labelTo         = "to"
	labelNamespace  = "namespace"
)

// durationBuckets span a few seconds to a day: backups and restores of small namespaces take
// seconds, of big volumes hours.
var durationBuckets = []float64{1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400}

// queueWaitBuckets span no wait to several hours.
var queueWaitBuckets = []float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200, 14400}

var (
	backupAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_backup_attempts_total",
		Help: "Backups that started running (entered InProgress), by schedule (\"\" for backups made by hand).",
	}, []string{labelSchedule})
	backupSuccesses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_backup_success_total",
		Help: "Backups that ended Completed, by schedule.",
	}, []string{labelSchedule})
	backupPartialFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_backup_partial_failure_total",
		Help: "Backups that ended PartiallyFailed (restorable, with errors), by schedule.",
	}, []string{labelSchedule})
	backupFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_backup_failure_total",
		Help: "Backups that ended Failed (cancelled ones included), by schedule.",
	}, []string{labelSchedule})
	backupValidationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_backup_validation_failure_total",
		Help: "Backups that ended FailedValidation, by schedule.",
	}, []string{labelSchedule})
	backupDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cairn_backup_duration_seconds",
		Help:    "Time from a backup's start to its end (Completed, PartiallyFailed or Failed after it started), by schedule.",
		Buckets: durationBuckets,
	}, []string{labelSchedule})
	backupItems = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_backup_items_total",
		Help: "Items written by backups that ended Completed or PartiallyFailed, by schedule.",
	}, []string{labelSchedule})
	backupQueueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cairn_backup_queue_wait_seconds",
		Help:    "Time a backup spent Queued before it was dequeued (ReadyToStart).",
		Buckets: queueWaitBuckets,
	})
	deletionAttempts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cairn_backup_deletion_attempts_total",
		Help: "Times a deleted backup's data removal started, retries included.",
	})
	deletionFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cairn_backup_deletion_failures_total",
		Help: "Times a deleted backup's data removal failed (entered DeletionFailed); each is retried.",
	})

	syncImported = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_backup_sync_imported_total",
		Help: "Backups found in a storage location that the cluster lacked, made into Backup objects by sync, by location.",
	}, []string{labelLocation})

	restoreAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_restore_attempts_total",
		Help: "Restores that started running (entered InProgress), by spec.scheduleName (\"\" for a restore of a named backup).",
	}, []string{labelSchedule})
	restoreSuccesses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_restore_success_total",
		Help: "Restores that ended Completed.",
	}, []string{labelSchedule})
	restorePartialFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_restore_partial_failure_total",
		Help: "Restores that ended PartiallyFailed.",
	}, []string{labelSchedule})
	restoreFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_restore_failure_total",
		Help: "Restores that ended Failed (cancelled ones included).",
	}, []string{labelSchedule})
	restoreValidationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_restore_validation_failure_total",
		Help: "Restores that ended FailedValidation.",
	}, []string{labelSchedule})
	restoreDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cairn_restore_duration_seconds",
		Help:    "Time from a restore's start to its end.",
		Buckets: durationBuckets,
	}, []string{labelSchedule})
	restoreQueueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cairn_restore_queue_wait_seconds",
		Help:    "Time a restore spent Queued before it was dequeued (ReadyToStart).",
		Buckets: queueWaitBuckets,
	})
	reconcileConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_reconcile_conflicts_total",
		Help: "Reconciles that met an optimistic-lock conflict (someone else wrote the object first) and were requeued.",
	}, []string{labelController})
	volumeBytesRead = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cairn_volume_backup_bytes_read_total",
		Help: "Bytes of pod volume data the node agent read for completed copies.",
	})
	volumeBytesUploaded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cairn_volume_backup_bytes_uploaded_total",
		Help: "Bytes the node agent wrote to volume repositories for completed copies (far less than read when volumes change little).",
	})
	volumeCopyDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cairn_volume_backup_duration_seconds",
		Help:    "Time one pod volume copy took, by how it ended (Completed, Failed, Cancelled).",
		Buckets: durationBuckets,
	}, []string{labelPhase})
	volumeBytesRestored = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cairn_volume_restore_bytes_written_total",
		Help: "Bytes of pod volume data the node agent wrote back for completed volume restores.",
	})
	volumeRestoreDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cairn_volume_restore_duration_seconds",
		Help:    "Time one pod volume restore took, by how it ended (Completed, Failed, Cancelled).",
		Buckets: durationBuckets,
	}, []string{labelPhase})
	repositorySize = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cairn_volume_repository_size_bytes",
		Help: "Bytes a volume repository holds in its storage location, measured after each maintenance.",
	}, []string{labelLocation, labelNamespace})
	refusedPhaseTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_refused_phase_transitions_total",
		Help: "Status writes refused because the phase-owner table (internal/phases) lacks their phase change, or their writer does not own the phase left: a programming error, by kind and phases.",
	}, []string{labelKind, labelFrom, labelTo})
)

// registered is every collector the package registers on controller-runtime's registry.
var registered = []prometheus.Collector{
	backupAttempts, backupSuccesses, backupPartialFailures, backupFailures, backupValidationFailures,
	backupDuration, backupItems, backupQueueWait, deletionAttempts, deletionFailures, syncImported,
	restoreAttempts, restoreSuccesses, restorePartialFailures, restoreFailures, restoreValidationFailures,
	restoreDuration, restoreQueueWait, reconcileConflicts, refusedPhaseTransitions,
	volumeBytesRead, volumeBytesUploaded, volumeCopyDuration, repositorySize, volumeBytesRestored, volumeRestoreDuration,
	collector,
}

func init() {
	ctrlmetrics.Registry.MustRegister(registered...)
}

// fqName reads a Desc's metric name out of its String() (the only place the client library
// shows it): Desc{fqName: "cairn_backups", help: ...}.
var fqName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// Names is every metric name the package registers, as a query names it: a histogram's
// series (name_bucket, name_sum, name_count) included. The dashboard and the alerts in the
// chart are tested against it (charts/cairn), so that they cannot name a metric that does
// not exist.
func Names() []string {
	var names []string
	for _, c := range registered {
		ch := make(chan *prometheus.Desc, 64)
		c.Describe(ch)
		close(ch)
		_, histogram := c.(*prometheus.HistogramVec)
		if _, ok := c.(prometheus.Histogram); ok {
			histogram = true
		}
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				continue
			}
			if histogram {
				names = append(names, m[1]+"_bucket", m[1]+"_sum", m[1]+"_count")
			} else {
				names = append(names, m[1])
			}
		}
	}
	slices.Sort(names)
	return names
}

// ConflictRequeued counts a reconcile of the named controller that met an optimistic-lock
// conflict and was requeued.
func ConflictRequeued(controller string) { reconcileConflicts.WithLabelValues(controller).Inc() }

// PhaseTransitionRefused counts a status write of a kind that was refused because the owner
// table lacks its phase change from → to (internal/phases.Table.Check).
func PhaseTransitionRefused(kind, from, to string) {
	refusedPhaseTransitions.WithLabelValues(kind, from, to).Inc()
}

// VolumeCopyEnded counts a pod volume copy that ended in phase after d, having read and
// uploaded the given bytes (counted only when Completed).
func VolumeCopyEnded(phase string, d time.Duration, read, uploaded int64) {
	volumeCopyDuration.WithLabelValues(phase).Observe(d.Seconds())
	if phase == string(cairnv1.PodVolumePhaseCompleted) {
		volumeBytesRead.Add(float64(read))
		volumeBytesUploaded.Add(float64(uploaded))
	}
}

// VolumeRestoreEnded counts a pod volume restore that ended in phase after d, having written
// the given bytes (counted only when Completed).
func VolumeRestoreEnded(phase string, d time.Duration, written int64) {
	volumeRestoreDuration.WithLabelValues(phase).Observe(d.Seconds())
	if phase == string(cairnv1.PodVolumePhaseCompleted) {
		volumeBytesRestored.Add(float64(written))
	}
}

// RepositorySize records the size of the volume repository of location for namespace.
func RepositorySize(location, namespace string, bytes int64) {
	repositorySize.WithLabelValues(location, namespace).Set(float64(bytes))
}

// DeletionStarted counts a deleted backup's data removal, which the deletion reconciler
// starts: the first one of a backup shows no phase until it has run a while.
func DeletionStarted() { deletionAttempts.Inc() }

// ObserveBackup counts a backup's phase change from old to cur (the same backup, two
// versions; a change that is not one of the phase is ignored).
func ObserveBackup(old, cur *cairnv1.Backup) {
	from, to := old.EffectivePhase(), cur.EffectivePhase()
	if from == to {
		return
	}
	if location, synced := cur.Annotations[syncedFromAnnotation]; synced && from == cairnv1.BackupPhaseNew {
		// Found in storage and given its status by sync: not a backup that ran here.
		syncImported.WithLabelValues(location).Inc()
		return
	}
	schedule := cur.Labels[cairnv1.ScheduleNameLabel]
	switch to {
	case cairnv1.BackupPhaseReadyToStart:
		if from == cairnv1.BackupPhaseQueued {
			if wait, ok := between(old.Status.PhaseTransitionTime, cur.Status.PhaseTransitionTime); ok {
				backupQueueWait.Observe(wait.Seconds())
			}
		}
	case cairnv1.BackupPhaseInProgress:
		backupAttempts.WithLabelValues(schedule).Inc()
	case cairnv1.BackupPhaseCompleted, cairnv1.BackupPhasePartiallyFailed:
		if to == cairnv1.BackupPhaseCompleted {
			backupSuccesses.WithLabelValues(schedule).Inc()
		} else {
			backupPartialFailures.WithLabelValues(schedule).Inc()
		}
		if cur.Status.Progress != nil {
			backupItems.WithLabelValues(schedule).Add(float64(cur.Status.Progress.ItemsBackedUp))
		}
		observeDuration(backupDuration.WithLabelValues(schedule), cur.Status.StartTimestamp, cur.Status.CompletionTimestamp)
	case cairnv1.BackupPhaseFailed:
		backupFailures.WithLabelValues(schedule).Inc()
		observeDuration(backupDuration.WithLabelValues(schedule), cur.Status.StartTimestamp, cur.Status.CompletionTimestamp)
	case cairnv1.BackupPhaseFailedValidation:
		backupValidationFailures.WithLabelValues(schedule).Inc()
	case cairnv1.BackupPhaseDeletionFailed:
		deletionFailures.Inc()
	}
}

// ObserveRestore counts a restore's phase change from old to cur.
func ObserveRestore(old, cur *cairnv1.Restore) {
	from, to := old.EffectivePhase(), cur.EffectivePhase()
	if from == to {
		return
	}
	schedule := cur.Spec.ScheduleName
	switch to {
	case cairnv1.RestorePhaseReadyToStart:
		if from == cairnv1.RestorePhaseQueued {
			if wait, ok := between(old.Status.PhaseTransitionTime, cur.Status.PhaseTransitionTime); ok {
				restoreQueueWait.Observe(wait.Seconds())
			}
		}
	case cairnv1.RestorePhaseInProgress:
		restoreAttempts.WithLabelValues(schedule).Inc()
	case cairnv1.RestorePhaseCompleted:
		restoreSuccesses.WithLabelValues(schedule).Inc()
		observeDuration(restoreDuration.WithLabelValues(schedule), cur.Status.StartTimestamp, cur.Status.CompletionTimestamp)
	case cairnv1.RestorePhasePartiallyFailed:
		restorePartialFailures.WithLabelValues(schedule).Inc()
		observeDuration(restoreDuration.WithLabelValues(schedule), cur.Status.StartTimestamp, cur.Status.CompletionTimestamp)
	case cairnv1.RestorePhaseFailed:
		restoreFailures.WithLabelValues(schedule).Inc()
		observeDuration(restoreDuration.WithLabelValues(schedule), cur.Status.StartTimestamp, cur.Status.CompletionTimestamp)
	case cairnv1.RestorePhaseFailedValidation:
		restoreValidationFailures.WithLabelValues(schedule).Inc()
	}
}

// between is end - start when both are known and in order.
func between(start, end *metav1.Time) (time.Duration, bool) {
	if start == nil || end == nil || end.Before(start) {
		return 0, false
	}
	return end.Sub(start.Time), true
}

func observeDuration(h prometheus.Observer, start, end *metav1.Time) {
	if d, ok := between(start, end); ok {
		h.Observe(d.Seconds())
	}
}
