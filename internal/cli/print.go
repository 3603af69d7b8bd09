package cli

import (
	"fmt"
	"io"
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

// table is rows under headers; wide columns are shown only with -o wide.
type table struct {
	headers []string
	wide    []bool
	rows    [][]string
}

// write prints t as kubectl does: upper-case headers, columns aligned with spaces, no borders.
func (t table) write(w io.Writer, wide bool) error {
	tw := printers.GetNewTabWriter(w)
	line := func(cells []string) {
		var keep []string
		for i, c := range cells {
			if wide || !t.wide[i] {
				keep = append(keep, c)
			}
		}
		fmt.Fprintln(tw, strings.Join(keep, "\t"))
	}
	line(t.headers)
	for _, r := range t.rows {
		line(r)
	}
	return tw.Flush()
}

// col is one column of a table.
type col struct {
	header string
	wide   bool
}

func newTable(cols ...col) table {
	t := table{}
	for _, c := range cols {
		t.headers = append(t.headers, c.header)
		t.wide = append(t.wide, c.wide)
	}
	return t
}

// age is how long ago t was, as kubectl says it (5m, 3h2m, 12d); "" for no time.
func age(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

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

func position(n int32) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(int(n))
}

func backupTable(items []cairnv1.Backup, now time.Time) table {
	t := newTable(col{header: "NAME"}, col{header: "PHASE"}, col{header: "QUEUE"}, col{header: "PROGRESS"},
		col{header: "ERRORS"}, col{header: "WARNINGS"}, col{header: "LOCATION"}, col{header: "EXPIRES"}, col{header: "AGE"},
		col{header: "FAILURE", wide: true})
	for _, b := range items {
		progress := ""
		if b.Status.Progress != nil {
			progress = fmt.Sprintf("%d/%d", b.Status.Progress.ItemsBackedUp, b.Status.Progress.TotalItems)
		}
		t.rows = append(t.rows, []string{b.Name, string(b.EffectivePhase()), position(b.Status.QueuePosition), progress,
			count(b.Status.Errors), count(b.Status.Warnings), b.Status.StorageLocation, until(b.Status.Expiration, now),
			age(&b.CreationTimestamp, now), b.Status.FailureReason})
	}
	return t
}

func restoreTable(items []cairnv1.Restore, now time.Time) table {
	t := newTable(col{header: "NAME"}, col{header: "BACKUP"}, col{header: "PHASE"}, col{header: "QUEUE"}, col{header: "PROGRESS"},
		col{header: "ERRORS"}, col{header: "WARNINGS"}, col{header: "AGE"}, col{header: "FAILURE", wide: true})
	for _, r := range items {
		progress := ""
		if r.Status.Progress != nil {
			progress = fmt.Sprintf("%d/%d", r.Status.Progress.ItemsRestored, r.Status.Progress.TotalItems)
		}
		backupName := r.Spec.BackupName
		if r.Status.BackupName != "" {
			backupName = r.Status.BackupName
		} else if backupName == "" {
			backupName = "schedule " + r.Spec.ScheduleName
		}
		t.rows = append(t.rows, []string{r.Name, backupName, string(r.EffectivePhase()), position(r.Status.QueuePosition), progress,
			count(r.Status.Errors), count(r.Status.Warnings), age(&r.CreationTimestamp, now), r.Status.FailureReason})
	}
	return t
}

func scheduleTable(items []cairnv1.Schedule, now time.Time) table {
	t := newTable(col{header: "NAME"}, col{header: "SCHEDULE"}, col{header: "PHASE"}, col{header: "PAUSED"},
		col{header: "LAST BACKUP"}, col{header: "NEXT BACKUP"}, col{header: "AGE"}, col{header: "LOCATION", wide: true})
	for _, s := range items {
		t.rows = append(t.rows, []string{s.Name, s.Spec.Schedule, string(s.EffectivePhase()), strconv.FormatBool(s.Spec.Paused),
			until(s.Status.LastBackup, now), until(s.Status.NextBackup, now), age(&s.CreationTimestamp, now), s.Spec.Template.StorageLocation})
	}
	return t
}

func locationTable(items []cairnv1.BackupStorageLocation, now time.Time) table {
	t := newTable(col{header: "NAME"}, col{header: "PROVIDER"}, col{header: "BUCKET/PATH"}, col{header: "PHASE"},
		col{header: "ACCESS MODE"}, col{header: "DEFAULT"}, col{header: "AGE"}, col{header: "MESSAGE", wide: true})
	for _, l := range items {
		where := l.Spec.Config[cairnv1.ConfigKeyPath]
		if l.Spec.ObjectStorage != nil && l.Spec.ObjectStorage.Bucket != "" {
			where = l.Spec.ObjectStorage.Bucket
			if l.Spec.ObjectStorage.Prefix != "" {
				where += "/" + strings.Trim(l.Spec.ObjectStorage.Prefix, "/")
			}
		}
		mode := string(l.Spec.AccessMode)
		if mode == "" {
			mode = string(cairnv1.AccessModeReadWrite)
		}
		t.rows = append(t.rows, []string{l.Name, string(l.Spec.Provider), where, string(l.Status.Phase), mode,
			strconv.FormatBool(l.Spec.Default), age(&l.CreationTimestamp, now), l.Status.Message})
	}
	return t
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

// printList prints a list: a table, or the list as JSON or YAML.
func (e *env) printList(list runtime.Object, t table, namespace string) error {
	if e.output == "json" || e.output == "yaml" {
		return e.printStructured(list)
	}
	if len(t.rows) == 0 {
		e.errorf("No resources found in %s namespace.\n", namespace)
		return nil
	}
	return t.write(e.streams.Out, e.output == "wide")
}
