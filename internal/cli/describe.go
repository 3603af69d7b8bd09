package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/restore"
)

// describer writes "Key:  value" lines, aligned, and indented sections.
type describer struct {
	w   io.Writer
	now time.Time
}

func (d describer) line(indent int, key, format string, args ...any) {
	fmt.Fprintf(d.w, "%s%s:\t%s\n", strings.Repeat("  ", indent), key, fmt.Sprintf(format, args...))
}

func (d describer) section(title string) {
	fmt.Fprintf(d.w, "%s:\n", title)
}

// when is a time and how long ago or until it is.
func (d describer) when(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "<none>"
	}
	return fmt.Sprintf("%s (%s)", t.UTC().Format(time.RFC3339), until(t, d.now))
}

func orNone(items []string) string {
	if len(items) == 0 {
		return "<none>"
	}
	return strings.Join(items, ", ")
}

func orAll(items []string) string {
	if len(items) == 0 {
		return "*"
	}
	return strings.Join(items, ", ")
}

func tristate(b *bool, unset string) string {
	if b == nil {
		return unset
	}
	if *b {
		return "yes"
	}
	return "no"
}

func selectorString(s *metav1.LabelSelector) string {
	if s == nil {
		return "<none>"
	}
	return metav1.FormatLabelSelector(s)
}

func orSelectors(ss []*metav1.LabelSelector) string {
	if len(ss) == 0 {
		return "<none>"
	}
	var parts []string
	for _, s := range ss {
		parts = append(parts, metav1.FormatLabelSelector(s))
	}
	return strings.Join(parts, " or ")
}

