package phases

import (
	"errors"
	"slices"
	"strings"
	"testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// arrow is one expected phase change: who may write it, on which objects.
type arrow struct {
	owner    Owner
	variant  Variant
	from, to Phase
}

// wantArrows are every table's arrows, written out once more by hand: the tables must hold
// exactly these. Each is written by the code (internal/controller) unless marked DESIGN.md's.
var wantArrows = map[Kind][]arrow{
	KindBackup: {
		{OwnerQueue, "", "New", "Queued"},
		{OwnerQueue, "", "New", "FailedValidation"},
		{OwnerQueue, "", "New", "Failed"},
		{OwnerSync, VariantSyncPending, "New", "Completed"},
		{OwnerSync, VariantSyncPending, "New", "PartiallyFailed"},
		{OwnerSync, VariantSyncPending, "New", "FailedValidation"},
		{OwnerQueue, "", "Queued", "ReadyToStart"},
		{OwnerQueue, "", "Queued", "FailedValidation"}, // DESIGN.md's
		{OwnerQueue, "", "Queued", "Failed"},
		{OwnerBackup, "", "ReadyToStart", "InProgress"},
		{OwnerBackup, "", "ReadyToStart", "FailedValidation"},
		{OwnerBackup, "", "ReadyToStart", "Failed"},
		{OwnerBackup, "", "InProgress", "WaitingForPluginOperations"},
		{OwnerBackup, "", "InProgress", "WaitingForPluginOperationsPartiallyFailed"},
		{OwnerBackup, "", "InProgress", "Finalizing"},
		{OwnerBackup, "", "InProgress", "FinalizingPartiallyFailed"},
		{OwnerBackup, "", "InProgress", "FinalizingCancelled"},
		{OwnerBackup, "", "InProgress", "FinalizingFailed"},
		{OwnerOperations, "", "WaitingForPluginOperations", "WaitingForPluginOperationsPartiallyFailed"},
		{OwnerOperations, "", "WaitingForPluginOperations", "Finalizing"},
		{OwnerOperations, "", "WaitingForPluginOperations", "FinalizingPartiallyFailed"},
		{OwnerOperations, "", "WaitingForPluginOperations", "FinalizingCancelled"},
		{OwnerOperations, "", "WaitingForPluginOperationsPartiallyFailed", "FinalizingPartiallyFailed"},
		{OwnerOperations, "", "WaitingForPluginOperationsPartiallyFailed", "FinalizingCancelled"},
		{OwnerFinalizer, "", "Finalizing", "Completed"},
		{OwnerFinalizer, "", "Finalizing", "FinalizingCancelled"},
		{OwnerFinalizer, "", "Finalizing", "FinalizingFailed"},
		{OwnerFinalizer, "", "FinalizingPartiallyFailed", "PartiallyFailed"},
		{OwnerFinalizer, "", "FinalizingPartiallyFailed", "FinalizingCancelled"},
		{OwnerFinalizer, "", "FinalizingPartiallyFailed", "FinalizingFailed"},
		{OwnerFinalizer, "", "FinalizingCancelled", "Failed"},
		{OwnerFinalizer, "", "FinalizingFailed", "Failed"},
		{OwnerDeletion, "", "Completed", "Deleting"},
		{OwnerDeletion, "", "Completed", "DeletionFailed"},
		{OwnerDeletion, "", "PartiallyFailed", "Deleting"},
		{OwnerDeletion, "", "PartiallyFailed", "DeletionFailed"},
		{OwnerDeletion, "", "Failed", "Deleting"},
		{OwnerDeletion, "", "Failed", "DeletionFailed"},
		{OwnerDeletion, "", "FailedValidation", "Deleting"},
		{OwnerDeletion, "", "FailedValidation", "DeletionFailed"},
		{OwnerDeletion, "", "Deleting", "DeletionFailed"},
		{OwnerDeletion, "", "DeletionFailed", "Deleting"},
	},
	KindRestore: {
		{OwnerQueue, "", "New", "Queued"},
		{OwnerQueue, "", "New", "ReadyToStart"}, // DESIGN.md's
		{OwnerQueue, "", "New", "FailedValidation"},
		{OwnerQueue, "", "New", "Failed"},
		{OwnerQueue, "", "Queued", "ReadyToStart"},
		{OwnerQueue, "", "Queued", "FailedValidation"}, // DESIGN.md's
		{OwnerQueue, "", "Queued", "Failed"},
		{OwnerRestore, "", "ReadyToStart", "InProgress"},
		{OwnerRestore, "", "ReadyToStart", "FailedValidation"},
		{OwnerRestore, "", "ReadyToStart", "Failed"},
		{OwnerRestore, "", "InProgress", "WaitingForPluginOperations"},
		{OwnerRestore, "", "InProgress", "WaitingForPluginOperationsPartiallyFailed"},
		{OwnerRestore, "", "InProgress", "Finalizing"},
		{OwnerRestore, "", "InProgress", "FinalizingPartiallyFailed"},
		{OwnerRestore, "", "InProgress", "FinalizingCancelled"},
		{OwnerRestore, "", "InProgress", "Failed"},
		{OwnerRestoreOperations, "", "WaitingForPluginOperations", "WaitingForPluginOperationsPartiallyFailed"},
		{OwnerRestoreOperations, "", "WaitingForPluginOperations", "Finalizing"},
		{OwnerRestoreOperations, "", "WaitingForPluginOperations", "FinalizingPartiallyFailed"},
		{OwnerRestoreOperations, "", "WaitingForPluginOperations", "FinalizingCancelled"},
		{OwnerRestoreOperations, "", "WaitingForPluginOperationsPartiallyFailed", "FinalizingPartiallyFailed"},
		{OwnerRestoreOperations, "", "WaitingForPluginOperationsPartiallyFailed", "FinalizingCancelled"},
		{OwnerRestoreFinalizer, "", "Finalizing", "Completed"},
		{OwnerRestoreFinalizer, "", "Finalizing", "Failed"},
		{OwnerRestoreFinalizer, "", "FinalizingPartiallyFailed", "PartiallyFailed"},
		{OwnerRestoreFinalizer, "", "FinalizingPartiallyFailed", "Failed"},
		{OwnerRestoreFinalizer, "", "FinalizingCancelled", "Failed"},
	},
	KindPodVolumeBackup:  volumeArrows,
	KindPodVolumeRestore: volumeArrows,
}

var volumeArrows = []arrow{
	{OwnerNodeAgent, "", "New", "InProgress"},
	{OwnerNodeAgent, "", "New", "Failed"},
	{OwnerNodeAgent, "", "New", "Cancelled"},
	{OwnerNodeAgent, "", "InProgress", "Completed"},
	{OwnerNodeAgent, "", "InProgress", "Failed"},
	{OwnerNodeAgent, "", "InProgress", "Cancelled"},
}

// variants are the variants each kind's objects may be in.
func variants(t *Table) []Variant {
	var out []Variant
	for _, s := range t.States {
		if !slices.Contains(out, s.Variant) {
			out = append(out, s.Variant)
		}
	}
	return out
}

func TestTablesAreValid(t *testing.T) {
	for _, table := range Tables() {
		if err := table.Validate(); err != nil {
			t.Error(err)
		}
	}
}

func TestTablesHoldEveryAPIPhase(t *testing.T) {
	var backups, restores, volumes []Phase
	for _, p := range cairnv1.AllPodVolumePhases {
		volumes = append(volumes, Phase(p))
	}
	for _, p := range cairnv1.AllBackupPhases {
		backups = append(backups, Phase(p))
	}
	for _, p := range cairnv1.AllRestorePhases {
		restores = append(restores, Phase(p))
	}
	for _, tc := range []struct {
		table *Table
		want  []Phase
	}{{Backup, backups}, {Restore, restores}, {PodVolumeBackup, volumes}, {PodVolumeRestore, volumes}} {
		if got := tc.table.Phases(); !slices.Equal(got, tc.want) {
			t.Errorf("%s phases = %v, want the API's, in its order: %v", tc.table.Kind, got, tc.want)
		}
	}
}

// TestEveryArrowAndOwner walks every arrow of every table: each is accepted for its owner and
// refused for every other owner, and no other phase change is accepted for anyone.
func TestEveryArrowAndOwner(t *testing.T) {
	for _, table := range Tables() {
		want := wantArrows[table.Kind]
		if len(want) == 0 {
			t.Fatalf("no expected arrows for %s", table.Kind)
		}
		var got []arrow
		for _, s := range table.States {
			for _, from := range s.Phases {
				for _, a := range s.Arrows {
					got = append(got, arrow{s.Owner, s.Variant, from, a.To})
				}
			}
		}
		for _, a := range got {
			if !slices.Contains(want, a) {
				t.Errorf("%s: the table has an arrow the code does not write: %+v", table.Kind, a)
			}
		}
		for _, a := range want {
			if !slices.Contains(got, a) {
				t.Errorf("%s: the table lacks an arrow: %+v", table.Kind, a)
			}
		}
		for _, v := range variants(table) {
			for _, from := range table.Phases() {
				if _, ok := table.State(v, from); !ok {
					continue
				}
				for _, to := range table.Phases() {
					for _, owner := range Owners {
						err := table.Check(owner, v, from, to)
						allowed := from == to || slices.Contains(want, arrow{owner, v, from, to})
						switch {
						case allowed && err != nil:
							t.Errorf("%s: %s %s → %s by %s refused: %v", table.Kind, v, from, to, owner, err)
						case !allowed && err == nil:
							t.Errorf("%s: %s %s → %s by %s accepted", table.Kind, v, from, to, owner)
						case !allowed && !errors.As(err, new(*RefusedError)):
							t.Errorf("%s: %s %s → %s by %s: error %v is no *RefusedError", table.Kind, v, from, to, owner, err)
						}
					}
				}
			}
		}
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name     string
		table    *Table
		owner    Owner
		variant  Variant
		from, to Phase
		refused  string // a part of the refusal's reason; "" when accepted
	}{
		{"the empty phase is New", Backup, OwnerQueue, "", "", "Queued", ""},
		{"the empty phase is New, also as a target", Backup, OwnerQueue, "", "New", "", ""},
		{"no change is never checked, even by a non-owner", Backup, OwnerSync, "", "InProgress", "InProgress", ""},
		{"the queue may not take a synced backup", Backup, OwnerQueue, VariantSyncPending, "", "Queued", `owned by "sync"`},
		{"the sync may not complete a backup the queue owns", Backup, OwnerSync, "", "", "Completed", `owned by "queue"`},
		{"the sync completes a synced backup", Backup, OwnerSync, VariantSyncPending, "", "Completed", ""},
		{"a synced backup in another phase is no variant", Backup, OwnerSync, VariantSyncPending, "Completed", "Failed", "no phase Completed for sync-pending"},
		{"terminal is terminal", Backup, OwnerDeletion, "", "Completed", "InProgress", "no arrow Completed → InProgress"},
		{"no going back to the queue", Backup, OwnerBackup, "", "ReadyToStart", "Queued", "no arrow"},
		{"the finalizer may not skip finalizing", Backup, OwnerBackup, "", "InProgress", "Completed", "no arrow"},
		{"an owner of the target is no owner of the source", Backup, OwnerFinalizer, "", "InProgress", "Finalizing", `owned by "backup"`},
		{"an unknown phase", Backup, OwnerBackup, "", "Paused", "InProgress", "no phase Paused"},
		{"a restore's terminal phases have no owner", Restore, OwnerRestoreFinalizer, "", "Completed", "Failed", "no reconciler moves"},
		{"restores are never Deleting", Restore, OwnerDeletion, "", "Completed", "Deleting", "no reconciler moves"},
		{"the backup reconciler does not own restores", Restore, OwnerBackup, "", "ReadyToStart", "InProgress", `owned by "restore"`},
		{"a partially failed restore cannot complete", Restore, OwnerRestoreFinalizer, "", "FinalizingPartiallyFailed", "Completed", "no arrow"},
		{"a volume's node agent", PodVolumeBackup, OwnerNodeAgent, "", "", "InProgress", ""},
		{"the backup reconciler does not copy volumes", PodVolumeBackup, OwnerBackup, "", "InProgress", "Completed", `owned by "nodeagent"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.table.Check(tc.owner, tc.variant, tc.from, tc.to)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var refused *RefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("got %v, want a refusal", err)
			}
			if !strings.Contains(refused.Reason, tc.refused) {
				t.Errorf("reason %q does not say %q", refused.Reason, tc.refused)
			}
			if refused.From != tc.table.Normal(tc.from) || refused.To != tc.table.Normal(tc.to) || refused.Owner != tc.owner || refused.Kind != tc.table.Kind {
				t.Errorf("refusal %+v does not name the change", refused)
			}
		})
	}
}

func TestValidateFindsBrokenTables(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table Table
		want  string
	}{
		{"a phase twice", Table{Kind: "X", Initial: "A", States: []State{{Phases: []Phase{"A"}}, {Phases: []Phase{"A"}}}}, "in two states"},
		{"an arrow to nowhere", Table{Kind: "X", Initial: "A", States: []State{{Phases: []Phase{"A"}, Owner: "o", Arrows: []Arrow{{To: "B"}}}}}, "no phase of the table"},
		{"an arrow back", Table{Kind: "X", Initial: "A", States: []State{{Phases: []Phase{"A", "B"}, Owner: "o", Arrows: []Arrow{{To: "B"}}}}}, "no phase change"},
		{"arrows without an owner", Table{Kind: "X", Initial: "A", States: []State{{Phases: []Phase{"A"}, Arrows: []Arrow{{To: "B"}}}, {Phases: []Phase{"B"}}}}, "no owner"},
		{"no initial phase", Table{Kind: "X", Initial: "A", States: []State{{Phases: []Phase{"B"}}}}, "initial phase"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.table.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestMarkdown(t *testing.T) {
	got := Backup.Markdown()
	for _, want := range []string{
		"| phase | meaning | owner | may move to |\n|---|---|---|---|\n",
		"| `\"\"`, `New` | just created | queue | `Queued`, `FailedValidation`, `Failed` (cancelled or deleted) |\n",
		"| `\"\"` with annotation `cairn.dev/synced-from` |",
		"| `Deleting` | data deletion runs asynchronously | deletion | `DeletionFailed` (the deletion failed, or the operator restarted during it), object gone |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Markdown() lacks %q:\n%s", want, got)
		}
	}
	if rows := strings.Count(got, "\n"); rows != len(Backup.States)+2 {
		t.Errorf("Markdown() has %d lines, want a header, a rule and one row per state (%d)", rows, len(Backup.States))
	}
	if !strings.Contains(Restore.Markdown(), "| `Completed`, `PartiallyFailed`, `Failed`, `FailedValidation` | terminal; on delete") ||
		!strings.HasSuffix(strings.TrimSuffix(Restore.Markdown(), "\n"), "| — | object gone |") {
		t.Errorf("Restore.Markdown() shows its terminal row wrong:\n%s", Restore.Markdown())
	}
}

