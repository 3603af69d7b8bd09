package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

func at(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(d)); return &t }

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func backups() []cairnv1.Backup {
	return []cairnv1.Backup{
		{ObjectMeta: metav1.ObjectMeta{Name: "nightly-20261123030000", CreationTimestamp: ago(9 * time.Hour)},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StorageLocation: "default", Expiration: at(29*24*time.Hour + 15*time.Hour),
				Progress: cairnv1.NewBackupProgress(1204, 1204), Warnings: 2}},
		{ObjectMeta: metav1.ObjectMeta{Name: "web", CreationTimestamp: ago(90 * time.Second)},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseInProgress, StorageLocation: "s3", Progress: cairnv1.NewBackupProgress(45, 100)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db", CreationTimestamp: ago(30 * time.Second)},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseQueued, QueuePosition: 1, StorageLocation: "s3"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "new", CreationTimestamp: ago(time.Second)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "broken", CreationTimestamp: ago(3 * 24 * time.Hour)},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseFailed, FailureReason: "Backup cancelled by user", Errors: 1}},
		{ObjectMeta: metav1.ObjectMeta{Name: "from-cluster-a", CreationTimestamp: ago(time.Hour), Annotations: map[string]string{cairnv1.SyncedFromAnnotation: "dr"}},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StorageLocation: "dr", Progress: cairnv1.NewBackupProgress(12, 12)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "velero-nightly", CreationTimestamp: ago(time.Minute), Annotations: map[string]string{
			cairnv1.SyncedFromAnnotation: "from-velero", cairnv1.VeleroBackupNameAnnotation: "nightly", cairnv1.VeleroBackupUIDAnnotation: "5e1f"}},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhasePartiallyFailed, StorageLocation: "from-velero", Progress: cairnv1.NewBackupProgress(30, 31), Errors: 1}},
	}
}

func TestTables(t *testing.T) {
	restores := []cairnv1.Restore{
		{ObjectMeta: metav1.ObjectMeta{Name: "web-x7k2p", CreationTimestamp: ago(5 * time.Minute)}, Spec: cairnv1.RestoreSpec{BackupName: "web"},
			Status: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseCompleted, Progress: cairnv1.NewRestoreProgress(80, 80), Warnings: 1}},
		{ObjectMeta: metav1.ObjectMeta{Name: "latest", CreationTimestamp: ago(20 * time.Second)}, Spec: cairnv1.RestoreSpec{ScheduleName: "nightly"},
			Status: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseQueued, QueuePosition: 2}},
		{ObjectMeta: metav1.ObjectMeta{Name: "resolved", CreationTimestamp: ago(2 * time.Hour)}, Spec: cairnv1.RestoreSpec{ScheduleName: "nightly"},
			Status: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseFailedValidation, BackupName: "nightly-20261123030000", FailureReason: "backup is not committed"}},
	}
	schedules := []cairnv1.Schedule{
		{ObjectMeta: metav1.ObjectMeta{Name: "nightly", CreationTimestamp: ago(40 * 24 * time.Hour)},
			Spec: cairnv1.ScheduleSpec{Schedule: "0 3 * * *", Template: cairnv1.BackupSpec{StorageLocation: "s3"}},
			Status: cairnv1.ScheduleStatus{Phase: cairnv1.SchedulePhaseEnabled, LastBackup: at(-9 * time.Hour), NextBackup: at(15 * time.Hour),
				ActingAs: &cairnv1.ScheduleRequester{Username: "system:serviceaccount:team-a:lead", Since: *at(-40 * 24 * time.Hour)}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "hourly", CreationTimestamp: ago(time.Hour)},
			Spec:   cairnv1.ScheduleSpec{Schedule: "@every 1h", Paused: true},
			Status: cairnv1.ScheduleStatus{Phase: cairnv1.SchedulePhasePaused}},
	}
	locations := []cairnv1.BackupStorageLocation{
		// accessMode as the API server defaults it.
		{ObjectMeta: metav1.ObjectMeta{Name: "default", CreationTimestamp: ago(100 * 24 * time.Hour)},
			Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true, AccessMode: cairnv1.AccessModeReadWrite,
				Config: map[string]string{"path": "/var/lib/cairn"}},
			Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable, LastValidationTime: at(-30 * time.Second)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "dr", CreationTimestamp: ago(2 * time.Hour)},
			Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderS3, AccessMode: cairnv1.AccessModeReadOnly,
				ObjectStorage: &cairnv1.ObjectStorage{Bucket: "backups", Prefix: "cluster-a/"}},
			Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseUnavailable, Message: `bucket "backups" does not exist`,
				LastValidationTime: at(-10 * time.Second)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "from-velero", CreationTimestamp: ago(time.Hour)},
			Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderS3, AccessMode: cairnv1.AccessModeReadOnly, Format: cairnv1.LocationFormatVelero,
				ObjectStorage: &cairnv1.ObjectStorage{Bucket: "velero-backups", Prefix: "velero"}},
			Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable, LastValidationTime: at(-5 * time.Second)}},
	}
	tests := []struct {
		name  string
		table func(t *testing.T, wide bool) []byte
	}{
		{"backups", func(t *testing.T, wide bool) []byte { return render(t, "backups", backups(), backupColumns, wide) }},
		{"restores", func(t *testing.T, wide bool) []byte { return render(t, "restores", restores, restoreColumns, wide) }},
		{"schedules", func(t *testing.T, wide bool) []byte { return render(t, "schedules", schedules, scheduleColumns, wide) }},
		{"locations", func(t *testing.T, wide bool) []byte {
			return render(t, "backupstoragelocations", locations, locationColumns, wide)
		}},
	}
	for _, tt := range tests {
		for _, wide := range []bool{false, true} {
			name := tt.name + ".golden"
			if wide {
				name = tt.name + "-wide.golden"
			}
			t.Run(name, func(t *testing.T) {
				golden(t, name, tt.table(t, wide))
			})
		}
	}
}

