package cli

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// completeNames completes the names of the objects of list's kind in the namespace (the
// operator's for storage locations), for shell completion of NAME arguments.
func completeNames(e *env, newList func() client.ObjectList, locations bool) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		ns := e.locationNamespace()
		if !locations {
			var err error
			if ns, err = e.namespace(); err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
		}
		c, err := e.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list := newList()
		if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			if m, err := meta.Accessor(o); err == nil && strings.HasPrefix(m.GetName(), toComplete) {
				for _, a := range args {
					if a == m.GetName() {
						return nil
					}
				}
				names = append(names, m.GetName())
			}
			return nil
		})
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// withNameCompletion completes the NAME arguments of the commands under parent that take them.
func withNameCompletion(e *env, parent *cobra.Command, newList func() client.ObjectList, locations bool) *cobra.Command {
	for _, cmd := range parent.Commands() {
		if cmd.Name() != "create" {
			cmd.ValidArgsFunction = completeNames(e, newList, locations)
		}
	}
	return parent
}

func backupList() client.ObjectList   { return &cairnv1.BackupList{} }
func restoreList() client.ObjectList  { return &cairnv1.RestoreList{} }
func scheduleList() client.ObjectList { return &cairnv1.ScheduleList{} }
func locationList() client.ObjectList { return &cairnv1.BackupStorageLocationList{} }