func TestReplaceTables(t *testing.T) {
	tables := []*Table{Backup, Restore}
	doc := "# Title\n\n" + BeginMarker(KindBackup) + "\nstale\nlines\n" + EndMarker(KindBackup) + "\n\ntext\n\n" +
		BeginMarker(KindRestore) + "\n" + EndMarker(KindRestore) + "\nend\n"
	got, err := ReplaceTables(doc, tables, KindBackup)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Title\n\n" + BeginMarker(KindBackup) + "\n" + Backup.Markdown() + EndMarker(KindBackup) + "\n\ntext\n\n" +
		BeginMarker(KindRestore) + "\n" + Restore.Markdown() + EndMarker(KindRestore) + "\nend\n"
	if got != want {
		t.Errorf("ReplaceTables() =\n%s\nwant\n%s", got, want)
	}
	again, err := ReplaceTables(got, tables, KindBackup)
	if err != nil || again != got {
		t.Errorf("a second ReplaceTables() changed the document (%v):\n%s", err, again)
	}

	for _, tc := range []struct {
		name, doc, want string
	}{
		{"a required table's markers missing", "# Title\n", "no markers for the Backup table"},
		{"a marker twice", doc + BeginMarker(KindRestore) + "\n", "must each be there once"},
		{"end before begin", "# Title\n" + EndMarker(KindBackup) + "\n" + BeginMarker(KindBackup) + "\n", "comes before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReplaceTables(tc.doc, tables, KindBackup); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReplaceTables() = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
