package restore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/restore"
)

const validateOperatorNamespace = "cairn-system"

// validateLocations are the operator's storage locations: ReadWrite and Available, ReadOnly
// and Available, Unavailable (its message naming its configuration), and one not validated yet.
var validateLocations = []cairnv1.BackupStorageLocation{
	{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: validateOperatorNamespace},
		Spec: cairnv1.BackupStorageLocationSpec{Default: true}, Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}},
	{ObjectMeta: metav1.ObjectMeta{Name: "archive", Namespace: validateOperatorNamespace},
		Spec:   cairnv1.BackupStorageLocationSpec{AccessMode: cairnv1.AccessModeReadOnly},
		Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}},
	{ObjectMeta: metav1.ObjectMeta{Name: "down", Namespace: validateOperatorNamespace},
		Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseUnavailable, Message: "bucket backups at http://10.1.2.3:9000: access denied with the key of Secret cairn-system/s3-creds"}},
	{ObjectMeta: metav1.ObjectMeta{Name: "fresh", Namespace: validateOperatorNamespace}},
}

// backupIn is backup b in namespace, in phase, on location.
func backupIn(namespace string, phase cairnv1.BackupPhase, loc string) *cairnv1.Backup {
	return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: namespace},
		Status: cairnv1.BackupStatus{Phase: phase, StorageLocation: loc}}
}

// validateCase is one row of TestValidate: a restore (backupName b unless the spec names
// another backup or a schedule) in namespace, the backup found for it, and the messages
// expected, in order (each a part of one message).
type validateCase struct {
	name      string
	namespace string
	spec      cairnv1.RestoreSpec
	backup    *cairnv1.Backup
	wantErrs  []string
}

