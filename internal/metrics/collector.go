package metrics

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/schedule"
)

var (
	backupsDesc = prometheus.NewDesc("cairn_backups",
		"Backup objects in the cluster, by phase (\"New\" for those not yet validated).", []string{labelPhase}, nil)
	restoresDesc = prometheus.NewDesc("cairn_restores",
		"Restore objects in the cluster, by phase.", []string{labelPhase}, nil)
	backupQueueLengthDesc = prometheus.NewDesc("cairn_backup_queue_length",
		"Backups waiting in the queue (Queued).", nil, nil)
	restoreQueueLengthDesc = prometheus.NewDesc("cairn_restore_queue_length",
		"Restores waiting in the queue (Queued).", nil, nil)
	lastSuccessDesc = prometheus.NewDesc("cairn_backup_last_successful_timestamp_seconds",
		"Completion time (Unix seconds) of the newest Completed backup, by schedule (\"\" for backups made by hand).", []string{labelSchedule}, nil)
	lastStatusDesc = prometheus.NewDesc("cairn_backup_last_status",
		"1 when the newest finished backup of a schedule is Completed, 0 when it ended otherwise (PartiallyFailed, Failed, FailedValidation).", []string{labelSchedule}, nil)
	locationAvailableDesc = prometheus.NewDesc("cairn_backup_storage_location_available",
		"1 when the storage location is Available, 0 when it is Unavailable or not checked yet.", []string{labelLocation}, nil)
	sinceSuccessDesc = prometheus.NewDesc("cairn_schedule_seconds_since_last_success",
		"Seconds since the schedule's newest Completed backup completed (since the schedule was created, when it has none).", []string{labelNamespace, labelSchedule}, nil)
	expectedIntervalDesc = prometheus.NewDesc("cairn_schedule_expected_interval_seconds",
		"The longest time between two consecutive runs of an Enabled schedule, from its cron, over the coming week; absent for paused and invalid schedules.", []string{labelNamespace, labelSchedule}, nil)
	storageBytesDesc = prometheus.NewDesc("cairn_backup_storage_bytes",
		"Bytes of backup archives stored in the location: the sum of status.archiveSize of its Completed and PartiallyFailed backups (volume data is cairn_volume_repository_size_bytes).", []string{labelLocation}, nil)
	scrapeErrorDesc = prometheus.NewDesc("cairn_metrics_scrape_error",
		"1 when the gauges above could not be computed in this scrape (the cache did not answer in time).", nil, nil)
)

// collectTimeout bounds how long one scrape waits for the cache (a replica's cache may still be
// starting).
const collectTimeout = 5 * time.Second

// Source is where the gauges are computed from: the manager's cache, and the operator's
// namespace (its storage locations).
type Source struct {
	Reader    client.Reader
	Namespace string
}

// gaugeCollector computes the gauges from the cluster's objects at every scrape.
type gaugeCollector struct {
	source atomic.Pointer[Source]
}

// collector is the one gauge collector, registered once; SetSource points it at a manager.
var collector = &gaugeCollector{}

// SetSource makes the gauges read from s (the manager sets it at start; a test that starts
// several managers in one process points it at the latest).
func SetSource(s Source) { collector.source.Store(&s) }

func (c *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{backupsDesc, restoresDesc, backupQueueLengthDesc, restoreQueueLengthDesc,
		lastSuccessDesc, lastStatusDesc, locationAvailableDesc, sinceSuccessDesc, expectedIntervalDesc, storageBytesDesc, scrapeErrorDesc} {
		ch <- d
	}
}

func (c *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.source.Load()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	// Read only, never kept: no copies of the cache's objects.
	var backups cairnv1.BackupList
	var restores cairnv1.RestoreList
	var locations cairnv1.BackupStorageLocationList
	var schedules cairnv1.ScheduleList
	err := src.Reader.List(ctx, &backups, client.UnsafeDisableDeepCopy)
	if err == nil {
		err = src.Reader.List(ctx, &restores, client.UnsafeDisableDeepCopy)
	}
	if err == nil {
		err = src.Reader.List(ctx, &locations, client.InNamespace(src.Namespace), client.UnsafeDisableDeepCopy)
	}
	if err == nil {
		err = src.Reader.List(ctx, &schedules, client.UnsafeDisableDeepCopy)
	}
	if err != nil {
		ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, 0)
	all := gauges(backups.Items, restores.Items, locations.Items)
	all = append(all, scheduleGauges(schedules.Items, backups.Items, time.Now())...)
	all = append(all, storageGauges(backups.Items, locations.Items)...)
	for _, m := range all {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, m.value, m.labels...)
	}
}

// gauge is one gauge sample.
type gauge struct {
	desc   *prometheus.Desc
	value  float64
	labels []string
}

