package backupsync

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

// The rename of a Velero location's backups (Input.Rename): a backup whose name a Backup of
// another origin holds is synced as velero-<name>, once, and stays there.
func TestDecideRename(t *testing.T) {
	rename := func(name string) string { return "velero-" + name }
	tests := []struct {
		name      string
		backups   []cairnv1.Backup
		committed []storage.CommittedBackup
		want      Plan
	}{
		{
			name:      "free names are kept",
			committed: []storage.CommittedBackup{stored("a", "b1")},
			want:      Plan{Create: []storage.CommittedBackup{stored("a", "b1")}},
		},
		{
			name:      "a name held by a backup of another location: made under the new name",
			backups:   []cairnv1.Backup{backup("a", "b1", cairnv1.BackupPhaseCompleted, "cairn-own")},
			committed: []storage.CommittedBackup{stored("a", "b1")},
			want: Plan{
				Create:  []storage.CommittedBackup{stored("a", "velero-b1")},
				Renamed: map[types.NamespacedName]string{key("a", "velero-b1"): "b1"},
			},
		},
		{
			name:      "a name held by a new backup that has not run: made under the new name",
			backups:   []cairnv1.Backup{backup("a", "b1", cairnv1.BackupPhaseQueued, loc)},
			committed: []storage.CommittedBackup{stored("a", "b1")},
			want: Plan{
				Create:  []storage.CommittedBackup{stored("a", "velero-b1")},
				Renamed: map[types.NamespacedName]string{key("a", "velero-b1"): "b1"},
			},
		},
		{
			name: "synced under the new name already: nothing to do, and no DataAvailable=False",
			backups: []cairnv1.Backup{
				backup("a", "b1", cairnv1.BackupPhaseCompleted, "cairn-own"),
				withData(backup("a", "velero-b1", cairnv1.BackupPhaseCompleted, loc), true),
			},
			committed: []storage.CommittedBackup{stored("a", "b1")},
			want:      Plan{Renamed: map[types.NamespacedName]string{key("a", "velero-b1"): "b1"}},
		},
		{
			name: "the own name free again: the backup stays under the new name, never shown twice",
			backups: []cairnv1.Backup{
				withData(backup("a", "velero-b1", cairnv1.BackupPhaseCompleted, loc), true),
			},
			committed: []storage.CommittedBackup{stored("a", "b1")},
			want:      Plan{Renamed: map[types.NamespacedName]string{key("a", "velero-b1"): "b1"}},
		},
		{
			name: "both names held by others: a conflict",
			backups: []cairnv1.Backup{
				backup("a", "b1", cairnv1.BackupPhaseCompleted, "cairn-own"),
				backup("a", "velero-b1", cairnv1.BackupPhaseCompleted, "cairn-own"),
			},
			committed: []storage.CommittedBackup{stored("a", "b1")},
			want: Plan{
				Conflicts: []Conflict{{Stored: stored("a", "b1"), Message: "backup a/b1 of the cluster, in storage location cairn-own, holds the name"}},
				Unclaimed: []types.NamespacedName{key("a", "b1")},
			},
		},
		{
			name:      "the new name is another stored backup's: a conflict, and that one is made under its own name",
			backups:   []cairnv1.Backup{backup("a", "b1", cairnv1.BackupPhaseCompleted, "cairn-own")},
			committed: []storage.CommittedBackup{stored("a", "b1"), stored("a", "velero-b1")},
			want: Plan{
				Create:    []storage.CommittedBackup{stored("a", "velero-b1")},
				Conflicts: []Conflict{{Stored: stored("a", "b1"), Message: "backup a/b1 of the cluster, in storage location cairn-own, holds the name"}},
				Unclaimed: []types.NamespacedName{key("a", "b1")},
			},
		},
		{
			name: "the renamed backup's data is gone: DataAvailable=False",
			backups: []cairnv1.Backup{
				withData(backup("a", "velero-b1", cairnv1.BackupPhaseCompleted, loc), true),
			},
			want: Plan{MarkMissing: []types.NamespacedName{key("a", "velero-b1")}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(Input{Location: loc, Backups: tt.backups, Committed: tt.committed, Namespaces: []string{"a"}, Rename: rename})
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decide =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}
