package cli

import (
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// until is how long until t ("in 3h"), or how long ago it passed ("5m ago").
func until(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	if d := t.Sub(now); d >= 0 {
		return "in " + duration.HumanDuration(d)
	}
	return duration.HumanDuration(now.Sub(t.Time)) + " ago"
}

func count(n int32) string { return strconv.Itoa(int(n)) }

// The kinds' own columns (see column), beside the server's printer columns. A phase is New
// before the queue has seen the object, where the server has none; errors and warnings are
// counted from 0, where the server has nothing for none; expiry and a schedule's runs are
// relative to now, where the server has a timestamp or only an age.

var backupColumns = []column[cairnv1.Backup]{
	{name: "Phase", after: "Name", cell: func(b *cairnv1.Backup, _ time.Time) string { return string(b.EffectivePhase()) }},
	{name: "Errors", after: "Progress", cell: func(b *cairnv1.Backup, _ time.Time) string { return count(b.Status.Errors) }},
	{name: "Warnings", after: "Errors", cell: func(b *cairnv1.Backup, _ time.Time) string { return count(b.Status.Warnings) }},
	{name: "Expires", after: "Location", cell: func(b *cairnv1.Backup, now time.Time) string { return until(b.Status.Expiration, now) }},
	{name: "Origin", after: "Age", cell: func(b *cairnv1.Backup, _ time.Time) string { return backupOrigin(b) }},
}

// backupOrigin is where a backup came from: "" for one this cluster made, "sync <location>"
// for one synced from storage, "velero <location>/<name>" for one synced from a Velero
// location (the Velero backup's name).
func backupOrigin(b *cairnv1.Backup) string {
	from := b.Annotations[cairnv1.SyncedFromAnnotation]
	switch {
	case b.IsFromVelero():
		if from == "" {
			from = b.Status.StorageLocation
		}
		return "velero " + from + "/" + b.Annotations[cairnv1.VeleroBackupNameAnnotation]
	case from != "":
		return "sync " + from
	}
	return ""
}

// restoreBackup is the backup a restore reads: the one it resolved, else the one it names,
// else its schedule's (until the newest backup of the schedule is resolved).
func restoreBackup(r *cairnv1.Restore, _ time.Time) string {
	switch {
	case r.Status.BackupName != "":
		return r.Status.BackupName
	case r.Spec.BackupName != "":
		return r.Spec.BackupName
	}
	return "schedule " + r.Spec.ScheduleName
}

var restoreColumns = []column[cairnv1.Restore]{
	{name: "Backup", after: "Name", cell: restoreBackup},
	{name: "Phase", after: "Backup", cell: func(r *cairnv1.Restore, _ time.Time) string { return string(r.EffectivePhase()) }},
	{name: "Errors", after: "Progress", cell: func(r *cairnv1.Restore, _ time.Time) string { return count(r.Status.Errors) }},
	{name: "Warnings", after: "Errors", cell: func(r *cairnv1.Restore, _ time.Time) string { return count(r.Status.Warnings) }},
}

var scheduleColumns = []column[cairnv1.Schedule]{
	{name: "Phase", after: "Schedule", cell: func(s *cairnv1.Schedule, _ time.Time) string { return string(s.EffectivePhase()) }},
	{name: "Last Backup", after: "Paused", cell: func(s *cairnv1.Schedule, now time.Time) string { return until(s.Status.LastBackup, now) }},
	{name: "Next Backup", after: "Last Backup", cell: func(s *cairnv1.Schedule, now time.Time) string { return until(s.Status.NextBackup, now) }},
}

// locationWhere is where a location keeps backups: its bucket and prefix, or its path.
func locationWhere(l *cairnv1.BackupStorageLocation, _ time.Time) string {
	if l.Spec.ObjectStorage != nil && l.Spec.ObjectStorage.Bucket != "" {
		where := l.Spec.ObjectStorage.Bucket
		if l.Spec.ObjectStorage.Prefix != "" {
			where += "/" + strings.Trim(l.Spec.ObjectStorage.Prefix, "/")
		}
		return where
	}
	return l.Spec.Config[cairnv1.ConfigKeyPath]
}

var locationColumns = []column[cairnv1.BackupStorageLocation]{
	{name: "Bucket/Path", after: "Provider", cell: locationWhere},
}

// printStructured prints obj (an object or a list) as JSON or YAML, with its apiVersion and
// kind, and those of its items; managed fields are left out, as kubectl does.
func (e *env) printStructured(obj runtime.Object) error {
	scheme := Scheme()
	setKind := func(o runtime.Object) error {
		gvk, err := apiutil.GVKForObject(o, scheme)
		if err != nil {
			return err
		}
		o.GetObjectKind().SetGroupVersionKind(gvk)
		if m, err := meta.Accessor(o); err == nil {
			m.SetManagedFields(nil)
		}
		return nil
	}
	if err := setKind(obj); err != nil {
		return err
	}
	if meta.IsListType(obj) {
		if err := meta.EachListItem(obj, setKind); err != nil {
			return err
		}
	}
	var p printers.ResourcePrinter = &printers.JSONPrinter{}
	if e.output == "yaml" {
		p = &printers.YAMLPrinter{}
	}
	return p.PrintObj(obj, e.streams.Out)
}