// render is the table `get` prints of items of resource: the API server's (printerTable) with
// the kind's own columns cols.
func render[T any, P object[T]](t *testing.T, resource string, items []T, cols []column[T], wide bool) []byte {
	t.Helper()
	var objs []client.Object
	for i := range items {
		objs = append(objs, P(&items[i]))
	}
	table, err := printerTable(resource, objs, now)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := rowObjects[T](table)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := printTable(&buf, withColumns(table, rows, cols, now), wide); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDescribeBackupGolden(t *testing.T) {
	b := &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team-a", CreationTimestamp: ago(30 * time.Second), Labels: map[string]string{"app": "db"}},
		Spec:       cairnv1.BackupSpec{IncludedResources: []string{"configmaps"}, TTL: &metav1.Duration{Duration: 72 * time.Hour}},
		Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseQueued, QueuePosition: 2, StorageLocation: "default",
			Conditions: []metav1.Condition{{Type: cairnv1.BackupConditionQueued, Status: metav1.ConditionTrue, Reason: cairnv1.ReasonNamespaceOverlap,
				Message: "namespace team-a overlaps running backup web", LastTransitionTime: ago(20 * time.Second)}}},
	}
	e, out, _ := testEnv(t)
	if err := e.describeBackup(b, false); err != nil {
		t.Fatal(err)
	}
	golden(t, "describe-queued-backup.golden", out.Bytes())
}

func TestDescribeVeleroBackupShowsItsOrigin(t *testing.T) {
	b := &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: "velero-nightly", Namespace: "cairn-system", CreationTimestamp: ago(time.Minute), Annotations: map[string]string{
			cairnv1.SyncedFromAnnotation: "from-velero", cairnv1.VeleroBackupNameAnnotation: "nightly", cairnv1.VeleroBackupUIDAnnotation: "5e1f"}},
		Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StorageLocation: "from-velero"},
	}
	e, out, _ := testEnv(t)
	if err := e.describeBackup(b, false); err != nil {
		t.Fatal(err)
	}
	if want := "velero from-velero/nightly (Velero UID 5e1f; no recorded digest"; !strings.Contains(out.String(), want) {
		t.Errorf("describe does not say %q:\n%s", want, out)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 768: "768 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestResultsGroupedByNamespace(t *testing.T) {
	var buf bytes.Buffer
	writeBackupResults(&buf, backup.Results{
		Warnings: []backup.ItemResult{
			{Item: "configmaps/web/settings", Message: "label value truncated"},
			{Item: "persistentvolumes/pv-1", Message: "no snapshot class"},
			{Item: "secrets/api/token", Message: "skipped by an action"},
			{Item: "pods.metrics.k8s.io/web/x", Message: "not listable"},
		},
	})
	writeResourceList(&buf, "Resources", map[string][]string{"configmaps": {"web/b", "web/a"}, "namespaces": {"web"}})
	golden(t, "results.golden", buf.Bytes())
}