func TestValidate(t *testing.T) {
	const admin, team = validateOperatorNamespace, "team-a"
	completed := func(namespace string) *cairnv1.Backup {
		return backupIn(namespace, cairnv1.BackupPhaseCompleted, "default")
	}
	deleting := completed(admin)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	badSelector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Maybe"}}}
	mappingMessage := func(from, to string) string {
		return fmt.Sprintf("spec.namespaceMapping: a restore in namespace team-a may only restore its own namespace into itself, not %s into %s (only restores in cairn-system may map namespaces)", from, to)
	}
	tests := []validateCase{
		{name: "admin restore of a Completed backup", namespace: admin, backup: completed(admin)},
		{name: "admin restore of a PartiallyFailed backup", namespace: admin, backup: backupIn(admin, cairnv1.BackupPhasePartiallyFailed, "default")},
		{name: "a backup on a ReadOnly location", namespace: admin, backup: backupIn(admin, cairnv1.BackupPhaseCompleted, "archive")},
		{name: "a location not validated yet (the restore reconciler waits for it)", namespace: admin, backup: backupIn(admin, cairnv1.BackupPhaseCompleted, "fresh")},
		{name: "admin restore with a mapping and every filter", namespace: admin, backup: completed(admin), spec: cairnv1.RestoreSpec{
			NamespaceMapping: map[string]cairnv1.NamespaceName{"shop": "shop-copy", "team-b": "team-c"}, IncludedNamespaces: []string{"shop", "team-*"},
			ExcludedNamespaces: []string{"kube-system"}, IncludedResources: []string{"configmaps", "deployments.apps"}, ExcludedResources: []string{"secrets"},
			IncludeClusterResources: ptr.To(true), LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
		{name: "team restore of its own backup", namespace: team, backup: completed(team)},
		{name: "team restore naming its own namespace", namespace: team, backup: completed(team),
			spec: cairnv1.RestoreSpec{IncludedNamespaces: []string{team}, IncludeClusterResources: ptr.To(false), NamespaceMapping: map[string]cairnv1.NamespaceName{team: team}}},

		{name: "backup missing by name", namespace: team, spec: cairnv1.RestoreSpec{BackupName: "gone"},
			wantErrs: []string{"spec.backupName: backup gone not found in namespace team-a (a restore restores only backups of its own namespace)"}},
		{name: "backup missing by schedule", namespace: team, spec: cairnv1.RestoreSpec{ScheduleName: "nightly"},
			wantErrs: []string{"spec.scheduleName: schedule nightly has no Completed backup in namespace team-a"}},
		{name: "backup being deleted", namespace: admin, backup: deleting, wantErrs: []string{"backup b is being deleted"}},
		{name: "location missing", namespace: admin, backup: backupIn(admin, cairnv1.BackupPhaseCompleted, "gone"),
			wantErrs: []string{"storage location gone of backup b does not exist"}},
		{name: "location Unavailable", namespace: admin, backup: backupIn(admin, cairnv1.BackupPhaseCompleted, "down"),
			wantErrs: []string{"storage location down of backup b is Unavailable: bucket backups at http://10.1.2.3:9000"}},
		{name: "no storage location in the backup's status", namespace: admin, backup: backupIn(admin, cairnv1.BackupPhaseCompleted, ""),
			wantErrs: []string{"backup b has no storage location in its status"}},

		{name: "team mapping its namespace elsewhere", namespace: team, backup: completed(team),
			spec: cairnv1.RestoreSpec{NamespaceMapping: map[string]cairnv1.NamespaceName{team: "team-b"}}, wantErrs: []string{mappingMessage("team-a", "team-b")}},
		{name: "team mapping another namespace into its own", namespace: team, backup: completed(team),
			spec: cairnv1.RestoreSpec{NamespaceMapping: map[string]cairnv1.NamespaceName{"team-b": team}}, wantErrs: []string{mappingMessage("team-b", "team-a")}},
		{name: "team mapping several: one message, the first key", namespace: team, backup: completed(team),
			spec:     cairnv1.RestoreSpec{NamespaceMapping: map[string]cairnv1.NamespaceName{"z-ns": "y", team: team, "a-ns": "x"}},
			wantErrs: []string{mappingMessage("a-ns", "x")}},
		{name: "team including another namespace", namespace: team, backup: completed(team),
			spec:     cairnv1.RestoreSpec{IncludedNamespaces: []string{team, "team-b"}},
			wantErrs: []string{`spec.includedNamespaces: a restore in namespace team-a may only restore its own namespace, not "team-b"`}},
		{name: "team including every namespace", namespace: team, backup: completed(team),
			spec: cairnv1.RestoreSpec{IncludedNamespaces: []string{"*"}}, wantErrs: []string{`may only restore its own namespace, not "*"`}},
		{name: "team including cluster resources", namespace: team, backup: completed(team),
			spec:     cairnv1.RestoreSpec{IncludeClusterResources: ptr.To(true)},
			wantErrs: []string{"spec.includeClusterResources: a restore in namespace team-a cannot include cluster-scoped resources"}},

		{name: "bad namespace pattern", namespace: admin, backup: completed(admin), spec: cairnv1.RestoreSpec{IncludedNamespaces: []string{"Team_A"}},
			wantErrs: []string{`spec.includedNamespaces: "Team_A" is not a valid namespace name`}},
		{name: "bad label selector", namespace: admin, backup: completed(admin), spec: cairnv1.RestoreSpec{LabelSelector: badSelector},
			wantErrs: []string{`spec.labelSelector: "Maybe" is not a valid label selector operator`}},
		{name: "bad or-selector", namespace: admin, backup: completed(admin), spec: cairnv1.RestoreSpec{OrLabelSelectors: []*metav1.LabelSelector{{}, badSelector}},
			wantErrs: []string{"spec.orLabelSelectors[1]"}},
		{name: "both selectors", namespace: admin, backup: completed(admin),
			spec:     cairnv1.RestoreSpec{LabelSelector: &metav1.LabelSelector{}, OrLabelSelectors: []*metav1.LabelSelector{{}}},
			wantErrs: []string{"spec.labelSelector and spec.orLabelSelectors cannot be used together"}},
		{name: "bad resource names", namespace: admin, backup: completed(admin),
			spec:     cairnv1.RestoreSpec{IncludedResources: []string{"ConfigMaps", "apps/deployments"}, ExcludedResources: []string{"*"}},
			wantErrs: []string{`"ConfigMaps" must be lowercase`, `"apps/deployments" is not a resource name`, `"*" would exclude every resource`}},

		{name: "every problem at once, the backup's one last", namespace: team, spec: cairnv1.RestoreSpec{BackupName: "gone",
			IncludedNamespaces: []string{"x"}, LabelSelector: badSelector, NamespaceMapping: map[string]cairnv1.NamespaceName{team: "x"}},
			wantErrs: []string{"may only restore its own namespace", "spec.labelSelector", "spec.namespaceMapping", "spec.backupName: backup gone not found"}},
	}
	for _, phase := range cairnv1.AllBackupPhases {
		if phase == cairnv1.BackupPhaseCompleted || phase == cairnv1.BackupPhasePartiallyFailed {
			continue
		}
		tests = append(tests, validateCase{name: "backup " + string(phase), namespace: admin, backup: backupIn(admin, phase, "default"),
			wantErrs: []string{fmt.Sprintf("backup b is %s: only Completed or PartiallyFailed backups can be restored", phase)}})
	}
	orphan := completed(team)
	orphan.Status.Conditions = []metav1.Condition{{Type: cairnv1.BackupConditionDataAvailable, Status: metav1.ConditionFalse,
		Reason: cairnv1.ReasonNotFoundInStorage, Message: "The backup's data is not in storage location default any more"}}
	found := completed(team)
	found.Status.Conditions = []metav1.Condition{{Type: cairnv1.BackupConditionDataAvailable, Status: metav1.ConditionTrue, Reason: cairnv1.ReasonFoundInStorage}}
	tests = append(tests,
		validateCase{name: "a backup whose data sync found gone from storage", namespace: team, backup: orphan,
			wantErrs: []string{"backup b cannot be restored: The backup's data is not in storage location default any more"}},
		validateCase{name: "a backup whose data sync found in storage", namespace: team, backup: found})
	tests = append(tests, validateCase{name: "backup with no phase yet", namespace: admin, backup: backupIn(admin, "", "default"),
		wantErrs: []string{"backup b is New: only Completed or PartiallyFailed backups can be restored"}})

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: tt.namespace}, Spec: tt.spec}
			if rs.Spec.BackupName == "" && rs.Spec.ScheduleName == "" {
				rs.Spec.BackupName = "b"
			}
			errs := restore.Validate(rs, validateOperatorNamespace, restore.ValidationFacts{Backup: tt.backup, Locations: validateLocations})
			all := strings.Join(errs, "\n")
			if len(errs) != len(tt.wantErrs) {
				t.Fatalf("got %d messages, want %d:\n%s", len(errs), len(tt.wantErrs), all)
			}
			// In order: the filters', the mapping's, then the backup's.
			for i, w := range tt.wantErrs {
				if !strings.Contains(errs[i], w) {
					t.Errorf("message %d = %q, want it to say %q", i, errs[i], w)
				}
			}
		})
	}
}

