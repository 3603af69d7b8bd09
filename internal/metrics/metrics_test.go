package metrics

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { t := metav1.NewTime(t0.Add(d)); return &t }

func backupIn(phase cairnv1.BackupPhase, schedule string) *cairnv1.Backup {
	b := &cairnv1.Backup{Status: cairnv1.BackupStatus{Phase: phase}}
	if schedule != "" {
		b.Labels = map[string]string{cairnv1.ScheduleNameLabel: schedule}
	}
	return b
}

// synced marks b as made by sync from location dr.
func synced(b *cairnv1.Backup) *cairnv1.Backup {
	b.Annotations = map[string]string{syncedFromAnnotation: "dr"}
	return b
}

// histogramCount is how many observations h has.
func histogramCount(t *testing.T, h prometheus.Observer) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func TestDeletionStarted(t *testing.T) {
	before := testutil.ToFloat64(deletionAttempts)
	DeletionStarted()
	if got := testutil.ToFloat64(deletionAttempts) - before; got != 1 {
		t.Errorf("moved by %v, want 1", got)
	}
}

func TestPhaseTransitionRefused(t *testing.T) {
	refused := refusedPhaseTransitions.WithLabelValues("Backup", "Completed", "InProgress")
	other := refusedPhaseTransitions.WithLabelValues("Restore", "Completed", "InProgress")
	before, otherBefore := testutil.ToFloat64(refused), testutil.ToFloat64(other)
	PhaseTransitionRefused("Backup", "Completed", "InProgress")
	if got := testutil.ToFloat64(refused) - before; got != 1 {
		t.Errorf("moved by %v, want 1", got)
	}
	if got := testutil.ToFloat64(other) - otherBefore; got != 0 {
		t.Errorf("another kind's count moved by %v", got)
	}
}

func TestObserveBackup(t *testing.T) {
	tests := []struct {
		name     string
		old, cur *cairnv1.Backup
		counter  prometheus.Collector // the one that must move, by want
		want     float64
	}{
		{"started", backupIn(cairnv1.BackupPhaseReadyToStart, "nightly"), backupIn(cairnv1.BackupPhaseInProgress, "nightly"),
			backupAttempts.WithLabelValues("nightly"), 1},
		{"completed", backupIn(cairnv1.BackupPhaseFinalizing, ""), backupIn(cairnv1.BackupPhaseCompleted, ""),
			backupSuccesses.WithLabelValues(""), 1},
		{"partially failed", backupIn(cairnv1.BackupPhaseFinalizingPartiallyFailed, "a"), backupIn(cairnv1.BackupPhasePartiallyFailed, "a"),
			backupPartialFailures.WithLabelValues("a"), 1},
		{"failed", backupIn(cairnv1.BackupPhaseFinalizingCancelled, "a"), backupIn(cairnv1.BackupPhaseFailed, "a"),
			backupFailures.WithLabelValues("a"), 1},
		{"failed validation", backupIn("", "a"), backupIn(cairnv1.BackupPhaseFailedValidation, "a"),
			backupValidationFailures.WithLabelValues("a"), 1},
		{"Deleting is not an attempt (the deletion reconciler counts those)", backupIn(cairnv1.BackupPhaseCompleted, ""), backupIn(cairnv1.BackupPhaseDeleting, ""), deletionAttempts, 0},
		{"deletion failed", backupIn(cairnv1.BackupPhaseDeleting, ""), backupIn(cairnv1.BackupPhaseDeletionFailed, ""), deletionFailures, 1},
		{"a first deletion failed before it showed Deleting", backupIn(cairnv1.BackupPhaseCompleted, ""), backupIn(cairnv1.BackupPhaseDeletionFailed, ""), deletionFailures, 1},
		{"the same phase again (a progress write) counts nothing", backupIn(cairnv1.BackupPhaseInProgress, "b"), backupIn(cairnv1.BackupPhaseInProgress, "b"),
			backupAttempts.WithLabelValues("b"), 0},
		{"New written over \"\" counts nothing", backupIn("", "c"), backupIn(cairnv1.BackupPhaseNew, "c"), backupAttempts.WithLabelValues("c"), 0},
		{"a backup found in storage is counted as synced", synced(backupIn("", "d")), synced(backupIn(cairnv1.BackupPhaseCompleted, "d")),
			syncImported.WithLabelValues("dr"), 1},
		{"… and not as a success here", synced(backupIn("", "e")), synced(backupIn(cairnv1.BackupPhaseCompleted, "e")),
			backupSuccesses.WithLabelValues("e"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testutil.ToFloat64(tt.counter)
			ObserveBackup(tt.old, tt.cur)
			if got := testutil.ToFloat64(tt.counter) - before; got != tt.want {
				t.Errorf("moved by %v, want %v", got, tt.want)
			}
		})
	}
}