func labelsString(l map[string]string) string {
	if len(l) == 0 {
		return "<none>"
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

func (d describer) filters(f cairnv1.ItemFilters) {
	d.line(1, "Included namespaces", "%s", orAll(f.IncludedNamespaces))
	d.line(1, "Excluded namespaces", "%s", orNone(f.ExcludedNamespaces))
	d.line(1, "Included resources", "%s", orAll(f.IncludedResources))
	d.line(1, "Excluded resources", "%s", orNone(f.ExcludedResources))
	d.line(1, "Cluster-scoped resources", "%s", tristate(f.IncludeClusterResources, "only those namespaced items need"))
	d.line(1, "Label selector", "%s", selectorString(f.LabelSelector))
	d.line(1, "Or label selectors", "%s", orSelectors(f.OrLabelSelectors))
}

func (d describer) backupSpec(indent int, s cairnv1.BackupSpec) {
	d.filters(s.Filters())
	location := s.StorageLocation
	if location == "" {
		location = "<the default>"
	}
	d.line(indent, "Storage location", "%s", location)
	ttl := "the manager's default"
	if s.TTL != nil {
		ttl = s.TTL.Duration.String()
	}
	d.line(indent, "TTL", "%s", ttl)
	d.line(indent, "Snapshot volumes", "%s", tristate(s.SnapshotVolumes, "yes, where a VolumeSnapshotClass exists"))
	d.line(indent, "Volume data", "%s", volumeDataSelection(s.DefaultVolumesToFsBackup))
	d.line(indent, "Item operation timeout", "%s", s.GetItemOperationTimeout())
	d.line(indent, "Hooks", "%s", hookSpecs(s.Hooks))
}

// hooksLine counts the hooks a backup or restore ran (status.hookStatus); the failures are
// named among its errors and warnings (a restore's, in its failed operations' events).
func hooksLine(s *cairnv1.HookStatus) string {
	if s == nil || s.HooksAttempted == 0 {
		return "none run"
	}
	return fmt.Sprintf("%d run, %d failed", s.HooksAttempted, s.HooksFailed)
}

// hookSpecs names a spec's hook specs, with how many pre and post hooks each has; pods'
// hook annotations are not in the spec.
func hookSpecs(h *cairnv1.BackupHooks) string {
	if h == nil || len(h.Resources) == 0 {
		return "pods' hook annotations only"
	}
	var specs []string
	for _, r := range h.Resources {
		specs = append(specs, fmt.Sprintf("%s (%d pre, %d post)", r.Name, len(r.Pre), len(r.Post)))
	}
	return strings.Join(specs, ", ") + "; pods' hook annotations take their place"
}

// restoreHookSpecs names a restore's hook specs, with how many init and exec hooks each has;
// pods' restore hook annotations are not in the spec.
func restoreHookSpecs(h *cairnv1.RestoreHooks) string {
	if h == nil || len(h.Resources) == 0 {
		return "pods' restore hook annotations only"
	}
	var specs []string
	for _, r := range h.Resources {
		inits, execs := 0, 0
		for _, ph := range r.PostHooks {
			switch {
			case ph.Init != nil:
				inits++
			case ph.Exec != nil:
				execs++
			}
		}
		specs = append(specs, fmt.Sprintf("%s (%d init, %d exec)", r.Name, inits, execs))
	}
	return strings.Join(specs, ", ") + "; pods' restore hook annotations take their place"
}

// volumeDataSelection says which pod volumes' data a backup copies (spec.defaultVolumesToFsBackup).
func volumeDataSelection(all *bool) string {
	if all != nil && *all {
		return "every PVC and emptyDir volume, except those in backup.cairn.dev/backup-volumes-excludes"
	}
	return "the volumes pods list in backup.cairn.dev/backup-volumes"
}

func (d describer) conditions(conds []metav1.Condition) {
	if len(conds) == 0 {
		return
	}
	d.section("Conditions")
	for _, c := range conds {
		d.line(1, c.Type, "%s, %s: %s (%s)", c.Status, c.Reason, c.Message, until(&c.LastTransitionTime, d.now))
	}
}

// phaseLine is the phase with why it is there: the queue position and the Queued condition,
// or the failure.
func phaseLine(phase string, position int32, conds []metav1.Condition, failure string) string {
	if position > 0 {
		line := fmt.Sprintf("%s (position %d in the queue)", phase, position)
		if c := meta.FindStatusCondition(conds, cairnv1.BackupConditionQueued); c != nil && c.Status == metav1.ConditionTrue && c.Message != "" {
			line += ": " + c.Message
		}
		return line
	}
	if failure != "" {
		return phase + ": " + failure
	}
	return phase
}

// humanBytes is a size as people read it: 768 B, 1.5 KiB, 2.0 GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func operationsLine(attempted, completed, failed int32) string {
	if attempted == 0 {
		return "none"
	}
	return fmt.Sprintf("%d of %d completed, %d failed", completed, attempted, failed)
}

// describeBackup writes what a person wants to know about a backup. Its warnings and errors
// come from the results file when there are any (and with --details, the list of what it
// holds); a file that cannot be read is said, not fatal.
func (e *env) describeBackup(b *cairnv1.Backup, details bool) error {
	tw := printers.GetNewTabWriter(e.streams.Out)
	d := describer{w: tw, now: e.clock.Now()}
	d.line(0, "Name", "%s", b.Name)
	d.line(0, "Namespace", "%s", b.Namespace)
	d.line(0, "Labels", "%s", labelsString(b.Labels))
	d.line(0, "Phase", "%s", phaseLine(string(b.EffectivePhase()), b.Status.QueuePosition, b.Status.Conditions, b.Status.FailureReason))
	if len(b.Status.ValidationErrors) > 0 {
		d.section("Validation errors")
		for _, v := range b.Status.ValidationErrors {
			fmt.Fprintf(tw, "  - %s\n", v)
		}
	}
	if b.Status.LastDeletionError != "" {
		d.line(0, "Last deletion error", "%s (next attempt %s)", b.Status.LastDeletionError, d.when(b.Status.NextDeletionAttempt))
	}
	d.line(0, "Created", "%s", d.when(&b.CreationTimestamp))
	d.line(0, "Started", "%s", d.when(b.Status.StartTimestamp))
	d.line(0, "Completed", "%s", d.when(b.Status.CompletionTimestamp))
	d.line(0, "Expiration", "%s", d.when(b.Status.Expiration))
	location := b.Status.StorageLocation
	if location == "" {
		location = "<not chosen yet>"
	}
	d.line(0, "Storage location", "%s", location)
	if origin := backupOrigin(b); origin != "" {
		if b.IsFromVelero() {
			origin += fmt.Sprintf(" (Velero UID %s; no recorded digest: a restore reads the archive to its end but cannot verify it)", b.Annotations[cairnv1.VeleroBackupUIDAnnotation])
		}
		d.line(0, "Origin", "%s", origin)
	}
	progress := "<not started>"
	if p := b.Status.Progress; p != nil {
		progress = fmt.Sprintf("%d of %d items backed up", p.ItemsBackedUp, p.TotalItems)
	}
	d.line(0, "Progress", "%s", progress)
	if p := b.Status.Progress; p != nil && (p.VolumeBytesDone > 0 || p.VolumeBytesTotal > 0) {
		d.line(0, "Volume bytes", "%s of %s read", humanBytes(p.VolumeBytesDone), humanBytes(p.VolumeBytesTotal))
	}
	d.line(0, "Operations", "%s", operationsLine(b.Status.BackupItemOperationsAttempted, b.Status.BackupItemOperationsCompleted, b.Status.BackupItemOperationsFailed))
	d.line(0, "Hooks", "%s", hooksLine(b.Status.HookStatus))
	if b.Status.ArchiveSHA256 != "" {
		d.line(0, "Archive", "%s, SHA-256 %s", humanBytes(b.Status.ArchiveSize), b.Status.ArchiveSHA256)
	}
	d.line(0, "Warnings", "%d", b.Status.Warnings)
	d.line(0, "Errors", "%d", b.Status.Errors)
	d.section("Spec")
	d.backupSpec(1, b.Spec)
	d.conditions(b.Status.Conditions)
	if err := tw.Flush(); err != nil {
		return err
	}
	ctx := context.Background()
	if details {
		if err := e.writeBackupVolumes(ctx, b); err != nil {
			return err
		}
	}
	if b.Status.Phase.IsTerminal() && (details || b.Status.Warnings+b.Status.Errors > 0) {
		var results backup.Results
		if err := e.readJSON(ctx, b.Namespace, b.Name, cairnv1.DownloadTargetBackupResults, &results); err != nil {
			e.printf("\nWarnings and errors: cannot read the results file: %v\n", err)
		} else {
			e.printf("\n")
			writeBackupResults(e.streams.Out, results)
		}
	}
	if details && b.Status.Phase.IsTerminal() {
		var list map[string][]string
		if err := e.readJSON(ctx, b.Namespace, b.Name, cairnv1.DownloadTargetBackupResourceList, &list); err != nil {
			e.printf("\nResources: cannot read the resource list: %v\n", err)
		} else {
			e.printf("\n")
			writeResourceList(e.streams.Out, "Resources", list)
		}
	}
	return nil
}

// writeBackupVolumes lists the copies of backup b's pod volumes: its PodVolumeBackups, in the
// operator's namespace (--cairn-namespace), labelled with b's UID. Someone who may not list
// them (a team, whose backups' PodVolumeBackups are the operator's) is told so in one line:
// the backup's Volume bytes sum them up. Any other failure to list them is said too, and is
// not the command's error either.
func (e *env) writeBackupVolumes(ctx context.Context, b *cairnv1.Backup) error {
	if b.UID == "" {
		return nil // not created (yet): no volume copy can name it
	}
	var list cairnv1.PodVolumeBackupList
	return e.writePodVolumes(ctx, &list, "PodVolumeBackups", cairnv1.PodVolumeBackupUIDLabel, b.UID, func() []volumeRow {
		rows := make([]volumeRow, 0, len(list.Items))
		for _, p := range list.Items {
			rows = append(rows, volumeRow{pod: p.Spec.Pod, volume: p.Spec.Volume, status: p.Status, snapshot: p.Status.SnapshotID})
		}
		return rows
	}, true)
}

// writeRestoreVolumes lists the restores of restore r's pod volumes: its PodVolumeRestores, as
// writeBackupVolumes does a backup's copies.
func (e *env) writeRestoreVolumes(ctx context.Context, r *cairnv1.Restore) error {
	if r.UID == "" {
		return nil
	}
	var list cairnv1.PodVolumeRestoreList
	return e.writePodVolumes(ctx, &list, "PodVolumeRestores", cairnv1.PodVolumeRestoreUIDLabel, r.UID, func() []volumeRow {
		rows := make([]volumeRow, 0, len(list.Items))
		for _, p := range list.Items {
			rows = append(rows, volumeRow{pod: p.Spec.Pod, volume: p.Spec.Volume, status: p.Status, snapshot: p.Spec.SnapshotID})
		}
		return rows
	}, false)
}

// writePodVolumes lists the objects of list's kind (named kind) labelled label=uid in the
// operator's namespace, as rows says, in a table.
func (e *env) writePodVolumes(ctx context.Context, list client.ObjectList, kind, label string, uid types.UID, rows func() []volumeRow, uploaded bool) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	ns := e.operatorNamespace
	err = c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{label: string(uid)})
	switch {
	case apierrors.IsForbidden(err):
		e.printf("\nVolumes: not shown: you may not list %s in namespace %s (Volume bytes above sums them up).\n", kind, ns)
		return nil
	case err != nil:
		e.printf("\nVolumes: cannot list the %s in namespace %s: %v\n", kind, ns, err)
		return nil
	}
	e.printf("\n")
	return writeVolumes(e.streams.Out, rows(), uploaded)
}

