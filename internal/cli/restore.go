package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func newRestoreCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "restore", Aliases: []string{"restores"}, Short: "Restore backups and follow restores"}
	cmd.AddCommand(newRestoreCreateCommand(e), newGetCommand(e, restoreKind), newRestoreDescribeCommand(e),
		newRestoreLogsCommand(e), newRestoreDeleteCommand(e), newRestoreCancelCommand(e))
	return cmd
}

// restoreKind is what the commands every kind has need to know of restores.
var restoreKind = kind[cairnv1.Restore, cairnv1.RestoreList]{
	name: "restore", plural: "restores", columns: restoreColumns,
	items: func(l *cairnv1.RestoreList) *[]cairnv1.Restore { return &l.Items },
}

// restoreCreateOptions are `restore create`'s flags.
type restoreCreateOptions struct {
	restoreFlags
	labels map[string]string
	wait   bool
}

// restoreObject is the Restore the options say; without a name it is named after its source
// (<backup>-<random>).
func (o *restoreCreateOptions) restoreObject(name, namespace string) (*cairnv1.Restore, error) {
	spec, err := o.spec()
	if err != nil {
		return nil, err
	}
	labels, err := parseLabels(o.labels)
	if err != nil {
		return nil, err
	}
	r := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}, Spec: spec}
	if name == "" {
		source := spec.BackupName
		if source == "" {
			source = spec.ScheduleName
		}
		if len(source) > 200 {
			source = source[:200]
		}
		r.GenerateName = source + "-"
	}
	return r, nil
}

func newRestoreCreateCommand(e *env) *cobra.Command {
	o := &restoreCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create [NAME] --from-backup BACKUP | --from-schedule SCHEDULE",
		Short: "Restore a backup",
		Example: `  cairn restore create --from-backup nightly-web -n team-a --wait
  cairn restore create copy --from-backup b1 --namespace-mappings web:web-copy --existing-resource-policy update -n cairn-system`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ns, err := e.namespace()
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			r, err := o.restoreObject(name, ns)
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := c.Create(context.Background(), r); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("restore %q already exists in namespace %s", r.Name, ns)
				}
				return err
			}
			if !o.wait {
				e.printf("Restore %s created in namespace %s.\nFollow it with `cairn restore describe %s -n %s`, or create it with --wait.\n", r.Name, ns, r.Name, ns)
				return nil
			}
			e.printf("Restore %s created in namespace %s; waiting for it to finish (Ctrl-C stops waiting, not the restore).\n", r.Name, ns)
			return e.followRestore(r)
		},
	}
	o.add(cmd.Flags())
	_ = cmd.RegisterFlagCompletionFunc("from-backup", completeNames(e, backupKind))
	_ = cmd.RegisterFlagCompletionFunc("from-schedule", completeNames(e, scheduleKind))
	cmd.Flags().StringToStringVar(&o.labels, "labels", nil, "Labels of the restore object, k=v comma-separated.")
	cmd.Flags().BoolVarP(&o.wait, "wait", "w", false, "Wait until the restore is finished, showing its progress; exit 0 only if it Completed.")
	return cmd
}

func newRestoreDescribeCommand(e *env) *cobra.Command {
	var details bool
	cmd := newDescribeCommand(e, restoreKind, "Show a restore in detail: why it waits, its progress, warnings and errors",
		func(r *cairnv1.Restore) error { return e.describeRestore(r, details) })
	cmd.Flags().BoolVar(&details, "details", false, "Also list what was created, updated and skipped, and every warning and error (read from storage).")
	return cmd
}

func newRestoreLogsCommand(e *env) *cobra.Command {
	return newNamedCommand(e, restoreKind, "logs", "Print a restore's log", func(r *cairnv1.Restore) error {
		return e.fetchGzip(context.Background(), r.Namespace, r.Name, cairnv1.DownloadTargetRestoreLog, e.streams.Out)
	})
}

func newRestoreDeleteCommand(e *env) *cobra.Command {
	return newDeleteCommand(e, restoreKind, "Delete restores and their logs and results in storage (never the restored objects)", "",
		func(r *cairnv1.Restore) error {
			e.printf("Restore %s deleted; the objects it restored stay.\n", r.Name)
			return nil
		})
}

func newRestoreCancelCommand(e *env) *cobra.Command {
	return newCancelCommand(e, restoreKind, "Cancel restores: a running one stops within seconds; what it created stays",
		func(r *cairnv1.Restore) phaseEnd { return r.Status.Phase })
}