func TestObserveBackupDurationItemsAndQueueWait(t *testing.T) {
	old := backupIn(cairnv1.BackupPhaseFinalizing, "timed")
	cur := backupIn(cairnv1.BackupPhaseCompleted, "timed")
	cur.Status.StartTimestamp, cur.Status.CompletionTimestamp = at(0), at(90*time.Second)
	cur.Status.Progress = cairnv1.NewBackupProgress(12, 12)
	items := testutil.ToFloat64(backupItems.WithLabelValues("timed"))
	ObserveBackup(old, cur)
	if got := testutil.ToFloat64(backupItems.WithLabelValues("timed")) - items; got != 12 {
		t.Errorf("items moved by %v, want 12", got)
	}
	if got := histogramCount(t, backupDuration.WithLabelValues("timed")); got != 1 {
		t.Errorf("duration observations %d, want 1", got)
	}

	queued := backupIn(cairnv1.BackupPhaseQueued, "")
	queued.Status.PhaseTransitionTime = at(0)
	dequeued := backupIn(cairnv1.BackupPhaseReadyToStart, "")
	dequeued.Status.PhaseTransitionTime = at(time.Minute)
	waits := histogramCount(t, backupQueueWait)
	ObserveBackup(queued, dequeued)
	if got := histogramCount(t, backupQueueWait) - waits; got != 1 {
		t.Errorf("queue wait observations %d, want 1", got)
	}
	// A transition time going backwards (clock skew between replicas) is no observation.
	dequeued.Status.PhaseTransitionTime = at(-time.Minute)
	ObserveBackup(queued, dequeued)
	if got := histogramCount(t, backupQueueWait) - waits; got != 1 {
		t.Errorf("queue wait observations %d, want still 1", got)
	}
}

func TestObserveRestore(t *testing.T) {
	restore := func(phase cairnv1.RestorePhase) *cairnv1.Restore {
		return &cairnv1.Restore{Status: cairnv1.RestoreStatus{Phase: phase}}
	}
	tests := []struct {
		name     string
		from, to cairnv1.RestorePhase
		counter  prometheus.Collector
	}{
		{"started", cairnv1.RestorePhaseReadyToStart, cairnv1.RestorePhaseInProgress, restoreAttempts.WithLabelValues("")},
		{"completed", cairnv1.RestorePhaseFinalizing, cairnv1.RestorePhaseCompleted, restoreSuccesses.WithLabelValues("")},
		{"partially failed", cairnv1.RestorePhaseFinalizingPartiallyFailed, cairnv1.RestorePhasePartiallyFailed, restorePartialFailures.WithLabelValues("")},
		{"failed", cairnv1.RestorePhaseFinalizingCancelled, cairnv1.RestorePhaseFailed, restoreFailures.WithLabelValues("")},
		{"failed validation", cairnv1.RestorePhaseNew, cairnv1.RestorePhaseFailedValidation, restoreValidationFailures.WithLabelValues("")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testutil.ToFloat64(tt.counter)
			ObserveRestore(restore(tt.from), restore(tt.to))
			if got := testutil.ToFloat64(tt.counter) - before; got != 1 {
				t.Errorf("moved by %v, want 1", got)
			}
		})
	}
}