// volumeRow is one pod volume's copy or restore.
type volumeRow struct {
	pod      cairnv1.PodReference
	volume   string
	status   cairnv1.PodVolumeStatus
	snapshot string
}

// writeVolumes writes a table of pod volume copies or restores, by pod and volume: the phase,
// the bytes done of the volume's size, for a copy the bytes uploaded (little, for an
// unchanged volume), the speed of a finished one, the snapshot and the message.
func writeVolumes(w io.Writer, rows []volumeRow, uploaded bool) error {
	fmt.Fprintf(w, "Volumes:\n")
	if len(rows) == 0 {
		fmt.Fprintf(w, "  none\n")
		return nil
	}
	slices.SortFunc(rows, func(a, b volumeRow) int {
		return cmp.Or(cmp.Compare(a.pod.Namespace, b.pod.Namespace), cmp.Compare(a.pod.Name, b.pod.Name), cmp.Compare(a.volume, b.volume))
	})
	tw := printers.GetNewTabWriter(w)
	header := []string{"  POD", "VOLUME", "PHASE", "BYTES", "UPLOADED", "SPEED", "SNAPSHOT", "MESSAGE"}
	if !uploaded {
		header = slices.Delete(header, 4, 5)
	}
	fmt.Fprintf(tw, "%s\n", strings.Join(header, "\t"))
	for _, r := range rows {
		st := r.status
		phase := st.Phase
		if phase == "" {
			phase = cairnv1.PodVolumePhaseNew
		}
		bytes := humanBytes(st.BytesDone)
		if st.BytesTotal > 0 {
			bytes += "/" + humanBytes(st.BytesTotal)
		}
		cells := []string{"  " + r.pod.Namespace + "/" + r.pod.Name, r.volume, string(phase), bytes}
		if uploaded {
			cells = append(cells, humanBytes(st.UploadedBytes))
		}
		cells = append(cells, volumeSpeed(st), cmp.Or(r.snapshot, "<none>"))
		if st.Message != "" {
			cells = append(cells, st.Message)
		}
		fmt.Fprintf(tw, "%s\n", strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// volumeSpeed is the bytes a copy read over the time it took, once it has both a start and a
// completion; "-" before.
func volumeSpeed(st cairnv1.PodVolumeStatus) string {
	if st.StartTimestamp == nil || st.CompletionTimestamp == nil {
		return "-"
	}
	took := st.CompletionTimestamp.Sub(st.StartTimestamp.Time)
	if took <= 0 {
		return "-"
	}
	return humanBytes(int64(float64(st.BytesDone)/took.Seconds())) + "/s"
}

// maxJSONFileSize bounds a results or resource-list file that describe reads into memory,
// uncompressed: far above what a backup of many thousands of items writes, and a refusal
// rather than the memory of the machine for a file that decompresses to more.
const maxJSONFileSize = 64 << 20

// errTooLarge is a file larger than maxJSONFileSize uncompressed.
var errTooLarge = fmt.Errorf("larger than %d MiB uncompressed, more than cairn reads into memory", maxJSONFileSize>>20)

// cappedBuffer is a buffer whose Write fails with errTooLarge past max bytes. (It has no
// ReadFrom, which io.Copy would use instead of Write.)
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.buf.Len()+len(p) > b.max {
		return 0, errTooLarge
	}
	return b.buf.Write(p)
}

// readJSON reads a gzipped JSON file of a backup or restore into v, refusing one larger than
// maxJSONFileSize uncompressed.
func (e *env) readJSON(ctx context.Context, namespace, name string, kind cairnv1.DownloadTargetKind, v any) error {
	buf := &cappedBuffer{max: maxJSONFileSize}
	if err := e.fetchGzip(ctx, namespace, name, kind, buf); err != nil {
		return err
	}
	return json.Unmarshal(buf.buf.Bytes(), v)
}

// namespaceOfItem is the namespace in a backup result's item ("configmaps/team-a/x"), or ""
// for a cluster-scoped one ("persistentvolumes/pv-1").
func namespaceOfItem(item string) string {
	parts := strings.Split(item, "/")
	if len(parts) == 3 {
		return parts[1]
	}
	return ""
}

// groupMessages groups a backup's results by namespace ("" for cluster-scoped items).
func groupMessages(results []backup.ItemResult) restore.Messages {
	var m restore.Messages
	for _, r := range results {
		msg := r.Item + ": " + r.Message
		ns := namespaceOfItem(r.Item)
		if ns == "" {
			m.Cluster = append(m.Cluster, msg)
			continue
		}
		if m.Namespaces == nil {
			m.Namespaces = map[string][]string{}
		}
		m.Namespaces[ns] = append(m.Namespaces[ns], msg)
	}
	return m
}

func writeBackupResults(w io.Writer, r backup.Results) {
	writeMessages(w, "Errors", groupMessages(r.Errors))
	writeMessages(w, "Warnings", groupMessages(r.Warnings))
}

// writeMessages writes warnings or errors grouped by namespace, namespaces in order.
func writeMessages(w io.Writer, title string, m restore.Messages) {
	if len(m.Cluster) == 0 && len(m.Namespaces) == 0 {
		fmt.Fprintf(w, "%s: none\n", title)
		return
	}
	fmt.Fprintf(w, "%s:\n", title)
	if len(m.Cluster) > 0 {
		fmt.Fprintf(w, "  Cluster-scoped:\n")
		for _, msg := range m.Cluster {
			fmt.Fprintf(w, "    %s\n", msg)
		}
	}
	namespaces := make([]string, 0, len(m.Namespaces))
	for ns := range m.Namespaces {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	for _, ns := range namespaces {
		fmt.Fprintf(w, "  Namespace %s:\n", ns)
		for _, msg := range m.Namespaces[ns] {
			fmt.Fprintf(w, "    %s\n", msg)
		}
	}
}

// writeResourceList writes "resource.group: ns/a, ns/b" lines, in order.
func writeResourceList(w io.Writer, title string, list map[string][]string) {
	fmt.Fprintf(w, "%s:\n", title)
	if len(list) == 0 {
		fmt.Fprintf(w, "  none\n")
		return
	}
	kinds := make([]string, 0, len(list))
	for k := range list {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		items := append([]string(nil), list[k]...)
		sort.Strings(items)
		fmt.Fprintf(w, "  %s:\n", k)
		for _, it := range items {
			fmt.Fprintf(w, "    - %s\n", it)
		}
	}
}
