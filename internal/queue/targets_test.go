package queue

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/selection"
)

func TestRestoreTargets(t *testing.T) {
	admin := func(included, excluded []string, mapping map[string]cairnv1.NamespaceName) *cairnv1.Restore {
		return &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r"},
			Spec: cairnv1.RestoreSpec{BackupName: "b", IncludedNamespaces: included, ExcludedNamespaces: excluded, NamespaceMapping: mapping}}
	}
	backupOf := func(namespace string, included, excluded []string) *cairnv1.Backup {
		return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "b"},
			Spec: cairnv1.BackupSpec{IncludedNamespaces: included, ExcludedNamespaces: excluded}}
	}
	adminBackup := func(included ...string) *cairnv1.Backup { return backupOf("cairn-system", included, nil) }
	names := func(ns ...string) selection.NamespaceSet { return selection.NamespaceSet{Names: ns} }
	all := selection.NamespaceSet{All: true}
	tests := []struct {
		name    string
		restore *cairnv1.Restore
		backup  *cairnv1.Backup
		want    selection.NamespaceSet
	}{
		{name: "the restore's names, when it names them all",
			restore: admin([]string{"shop", "db"}, nil, nil), backup: adminBackup(), want: names("db", "shop")},
		{name: "the restore's names, mapped",
			restore: admin([]string{"shop", "db"}, nil, map[string]cairnv1.NamespaceName{"shop": "shop-copy"}), backup: adminBackup(),
			want: names("db", "shop-copy")},
		{name: "the restore's names that its backup could hold",
			restore: admin([]string{"shop", "db"}, nil, nil), backup: adminBackup("shop", "web"), want: names("shop")},
		{name: "the restore's names that its backup's wildcard matches",
			restore: admin([]string{"team-a", "db"}, nil, nil), backup: adminBackup("team-*"), want: names("team-a")},
		{name: "the restore's names minus those it excludes",
			restore: admin([]string{"shop", "db"}, []string{"d?"}, nil), backup: adminBackup(), want: names("shop")},
		{name: "the restore's names minus those its backup excludes",
			restore: admin([]string{"shop", "db"}, nil, nil), backup: backupOf("cairn-system", nil, []string{"db"}), want: names("shop")},
		{name: "the restore's names with the backup unknown",
			restore: admin([]string{"shop"}, nil, nil), backup: nil, want: names("shop")},
		{name: "no restore filter: the backup's names",
			restore: admin(nil, nil, nil), backup: adminBackup("shop", "db"), want: names("db", "shop")},
		{name: "no restore filter: the backup's names, mapped",
			restore: admin(nil, nil, map[string]cairnv1.NamespaceName{"shop": "shop-copy", "db": "db-copy"}), backup: adminBackup("shop", "db"),
			want: names("db-copy", "shop-copy")},
		{name: "two sources mapped into one target",
			restore: admin(nil, nil, map[string]cairnv1.NamespaceName{"shop": "merged", "db": "merged"}), backup: adminBackup("shop", "db"),
			want: names("merged")},
		{name: "a restore wildcard: the backup's names it matches",
			restore: admin([]string{"team-*"}, nil, nil), backup: adminBackup("team-a", "team-b", "db"), want: names("team-a", "team-b")},
		{name: "a restore wildcard and exclusion applied to the backup's names",
			restore: admin([]string{"team-*"}, []string{"team-b"}, nil), backup: adminBackup("team-a", "team-b", "db"), want: names("team-a")},
		{name: "the backup's names minus those it excludes",
			restore: admin(nil, nil, nil), backup: backupOf("cairn-system", []string{"shop", "db"}, []string{"db"}), want: names("shop")},
		{name: "every name excluded: no namespace",
			restore: admin([]string{"shop"}, []string{"shop"}, nil), backup: adminBackup(), want: selection.NamespaceSet{}},
		{name: "wildcards on both sides: everything",
			restore: admin([]string{"team-*"}, nil, nil), backup: adminBackup("team-*"), want: all},
		{name: "no filter on either side: everything",
			restore: admin(nil, nil, nil), backup: adminBackup(), want: all},
		{name: "a restore star: the backup's names",
			restore: admin([]string{"*"}, nil, nil), backup: adminBackup("shop"), want: names("shop")},
		{name: "no restore filter and the backup unknown: everything",
			restore: admin(nil, nil, nil), backup: nil, want: all},
		{name: "a restore wildcard and the backup unknown: everything",
			restore: admin([]string{"shop-*"}, nil, nil), backup: nil, want: all},
		{name: "a team restore: its own namespace, whatever its backup held",
			restore: &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "r"}, Spec: cairnv1.RestoreSpec{BackupName: "b"}},
			backup:  backupOf("team-a", nil, nil), want: names("team-a")},
		{name: "a team restore with a filter: still only its own namespace",
			restore: &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "r"}, Spec: cairnv1.RestoreSpec{BackupName: "b", IncludedNamespaces: []string{"*"}}},
			backup:  nil, want: names("team-a")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RestoreTargets(tt.restore, tt.backup, "cairn-system"); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("RestoreTargets = %+v, want %+v", got, tt.want)
			}
		})
	}
}