func TestGauges(t *testing.T) {
	finished := func(name, schedule string, phase cairnv1.BackupPhase, minutes int) cairnv1.Backup {
		b := backupIn(phase, schedule)
		b.Name = name
		b.Status.CompletionTimestamp = at(time.Duration(minutes) * time.Minute)
		return *b
	}
	backups := []cairnv1.Backup{
		finished("n1", "nightly", cairnv1.BackupPhaseCompleted, 10),
		finished("n2", "nightly", cairnv1.BackupPhaseFailed, 20), // the newest of nightly failed
		finished("h1", "hourly", cairnv1.BackupPhasePartiallyFailed, 5),
		finished("h2", "hourly", cairnv1.BackupPhaseCompleted, 30), // the newest of hourly succeeded
		finished("m1", "", cairnv1.BackupPhaseCompleted, 1),
		*backupIn(cairnv1.BackupPhaseQueued, "hourly"),
		*backupIn(cairnv1.BackupPhaseQueued, ""),
		*backupIn("", ""),
	}
	restores := []cairnv1.Restore{{Status: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseQueued}}, {}}
	locations := []cairnv1.BackupStorageLocation{
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s3"}, Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseUnavailable}},
		{ObjectMeta: metav1.ObjectMeta{Name: "new"}},
	}
	got := map[string]float64{}
	for _, g := range gauges(backups, restores, locations) {
		key := g.desc.String()
		for _, l := range g.labels {
			key += "/" + l
		}
		got[key] = g.value
	}
	value := func(d *prometheus.Desc, labels ...string) float64 {
		key := d.String()
		for _, l := range labels {
			key += "/" + l
		}
		v, ok := got[key]
		if !ok {
			t.Errorf("no sample %s %v", d, labels)
		}
		return v
	}
	checks := []struct {
		name string
		got  float64
		want float64
	}{
		{"backups Completed", value(backupsDesc, "Completed"), 3},
		{"backups New (\"\" counts as New)", value(backupsDesc, "New"), 1},
		{"backups Deleting (every phase has a sample)", value(backupsDesc, "Deleting"), 0},
		{"backup queue length", value(backupQueueLengthDesc), 2},
		{"last success of nightly", value(lastSuccessDesc, "nightly"), float64(t0.Add(10 * time.Minute).Unix())},
		{"last success of hourly", value(lastSuccessDesc, "hourly"), float64(t0.Add(30 * time.Minute).Unix())},
		{"last success by hand", value(lastSuccessDesc, ""), float64(t0.Add(time.Minute).Unix())},
		{"last status of nightly (its newest failed)", value(lastStatusDesc, "nightly"), 0},
		{"last status of hourly", value(lastStatusDesc, "hourly"), 1},
		{"restores New", value(restoresDesc, "New"), 1},
		{"restore queue length", value(restoreQueueLengthDesc), 1},
		{"default available", value(locationAvailableDesc, "default"), 1},
		{"s3 unavailable", value(locationAvailableDesc, "s3"), 0},
		{"a location not checked yet", value(locationAvailableDesc, "new"), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// samples is gauges by desc and label values, joined by "/".
func samples(gs []gauge) map[string]float64 {
	m := map[string]float64{}
	for _, g := range gs {
		key := g.desc.String()
		for _, l := range g.labels {
			key += "/" + l
		}
		m[key] = g.value
	}
	return m
}

func sampleKey(d *prometheus.Desc, labels ...string) string {
	key := d.String()
	for _, l := range labels {
		key += "/" + l
	}
	return key
}

func TestScheduleGauges(t *testing.T) {
	now := t0.Add(48 * time.Hour)
	schedule := func(ns, name, cron string, phase cairnv1.SchedulePhase, paused bool) cairnv1.Schedule {
		return cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(t0)},
			Spec: cairnv1.ScheduleSpec{Schedule: cron, Paused: paused}, Status: cairnv1.ScheduleStatus{Phase: phase}}
	}
	completed := func(ns, name string, phase cairnv1.BackupPhase, hoursAgo int) cairnv1.Backup {
		b := backupIn(phase, name)
		b.Namespace = ns
		done := metav1.NewTime(now.Add(-time.Duration(hoursAgo) * time.Hour))
		b.Status.CompletionTimestamp = &done
		return *b
	}
	schedules := []cairnv1.Schedule{
		schedule("a", "nightly", "0 3 * * *", cairnv1.SchedulePhaseEnabled, false),
		schedule("b", "nightly", "0 3 * * 1-5", cairnv1.SchedulePhaseEnabled, false),
		schedule("a", "never", "@every 6h", cairnv1.SchedulePhaseEnabled, false),
		schedule("a", "paused", "@hourly", cairnv1.SchedulePhasePaused, true),
		schedule("a", "broken", "@hourly", cairnv1.SchedulePhaseFailedValidation, false),
	}
	backups := []cairnv1.Backup{
		completed("a", "nightly", cairnv1.BackupPhaseCompleted, 30),
		completed("a", "nightly", cairnv1.BackupPhaseCompleted, 6),  // the newest success
		completed("a", "nightly", cairnv1.BackupPhaseFailed, 1),     // not a success
		completed("b", "nightly", cairnv1.BackupPhaseCompleted, 40), // same name, another namespace
		completed("a", "never", cairnv1.BackupPhasePartiallyFailed, 2),
	}
	got := samples(scheduleGauges(schedules, backups, now))
	want := map[string]float64{
		sampleKey(sinceSuccessDesc, "a", "nightly"):     6 * 3600,
		sampleKey(sinceSuccessDesc, "b", "nightly"):     40 * 3600,
		sampleKey(sinceSuccessDesc, "a", "never"):       48 * 3600, // since its creation
		sampleKey(sinceSuccessDesc, "a", "paused"):      48 * 3600,
		sampleKey(sinceSuccessDesc, "a", "broken"):      48 * 3600,
		sampleKey(expectedIntervalDesc, "a", "nightly"): 24 * 3600,
		sampleKey(expectedIntervalDesc, "b", "nightly"): 72 * 3600,
		sampleKey(expectedIntervalDesc, "a", "never"):   6 * 3600,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %t), want %v", k, g, ok, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected sample %s = %v", k, got[k])
		}
	}
}

