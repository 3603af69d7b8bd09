package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

var cancelPatch = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))

func newBackupCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "backup", Aliases: []string{"backups"}, Short: "Create, follow, read and delete backups"}
	cmd.AddCommand(newBackupCreateCommand(e), newGetCommand(e, backupKind), newBackupDescribeCommand(e), newBackupLogsCommand(e),
		newBackupDownloadCommand(e), newBackupDeleteCommand(e), newBackupCancelCommand(e))
	return cmd
}

// backupKind is what the commands every kind has need to know of backups: `get -l` lists those whose labels match.
var backupKind = kind[cairnv1.Backup, cairnv1.BackupList]{
	name: "backup", plural: "backups", columns: backupColumns, selectable: true,
	items: func(l *cairnv1.BackupList) *[]cairnv1.Backup { return &l.Items },
}

// backupCreateOptions are `backup create`'s flags.
type backupCreateOptions struct {
	backupFlags
	fromSchedule string
	labels       map[string]string
	wait         bool
}

// backup is the Backup the options say, in namespace; template is the schedule's spec with
// --from-schedule.
func (o *backupCreateOptions) backup(name, namespace string, template *cairnv1.Schedule) (*cairnv1.Backup, error) {
	labels, err := parseLabels(o.labels)
	if err != nil {
		return nil, err
	}
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}}
	if template != nil {
		// Labelled as the schedule's own runs are: the template's labels and the
		// schedule-name label; --labels beside them.
		b.Spec = *template.Spec.Template.DeepCopy()
		b.Labels = map[string]string{}
		if m := template.Spec.Template.Metadata; m != nil {
			maps.Copy(b.Labels, m.Labels)
		}
		maps.Copy(b.Labels, labels)
		b.Labels[cairnv1.ScheduleNameLabel] = template.Name
		return b, nil
	}
	b.Spec, err = o.spec()
	return b, err
}

