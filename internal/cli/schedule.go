package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func newScheduleCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Aliases: []string{"schedules"}, Short: "Back up on a schedule"}
	cmd.AddCommand(newScheduleCreateCommand(e), newGetCommand(e, scheduleKind),
		newDescribeCommand(e, scheduleKind, "Show a schedule: when it runs, its last and next runs, its backup template", e.describeSchedule),
		newSchedulePauseCommand(e, true), newSchedulePauseCommand(e, false), newScheduleDeleteCommand(e))
	return cmd
}

// scheduleKind is what the commands every kind has need to know of schedules.
var scheduleKind = kind[cairnv1.Schedule, cairnv1.ScheduleList]{
	name: "schedule", plural: "schedules", columns: scheduleColumns,
	items: func(l *cairnv1.ScheduleList) *[]cairnv1.Schedule { return &l.Items },
}

// scheduleCreateOptions are `schedule create`'s flags.
type scheduleCreateOptions struct {
	scheduleFlags
	labels map[string]string
}

func (o *scheduleCreateOptions) schedule(name, namespace string) (*cairnv1.Schedule, error) {
	spec, err := o.spec()
	if err != nil {
		return nil, err
	}
	labels, err := parseLabels(o.labels)
	if err != nil {
		return nil, err
	}
	return &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}, Spec: spec}, nil
}

func newScheduleCreateCommand(e *env) *cobra.Command {
	o := &scheduleCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME --schedule CRON",
		Short: "Create a schedule",
		Example: `  cairn schedule create nightly --schedule "0 3 * * *" --ttl 168h -n team-a
  cairn schedule create hourly --schedule "@every 1h" --include-namespaces 'web-*' -n cairn-system`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ns, err := e.namespace()
			if err != nil {
				return err
			}
			s, err := o.schedule(args[0], ns)
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := c.Create(context.Background(), s); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("schedule %q already exists in namespace %s", s.Name, ns)
				}
				return err
			}
			e.printf("Schedule %s created in namespace %s.\n", s.Name, ns)
			return nil
		},
	}
	o.add(cmd.Flags())
	cmd.Flags().StringToStringVar(&o.labels, "labels", nil, "Labels of the schedule object, k=v comma-separated.")
	return cmd
}

// pausePatch sets spec.paused, and with unpause --skip-immediately spec.skipImmediately, so
// that a run due at once (missed while paused) is skipped.
func pausePatch(pause, skipImmediately bool) client.Patch {
	patch := fmt.Sprintf(`{"spec":{"paused":%t}}`, pause)
	if !pause && skipImmediately {
		patch = `{"spec":{"paused":false,"skipImmediately":true}}`
	}
	return client.RawPatch(types.MergePatchType, []byte(patch))
}

func newSchedulePauseCommand(e *env, pause bool) *cobra.Command {
	var skipImmediately bool
	verb, done := "pause", "paused"
	short := "Pause schedules: no backups until they are unpaused"
	if !pause {
		verb, done = "unpause", "unpaused"
		short = "Unpause schedules"
	}
	cmd := &cobra.Command{
		Use:   verb + " NAME...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ns, err := e.namespace()
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			for _, name := range args {
				s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
				if err := c.Patch(context.Background(), s, pausePatch(pause, skipImmediately)); err != nil {
					return notFound(err, "schedule", name, ns)
				}
				e.printf("Schedule %s %s.\n", name, done)
			}
			return nil
		},
	}
	if !pause {
		cmd.Flags().BoolVar(&skipImmediately, "skip-immediately", false, "Skip a run that is due at once (missed while paused); start with the next one.")
	}
	return cmd
}

func newScheduleDeleteCommand(e *env) *cobra.Command {
	return newDeleteCommand(e, scheduleKind, "Delete schedules (their backups stay, unless the schedule owns them)", "",
		func(s *cairnv1.Schedule) error {
			e.printf("Schedule %s deleted.\n", s.Name)
			return nil
		})
}
