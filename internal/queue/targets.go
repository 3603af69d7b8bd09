package queue

import (
	"slices"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/selection"
)

// RestoreTargets is the set of namespaces restore rs may write into, for the overlap rule: its
// source namespaces mapped through spec.namespaceMapping. b is the backup it reads (nil when
// unknown).
//
// The sources are known for certain only once the archive is read, which happens after the
// restore has left the queue, so this errs towards too many, never too few:
//   - a restore outside the operator's namespace only ever writes into its own namespace (the
//     tenancy rule; validation refuses any mapping elsewhere);
//   - else, when the restore's includedNamespaces are all names, those of them it does not
//     exclude and its backup could hold (the backup's filter matches them);
//   - else, when the backup's includedNamespaces are all names, those of them it does not
//     exclude and the restore selects (the restore's filter, wildcards included, matches them);
//   - else (wildcards on both sides, or no includedNamespaces, which means everything) every
//     namespace: the restore overlaps everything.
//
// Wildcards are never resolved against the cluster's current namespaces: a restore usually
// brings back a namespace that is gone, so the cluster cannot say what the backup held.
func RestoreTargets(rs *cairnv1.Restore, b *cairnv1.Backup, operatorNamespace string) selection.NamespaceSet {
	if rs.Namespace != operatorNamespace {
		return selection.NamespaceSet{Names: []string{rs.Namespace}}
	}
	selects := selection.For(rs.Namespace, rs.Spec.IncludedNamespaces, rs.Spec.ExcludedNamespaces, operatorNamespace)
	sources, ok := selects.LiteralNames()
	switch {
	case ok && b != nil:
		sources = slices.DeleteFunc(sources, func(ns string) bool { return !selection.ForBackup(b, operatorNamespace).Matches(ns) })
	case !ok && b != nil:
		if sources, ok = selection.ForBackup(b, operatorNamespace).LiteralNames(); ok {
			sources = slices.DeleteFunc(sources, func(ns string) bool { return !selects.Matches(ns) })
		}
	}
	if !ok {
		return selection.NamespaceSet{All: true}
	}
	var targets []string
	for _, ns := range sources {
		targets = append(targets, rs.Spec.MapNamespace(ns))
	}
	slices.Sort(targets)
	return selection.NamespaceSet{Names: slices.Compact(targets)}
}