func newBackupCreateCommand(e *env) *cobra.Command {
	o := &backupCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a backup",
		Example: `  cairn backup create nightly-web -n team-a --wait
  cairn backup create all --include-namespaces '*' --exclude-resources secrets --ttl 72h -n cairn-system
  cairn backup create now --from-schedule daily -n team-a
  cairn backup create with-data --include-namespaces shop --default-volumes-to-fs-backup -n cairn-system --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.fromSchedule != "" {
				for _, f := range []string{"include-namespaces", "exclude-namespaces", "include-resources", "exclude-resources",
					"include-cluster-resources", "selector", "or-selector", "storage-location", "ttl", "item-operation-timeout", "snapshot-volumes",
					"default-volumes-to-fs-backup"} {
					if cmd.Flags().Changed(f) {
						return usageErrorf("--%s cannot be used with --from-schedule: the backup takes the schedule's template", f)
					}
				}
			}
			ns, err := e.namespace()
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			ctx := context.Background()
			var schedule *cairnv1.Schedule
			if o.fromSchedule != "" {
				schedule = &cairnv1.Schedule{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.fromSchedule}, schedule); err != nil {
					return notFound(err, "schedule", o.fromSchedule, ns)
				}
			}
			b, err := o.backup(args[0], ns, schedule)
			if err != nil {
				return err
			}
			if err := c.Create(ctx, b); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("backup %q already exists in namespace %s", b.Name, ns)
				}
				return err
			}
			if !o.wait {
				e.printf("Backup %s created in namespace %s.\nFollow it with `cairn backup describe %s -n %s`, or create it with --wait.\n", b.Name, ns, b.Name, ns)
				return nil
			}
			e.printf("Backup %s created in namespace %s; waiting for it to finish (Ctrl-C stops waiting, not the backup).\n", b.Name, ns)
			return e.followBackup(b)
		},
	}
	o.add(cmd.Flags())
	cmd.Flags().StringVar(&o.fromSchedule, "from-schedule", "", "Create the backup from this schedule's template (no other backup flags).")
	cmd.Flags().StringToStringVar(&o.labels, "labels", nil, "Labels of the backup object, k=v comma-separated.")
	cmd.Flags().BoolVarP(&o.wait, "wait", "w", false, "Wait until the backup is finished, showing its progress; exit 0 only if it Completed.")
	return cmd
}

func newBackupDescribeCommand(e *env) *cobra.Command {
	var details bool
	cmd := newDescribeCommand(e, backupKind, "Show a backup in detail: why it waits, its progress, operations, warnings and errors",
		func(b *cairnv1.Backup) error { return e.describeBackup(b, details) })
	cmd.Flags().BoolVar(&details, "details", false,
		"Also list the copies of the pods' volumes (PodVolumeBackups in --cairn-namespace), and the backed-up resources and every warning and error (read from storage).")
	return cmd
}

func newBackupLogsCommand(e *env) *cobra.Command {
	return newNamedCommand(e, backupKind, "logs", "Print a backup's log", func(b *cairnv1.Backup) error {
		err := e.fetchGzip(context.Background(), b.Namespace, b.Name, cairnv1.DownloadTargetBackupLog, e.streams.Out)
		if err != nil && !b.Status.Phase.IsTerminal() {
			return fmt.Errorf("%w (the backup is %s: its log is stored when it ends)", err, b.EffectivePhase())
		}
		return err
	})
}

func newBackupDownloadCommand(e *env) *cobra.Command {
	var output string
	var force bool
	cmd := newNamedCommand(e, backupKind, "download", "Download a backup's archive (a tar.gz of JSON files), checking its SHA-256",
		func(b *cairnv1.Backup) error {
			path := output
			if path == "" {
				path = b.Name + ".tar.gz"
			}
			if _, err := os.Stat(path); err == nil && !force {
				return fmt.Errorf("%s already exists: remove it or pass --force", path)
			}
			// Ctrl-C cancels ctx instead of ending the process, so that the partial file is
			// removed on the way out.
			ctx, stop := e.interrupt(context.Background())
			defer stop()
			digest, err := e.downloadArchive(ctx, b, path)
			if err != nil && ctx.Err() != nil {
				return fmt.Errorf("the download of backup %s was interrupted; nothing was saved", b.Name)
			}
			if err != nil {
				return err
			}
			if b.Status.ArchiveSHA256 == "" {
				e.printf("Backup %s downloaded to %s (SHA-256 %s, not verified: the backup records no checksum).\n", b.Name, path, digest)
				return nil
			}
			e.printf("Backup %s downloaded to %s; its SHA-256 %s matches the backup's.\n", b.Name, path, digest)
			return nil
		})
	cmd.Flags().StringVarP(&output, "output", "o", "", "The file to save the archive to (default NAME.tar.gz).")
	cmd.Flags().BoolVar(&force, "force", false, "Overwrite the file if it exists.")
	return cmd
}

// downloadArchive saves backup b's archive to path, verified, and returns its digest.
func (e *env) downloadArchive(ctx context.Context, b *cairnv1.Backup, path string) (string, error) {
	url, err := e.requestURL(ctx, b.Namespace, b.Name, cairnv1.DownloadTargetBackupContents)
	if err != nil {
		return "", err
	}
	body, err := e.open(ctx, url)
	if err != nil {
		return "", err
	}
	defer body.Close()
	return saveVerified(ctx, body, path, b.Status.ArchiveSHA256)
}

// confirm asks on the terminal whether to go on; without a terminal it refuses, so that a
// script must say --confirm.
func (e *env) confirm(question string) (bool, error) {
	if !e.terminal {
		return false, usageErrorf("%s: pass --confirm to do it without a question", question)
	}
	e.printf("%s [y/N] ", question)
	answer, err := bufio.NewReader(e.streams.In).ReadString('\n')
	if err != nil && answer == "" {
		return false, nil
	}
	answer = strings.ToLower(strings.TrimSpace(answer))
	return answer == "y" || answer == "yes", nil
}

func newBackupDeleteCommand(e *env) *cobra.Command {
	var wait bool
	cmd := newDeleteCommand(e, backupKind, "Delete backups and their data in storage", " and their data in storage", func(b *cairnv1.Backup) error {
		if !wait {
			e.printf("Backup %s is being deleted; its data is removed first.\n", b.Name)
			return nil
		}
		e.printf("Backup %s is being deleted; waiting until its data is gone.\n", b.Name)
		if err := e.waitGone(b, &cairnv1.BackupList{}, func(o client.Object) string {
			if cur, ok := o.(*cairnv1.Backup); ok && cur.Status.Phase == cairnv1.BackupPhaseDeletionFailed {
				return "deletion failed, retrying: " + cur.Status.LastDeletionError
			}
			return ""
		}); err != nil {
			return err
		}
		e.printf("Backup %s deleted.\n", b.Name)
		return nil
	})
	cmd.Flags().BoolVarP(&wait, "wait", "w", false, "Wait until the data is deleted and the backup is gone.")
	return cmd
}

// waitGone watches obj until it is deleted, printing what status says on the way.
func (e *env) waitGone(obj client.Object, list client.ObjectList, status func(client.Object) string) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	ctx, stop := e.interrupt(context.Background())
	defer stop()
	last := ""
	err = watchUntil(ctx, c, obj, list, func(o client.Object) bool {
		if s := status(o); s != "" && s != last {
			e.printf("%s\n", s)
			last = s
		}
		return false
	})
	if errors.Is(err, errGone) || apierrors.IsNotFound(err) {
		return nil
	}
	if ctx.Err() != nil {
		e.errorf("Stopped waiting; the deletion goes on.\n")
		return withCode(ExitDetached, nil)
	}
	return err
}

func newBackupCancelCommand(e *env) *cobra.Command {
	return newCancelCommand(e, backupKind, "Cancel backups: a running one stops within seconds and its partial data is removed",
		func(b *cairnv1.Backup) phaseEnd { return b.Status.Phase })
}