// TestValidateTellsTenantsNothingOfTheLocation: as for backups (docs/storage.md, "What teams
// see"), a team's restore whose backup's location is Unavailable says only that the location
// cannot be used now; the location's message, which may name its endpoint, bucket and Secret,
// is for the administrators.
func TestValidateTellsTenantsNothingOfTheLocation(t *testing.T) {
	down := validateLocations[2]
	for _, tt := range []struct {
		namespace string
		wantSays  string
		wantHides bool
	}{
		{namespace: validateOperatorNamespace, wantSays: down.Status.Message},
		{namespace: "team-a", wantSays: "storage location down", wantHides: true},
	} {
		t.Run(tt.namespace, func(t *testing.T) {
			rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: tt.namespace}, Spec: cairnv1.RestoreSpec{BackupName: "b"}}
			errs := restore.Validate(rs, validateOperatorNamespace, restore.ValidationFacts{
				Backup: backupIn(tt.namespace, cairnv1.BackupPhaseCompleted, "down"), Locations: validateLocations})
			if len(errs) != 1 || !strings.Contains(errs[0], tt.wantSays) {
				t.Fatalf("Validate = %q, want one message saying %q", errs, tt.wantSays)
			}
			if hides := !strings.Contains(errs[0], "10.1.2.3") && !strings.Contains(errs[0], "s3-creds"); hides != tt.wantHides {
				t.Errorf("Validate = %q: hides the location's details = %v, want %v", errs[0], hides, tt.wantHides)
			}
		})
	}
}