func TestStorageGauges(t *testing.T) {
	stored := func(location string, phase cairnv1.BackupPhase, size int64) cairnv1.Backup {
		return cairnv1.Backup{Status: cairnv1.BackupStatus{Phase: phase, StorageLocation: location, ArchiveSize: size}}
	}
	locations := []cairnv1.BackupStorageLocation{
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: cairnv1.BackupStorageLocationSpec{Default: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s3"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "empty"}},
	}
	backups := []cairnv1.Backup{
		stored("default", cairnv1.BackupPhaseCompleted, 100),
		stored("", cairnv1.BackupPhasePartiallyFailed, 20), // the default location
		stored("s3", cairnv1.BackupPhaseCompleted, 3000),
		stored("s3", cairnv1.BackupPhaseInProgress, 7),      // not committed
		stored("s3", cairnv1.BackupPhaseFailed, 9),          // its data was removed
		stored("gone", cairnv1.BackupPhaseCompleted, 1<<20), // no such location
	}
	got := samples(storageGauges(backups, locations))
	want := map[string]float64{
		sampleKey(storageBytesDesc, "default"): 120,
		sampleKey(storageBytesDesc, "s3"):      3000,
		sampleKey(storageBytesDesc, "empty"):   0,
	}
	if len(got) != len(want) {
		t.Errorf("samples %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestNames(t *testing.T) {
	names := Names()
	for _, want := range []string{
		"cairn_backup_success_total", "cairn_backup_duration_seconds_bucket", "cairn_backup_duration_seconds_count",
		"cairn_backup_queue_wait_seconds_sum", "cairn_backups", "cairn_schedule_seconds_since_last_success",
		"cairn_schedule_expected_interval_seconds", "cairn_backup_storage_bytes", "cairn_volume_repository_size_bytes",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("Names() lacks %s", want)
		}
	}
	for _, unwanted := range []string{"cairn_backup_duration_seconds", "cairn_backups_bucket", ""} {
		if slices.Contains(names, unwanted) {
			t.Errorf("Names() has %q", unwanted)
		}
	}
	// Every collector Names reads is on the registry the manager serves: registering it again
	// is refused as a duplicate.
	for _, c := range registered {
		var already prometheus.AlreadyRegisteredError
		if err := ctrlmetrics.Registry.Register(c); !errors.As(err, &already) {
			t.Errorf("a collector of Names is not on controller-runtime's registry (Register: %v)", err)
		}
	}
}
