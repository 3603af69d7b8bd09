package backupsync

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

const loc = "shared"

// backup is a backup of the cluster in namespace ns, in phase, in storage location location.
func backup(ns, name string, phase cairnv1.BackupPhase, location string) cairnv1.Backup {
	return cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Status:     cairnv1.BackupStatus{Phase: phase, StorageLocation: location},
	}
}

// pending is a backup the sync of location made in namespace a, still in phase "".
func pending(name, location string) cairnv1.Backup {
	b := backup("a", name, "", "")
	b.Annotations = map[string]string{cairnv1.SyncedFromAnnotation: location}
	return b
}

func withData(b cairnv1.Backup, available bool) cairnv1.Backup {
	b.Status.Conditions = []metav1.Condition{DataCondition(available, loc, 0, metav1.Now().Time)}
	return b
}

func deleted(b cairnv1.Backup) cairnv1.Backup {
	now := metav1.Now()
	b.DeletionTimestamp = &now
	return b
}

func stored(ns, name string) storage.CommittedBackup {
	return storage.CommittedBackup{Namespace: ns, Name: name}
}

func key(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name       string
		backups    []cairnv1.Backup
		committed  []storage.CommittedBackup
		namespaces []string
		want       Plan
	}{
		{
			name:       "an empty cluster gets every committed backup whose namespace exists",
			committed:  []storage.CommittedBackup{stored("a", "b1"), stored("a", "b2"), stored("gone", "b1"), stored("gone", "b2"), stored("other-gone", "x")},
			namespaces: []string{"a"},
			want: Plan{
				Create:            []storage.CommittedBackup{stored("a", "b1"), stored("a", "b2")},
				MissingNamespaces: []string{"gone", "other-gone"},
				Unclaimed:         []types.NamespacedName{key("gone", "b1"), key("gone", "b2"), key("other-gone", "x")},
			},
		},
		{
			name: "nothing changed: nothing to do",
			backups: []cairnv1.Backup{
				backup("a", "own", cairnv1.BackupPhaseCompleted, loc),
				withData(backup("a", "synced", cairnv1.BackupPhasePartiallyFailed, loc), true),
				backup("a", "failed", cairnv1.BackupPhaseFailed, loc), // never committed
				backup("a", "running", cairnv1.BackupPhaseInProgress, loc),
			},
			committed:  []storage.CommittedBackup{stored("a", "own"), stored("a", "synced")},
			namespaces: []string{"a"},
			want:       Plan{},
		},
		{
			name: "a backup being deleted keeps its object, so it is never made again",
			backups: []cairnv1.Backup{
				deleted(backup("a", "going", cairnv1.BackupPhaseCompleted, loc)),
				backup("a", "deleting", cairnv1.BackupPhaseDeleting, loc),
				backup("a", "retrying", cairnv1.BackupPhaseDeletionFailed, loc),
			},
			committed:  []storage.CommittedBackup{stored("a", "going"), stored("a", "deleting"), stored("a", "retrying")},
			namespaces: []string{"a"},
			want:       Plan{},
		},
		{
			name: "a finished backup whose marker is gone is marked missing; one marked missing whose marker is back is marked found",
			backups: []cairnv1.Backup{
				backup("a", "orphan", cairnv1.BackupPhaseCompleted, loc),
				backup("a", "orphan-partial", cairnv1.BackupPhasePartiallyFailed, loc),
				withData(backup("a", "already-missing", cairnv1.BackupPhaseCompleted, loc), false),
				withData(backup("a", "back", cairnv1.BackupPhaseCompleted, loc), false),
				deleted(backup("a", "orphan-being-deleted", cairnv1.BackupPhaseCompleted, loc)),
				backup("a", "elsewhere", cairnv1.BackupPhaseCompleted, "other"),
				backup("a", "still-finalizing", cairnv1.BackupPhaseFinalizing, loc),
			},
			committed:  []storage.CommittedBackup{stored("a", "back")},
			namespaces: []string{"a"},
			want: Plan{
				MarkMissing: []types.NamespacedName{key("a", "orphan"), key("a", "orphan-partial")},
				MarkFound:   []types.NamespacedName{key("a", "back")},
			},
		},
		{
			name: "synced backups still in phase \"\" are completed from their marker, whether it is there or not",
			backups: []cairnv1.Backup{
				pending("p1", loc),
				pending("p2", loc),
				pending("of-another-location", "other"),
			},
			committed:  []storage.CommittedBackup{stored("a", "p1")},
			namespaces: []string{"a"},
			want:       Plan{Complete: []types.NamespacedName{key("a", "p1"), key("a", "p2")}},
		},
		{
			name: "a name held by another location's backup, or by a backup that has not run, is a conflict, not synced",
			backups: []cairnv1.Backup{
				backup("a", "elsewhere", cairnv1.BackupPhaseCompleted, "other"),
				pending("synced-elsewhere", "other"),
				backup("a", "new", "", ""),
				backup("a", "queued", cairnv1.BackupPhaseQueued, loc),
				backup("a", "refused", cairnv1.BackupPhaseFailedValidation, ""), // the queue refused it: no location
			},
			committed:  []storage.CommittedBackup{stored("a", "elsewhere"), stored("a", "synced-elsewhere"), stored("a", "new"), stored("a", "queued"), stored("a", "refused")},
			namespaces: []string{"a"},
			want: Plan{
				Conflicts: []Conflict{
					{Stored: stored("a", "elsewhere"), Message: "backup a/elsewhere of the cluster, in storage location other, holds the name"},
					{Stored: stored("a", "synced-elsewhere"), Message: "backup a/synced-elsewhere of the cluster, in storage location other, holds the name"},
					{Stored: stored("a", "new"), Message: "backup a/new of the cluster, which has not run yet, holds the name"},
					{Stored: stored("a", "queued"), Message: "backup a/queued of the cluster, which has not run yet, holds the name"},
					{Stored: stored("a", "refused"), Message: "backup a/refused of the cluster, in no storage location, holds the name"},
				},
				Unclaimed: []types.NamespacedName{key("a", "elsewhere"), key("a", "synced-elsewhere"), key("a", "new"), key("a", "queued"), key("a", "refused")},
			},
		},
		{
			name: "a running backup of the location may be committing: its marker is its own",
			backups: []cairnv1.Backup{
				backup("a", "finalizing", cairnv1.BackupPhaseFinalizing, loc),
			},
			committed:  []storage.CommittedBackup{stored("a", "finalizing")},
			namespaces: []string{"a"},
			want:       Plan{},
		},
		{
			name:       "names that cannot be a Backup's are left out, never created",
			committed:  []storage.CommittedBackup{stored("A", "b"), stored("a", "B"), stored("a", "x_y"), stored("a", strings.Repeat("x", 201)), stored("a", "ok")},
			namespaces: []string{"a", "A"},
			want: Plan{
				Create:  []storage.CommittedBackup{stored("a", "ok")},
				Invalid: []storage.CommittedBackup{stored("A", "b"), stored("a", "B"), stored("a", "x_y"), stored("a", strings.Repeat("x", 201))},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(Input{Location: loc, Backups: tt.backups, Committed: tt.committed, Namespaces: tt.namespaces})
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decide =\n%+v\nwant\n%+v", got, tt.want)
			}
			if got.Changed() != (len(tt.want.Create)+len(tt.want.Complete)+len(tt.want.MarkMissing)+len(tt.want.MarkFound) > 0) {
				t.Errorf("Changed = %v", got.Changed())
			}
		})
	}
}

