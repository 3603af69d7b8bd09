package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/cli-runtime/pkg/printers"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/restore"
)

// describeRestore writes what a person wants to know about a restore.
func (e *env) describeRestore(r *cairnv1.Restore, details bool) error {
	tw := printers.GetNewTabWriter(e.streams.Out)
	d := describer{w: tw, now: e.clock.Now()}
	d.line(0, "Name", "%s", r.Name)
	d.line(0, "Namespace", "%s", r.Namespace)
	d.line(0, "Labels", "%s", labelsString(r.Labels))
	d.line(0, "Phase", "%s", phaseLine(string(r.EffectivePhase()), r.Status.QueuePosition, r.Status.Conditions, r.Status.FailureReason))
	if len(r.Status.ValidationErrors) > 0 {
		d.section("Validation errors")
		for _, v := range r.Status.ValidationErrors {
			fmt.Fprintf(tw, "  - %s\n", v)
		}
	}
	source := r.Spec.BackupName
	if source == "" {
		source = fmt.Sprintf("the newest Completed backup of schedule %s", r.Spec.ScheduleName)
		if r.Status.BackupName != "" {
			source = fmt.Sprintf("%s (from schedule %s)", r.Status.BackupName, r.Spec.ScheduleName)
		}
	}
	d.line(0, "Backup", "%s", source)
	d.line(0, "Created", "%s", d.when(&r.CreationTimestamp))
	d.line(0, "Started", "%s", d.when(r.Status.StartTimestamp))
	d.line(0, "Completed", "%s", d.when(r.Status.CompletionTimestamp))
	progress := "<not started>"
	if p := r.Status.Progress; p != nil {
		progress = fmt.Sprintf("%d of %d items restored", p.ItemsRestored, p.TotalItems)
	}
	d.line(0, "Progress", "%s", progress)
	if p := r.Status.Progress; p != nil && (p.VolumeBytesDone > 0 || p.VolumeBytesTotal > 0) {
		d.line(0, "Volume bytes", "%s of %s written", humanBytes(p.VolumeBytesDone), humanBytes(p.VolumeBytesTotal))
	}
	d.line(0, "Operations", "%s", operationsLine(r.Status.RestoreItemOperationsAttempted, r.Status.RestoreItemOperationsCompleted, r.Status.RestoreItemOperationsFailed))
	d.line(0, "Exec hooks", "%s", hooksLine(r.Status.HookStatus))
	d.line(0, "Warnings", "%d", r.Status.Warnings)
	d.line(0, "Errors", "%d", r.Status.Errors)
	d.section("Spec")
	d.filters(r.Spec.Filters())
	if len(r.Spec.NamespaceMapping) > 0 {
		var pairs []string
		for from, to := range r.Spec.NamespaceMapping {
			pairs = append(pairs, from+" → "+string(to))
		}
		sort.Strings(pairs)
		d.line(1, "Namespace mappings", "%s", strings.Join(pairs, ", "))
	}
	d.line(1, "Existing resources", "%s", r.Spec.GetExistingResourcePolicy())
	d.line(1, "Restore volumes", "%s", tristate(r.Spec.RestorePVs, "yes"))
	d.line(1, "Preserve node ports", "%s", tristate(r.Spec.PreserveNodePorts, "no"))
	d.line(1, "Hooks", "%s", restoreHookSpecs(r.Spec.Hooks))
	d.conditions(r.Status.Conditions)
	if err := tw.Flush(); err != nil {
		return err
	}
	ctx := context.Background()
	if details {
		if err := e.writeRestoreVolumes(ctx, r); err != nil {
			return err
		}
	}
	if r.Status.Phase.IsTerminal() && r.Status.StorageLocation != "" && (details || r.Status.Warnings+r.Status.Errors > 0) {
		var results restore.Results
		if err := e.readJSON(ctx, r.Namespace, r.Name, cairnv1.DownloadTargetRestoreResults, &results); err != nil {
			e.printf("\nWarnings and errors: cannot read the results file: %v\n", err)
		} else {
			e.printf("\n")
			writeMessages(e.streams.Out, "Errors", results.Errors)
			writeMessages(e.streams.Out, "Warnings", results.Warnings)
		}
	}
	if details && r.Status.Phase.IsTerminal() && r.Status.StorageLocation != "" {
		var list restore.ResourceList
		if err := e.readJSON(ctx, r.Namespace, r.Name, cairnv1.DownloadTargetRestoreResourceList, &list); err != nil {
			e.printf("\nResources: cannot read the resource list: %v\n", err)
		} else {
			outcomes := make([]string, 0, len(list))
			for o := range list {
				outcomes = append(outcomes, string(o))
			}
			sort.Strings(outcomes)
			for _, o := range outcomes {
				e.printf("\n")
				writeResourceList(e.streams.Out, "Resources "+o, list[restore.Outcome(o)])
			}
		}
	}
	return nil
}