// gauges computes every gauge from the objects: a pure function of what the API holds.
func gauges(backups []cairnv1.Backup, restores []cairnv1.Restore, locations []cairnv1.BackupStorageLocation) []gauge {
	var out []gauge
	backupPhases := map[cairnv1.BackupPhase]int{}
	for _, p := range cairnv1.AllBackupPhases {
		backupPhases[p] = 0
	}
	// newest finished backup per schedule, and newest Completed one.
	lastFinished := map[string]*cairnv1.Backup{}
	lastSuccess := map[string]time.Time{}
	for i := range backups {
		b := &backups[i]
		phase := b.EffectivePhase()
		backupPhases[phase]++
		if !phase.IsTerminal() || b.Status.CompletionTimestamp == nil {
			continue
		}
		schedule := b.Labels[cairnv1.ScheduleNameLabel]
		done := b.Status.CompletionTimestamp.Time
		if prev := lastFinished[schedule]; prev == nil || done.After(prev.Status.CompletionTimestamp.Time) {
			lastFinished[schedule] = b
		}
		if phase == cairnv1.BackupPhaseCompleted && done.After(lastSuccess[schedule]) {
			lastSuccess[schedule] = done
		}
	}
	for _, p := range cairnv1.AllBackupPhases {
		out = append(out, gauge{backupsDesc, float64(backupPhases[p]), []string{string(p)}})
	}
	out = append(out, gauge{backupQueueLengthDesc, float64(backupPhases[cairnv1.BackupPhaseQueued]), nil})
	for schedule, b := range lastFinished {
		value := 0.0
		if b.Status.Phase == cairnv1.BackupPhaseCompleted {
			value = 1
		}
		out = append(out, gauge{lastStatusDesc, value, []string{schedule}})
	}
	for schedule, t := range lastSuccess {
		out = append(out, gauge{lastSuccessDesc, float64(t.Unix()), []string{schedule}})
	}

	restorePhases := map[cairnv1.RestorePhase]int{}
	for _, p := range cairnv1.AllRestorePhases {
		restorePhases[p] = 0
	}
	for i := range restores {
		restorePhases[restores[i].EffectivePhase()]++
	}
	for _, p := range cairnv1.AllRestorePhases {
		out = append(out, gauge{restoresDesc, float64(restorePhases[p]), []string{string(p)}})
	}
	out = append(out, gauge{restoreQueueLengthDesc, float64(restorePhases[cairnv1.RestorePhaseQueued]), nil})

	for _, l := range locations {
		value := 0.0
		if l.Status.Phase == cairnv1.StorageLocationPhaseAvailable {
			value = 1
		}
		out = append(out, gauge{locationAvailableDesc, value, []string{l.Name}})
	}
	return out
}

// scheduleGauges is, per schedule, the seconds since its newest Completed backup completed
// (since the schedule's creation when it has none) at now, and, for an Enabled schedule, the
// longest interval between its runs (schedule.ExpectedInterval): a schedule is overdue when
// the first passes the second by a margin (docs/metrics.md).
func scheduleGauges(schedules []cairnv1.Schedule, backups []cairnv1.Backup, now time.Time) []gauge {
	type key struct{ namespace, name string }
	lastSuccess := map[key]time.Time{}
	for i := range backups {
		b := &backups[i]
		name, ok := b.Labels[cairnv1.ScheduleNameLabel]
		if !ok || b.Status.Phase != cairnv1.BackupPhaseCompleted || b.Status.CompletionTimestamp == nil {
			continue
		}
		k := key{b.Namespace, name}
		if done := b.Status.CompletionTimestamp.Time; done.After(lastSuccess[k]) {
			lastSuccess[k] = done
		}
	}
	var out []gauge
	for i := range schedules {
		s := &schedules[i]
		labels := []string{s.Namespace, s.Name}
		since, ok := lastSuccess[key{s.Namespace, s.Name}]
		if !ok {
			since = s.CreationTimestamp.Time
		}
		out = append(out, gauge{sinceSuccessDesc, max(now.Sub(since), 0).Seconds(), labels})
		if s.Status.Phase != cairnv1.SchedulePhaseEnabled || s.Spec.Paused {
			continue
		}
		if cron, err := schedule.Parse(s.Spec.Schedule); err == nil {
			if interval := schedule.ExpectedInterval(cron, now); interval > 0 {
				out = append(out, gauge{expectedIntervalDesc, interval.Seconds(), labels})
			}
		}
	}
	return out
}

// storageGauges is, per storage location, the bytes of the archives its restorable backups
// hold (status.archiveSize, as uploaded; a backup with no status.storageLocation is in the
// default location). Every location has a sample.
func storageGauges(backups []cairnv1.Backup, locations []cairnv1.BackupStorageLocation) []gauge {
	bytes := map[string]int64{}
	defaultName := ""
	for _, l := range locations {
		bytes[l.Name] = 0
		if l.Spec.Default {
			defaultName = l.Name
		}
	}
	for i := range backups {
		b := &backups[i]
		if p := b.Status.Phase; p != cairnv1.BackupPhaseCompleted && p != cairnv1.BackupPhasePartiallyFailed {
			continue
		}
		name := b.Status.StorageLocation
		if name == "" {
			name = defaultName
		}
		if _, known := bytes[name]; known {
			bytes[name] += b.Status.ArchiveSize
		}
	}
	var out []gauge
	for _, l := range locations {
		out = append(out, gauge{storageBytesDesc, float64(bytes[l.Name]), []string{l.Name}})
	}
	return out
}