func TestNameConflict(t *testing.T) {
	b := backup("team", "daily", "", "")
	tests := []struct {
		name       string
		accessMode cairnv1.AccessMode
		held       bool
		want       string
	}{
		{name: "a name no other backup holds", accessMode: cairnv1.AccessModeReadWrite},
		{name: "a name another Backup object committed", accessMode: cairnv1.AccessModeReadWrite, held: true,
			want: "storage location shared already holds a committed backup named team/daily, made by another Backup object (another cluster's, or one deleted with cairn.dev/keep-data); this backup would overwrite it: choose another name, or delete that data first"},
		{name: "a ReadOnly location is refused when the backup starts, not here", accessMode: cairnv1.AccessModeReadOnly, held: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NameConflict(&b, loc, tt.accessMode, tt.held); got != tt.want {
				t.Errorf("NameConflict = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCatalog(t *testing.T) {
	var c Catalog
	if c.Holds(loc, key("a", "b")) {
		t.Error("an empty catalog holds a name")
	}
	c.Set(loc, []types.NamespacedName{key("a", "b")})
	if !c.Holds(loc, key("a", "b")) || c.Holds("other", key("a", "b")) || c.Holds(loc, key("a", "c")) {
		t.Error("the catalog holds the wrong names")
	}
	c.Set(loc, nil)
	if c.Holds(loc, key("a", "b")) {
		t.Error("a pass that no longer finds a name leaves it in the catalog")
	}
	c.Set(loc, []types.NamespacedName{key("a", "b")})
	c.Forget(loc)
	if c.Holds(loc, key("a", "b")) {
		t.Error("a forgotten location still holds a name")
	}
	var none *Catalog
	if none.Holds(loc, key("a", "b")) {
		t.Error("no catalog holds a name")
	}
}