func TestNewestScheduleBackup(t *testing.T) {
	base := time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)
	b := func(name string, phase cairnv1.BackupPhase, hoursAfter int) cairnv1.Backup {
		return cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", CreationTimestamp: metav1.NewTime(base.Add(time.Duration(hoursAfter) * time.Hour))},
			Status: cairnv1.BackupStatus{Phase: phase}}
	}
	deleted := func(backup cairnv1.Backup) cairnv1.Backup {
		backup.DeletionTimestamp = &metav1.Time{Time: base.Add(100 * time.Hour)}
		return backup
	}
	started := func(backup cairnv1.Backup, hoursAfter int) cairnv1.Backup {
		backup.Status.StartTimestamp = &metav1.Time{Time: base.Add(time.Duration(hoursAfter) * time.Hour)}
		return backup
	}
	tests := []struct {
		name    string
		backups []cairnv1.Backup
		want    string // "" for none
	}{
		{name: "no backups"},
		{name: "one Completed", backups: []cairnv1.Backup{b("n-1", cairnv1.BackupPhaseCompleted, 0)}, want: "n-1"},
		{name: "the newest by creation time, whatever the names and order",
			backups: []cairnv1.Backup{b("n-c", cairnv1.BackupPhaseCompleted, 1), b("n-a", cairnv1.BackupPhaseCompleted, 3), b("n-b", cairnv1.BackupPhaseCompleted, 2)}, want: "n-a"},
		{name: "only Completed ones",
			backups: []cairnv1.Backup{b("n-1", cairnv1.BackupPhaseCompleted, 1), b("n-2", cairnv1.BackupPhasePartiallyFailed, 2),
				b("n-3", cairnv1.BackupPhaseFailed, 3), b("n-4", cairnv1.BackupPhaseInProgress, 4), b("n-5", "", 5), b("n-6", cairnv1.BackupPhaseDeleting, 6)},
			want: "n-1"},
		{name: "none Completed", backups: []cairnv1.Backup{b("n-2", cairnv1.BackupPhasePartiallyFailed, 2), b("n-3", cairnv1.BackupPhaseFailed, 3)}},
		{name: "a tie broken by name", backups: []cairnv1.Backup{b("n-a", cairnv1.BackupPhaseCompleted, 1), b("n-b", cairnv1.BackupPhaseCompleted, 1)}, want: "n-b"},
		{name: "a tie broken by name, in the other order", backups: []cairnv1.Backup{b("n-b", cairnv1.BackupPhaseCompleted, 1), b("n-a", cairnv1.BackupPhaseCompleted, 1)}, want: "n-b"},
		{name: "a deleted one is ignored, newest or not",
			backups: []cairnv1.Backup{deleted(b("n-3", cairnv1.BackupPhaseCompleted, 3)), b("n-2", cairnv1.BackupPhaseCompleted, 2), deleted(b("n-1", cairnv1.BackupPhaseCompleted, 1))},
			want:    "n-2"},
		{name: "only deleted ones", backups: []cairnv1.Backup{deleted(b("n-3", cairnv1.BackupPhaseCompleted, 3))}},
		// Synced from storage in a second cluster: created in the order of the sync, taken in
		// the order of their start.
		{name: "synced ones, by the time they were taken",
			backups: []cairnv1.Backup{started(b("n-old", cairnv1.BackupPhaseCompleted, 10), 1), started(b("n-new", cairnv1.BackupPhaseCompleted, 9), 5)},
			want:    "n-new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := restore.NewestScheduleBackup(tt.backups)
			switch {
			case tt.want == "" && got != nil:
				t.Errorf("NewestScheduleBackup = %s, want none", got.Name)
			case tt.want != "" && (got == nil || got.Name != tt.want):
				t.Errorf("NewestScheduleBackup = %v, want %s", got, tt.want)
			}
		})
	}
}
