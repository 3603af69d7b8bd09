package schedule

import (
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/validation"

	// The manager embeds the zone database; so does this test binary, so that the zones
	// resolve whatever the machine has.
	_ "time/tzdata"
)

func mustParse(t *testing.T, expr string) interface{ Next(time.Time) time.Time } {
	t.Helper()
	s, err := Parse(expr)
	if err != nil {
		t.Fatalf("Parse(%q): %v", expr, err)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestManagerEmbedsZoneData: the manager binary carries its own zone database (time/tzdata),
// so that CRON_TZ=America/New_York works in an image without /usr/share/zoneinfo.
func TestManagerEmbedsZoneData(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/cairn-backup/cairn/cmd/manager").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if !slices.Contains(strings.Fields(string(out)), "time/tzdata") {
		t.Error("cmd/manager does not import time/tzdata")
	}
	s := mustParse(t, "CRON_TZ=America/New_York 0 3 * * *")
	if got, want := s.Next(utc("2026-01-15T00:00:00Z")), utc("2026-01-15T08:00:00Z"); !got.Equal(want) {
		t.Errorf("Next = %v, want %v", got.UTC(), want)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		expr    string
		wantErr string
	}{
		{expr: "0 3 * * *"},
		{expr: "*/15 * * * 1-5"},
		{expr: "@daily"},
		{expr: "@hourly"},
		{expr: "@weekly"},
		{expr: "@every 6h"},
		{expr: "@every 90s"},
		{expr: "CRON_TZ=Europe/Paris 0 3 * * *"},
		{expr: "TZ=Asia/Tokyo @daily"},
		{expr: "  0 3 * * *  "},
		{expr: "", wantErr: "empty"},
		{expr: "0 3 * *", wantErr: "expected exactly 5 fields"},
		{expr: "0 0 3 * * *", wantErr: "expected exactly 5 fields"},
		{expr: "61 * * * *", wantErr: "above maximum"},
		{expr: "@every soon", wantErr: "failed to parse duration"},
		{expr: "@fortnightly", wantErr: "unrecognized descriptor"},
		{expr: "CRON_TZ=Mars/Olympus 0 3 * * *", wantErr: "unknown time zone"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			_, err := Parse(tt.expr)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Parse(%q): %v", tt.expr, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Parse(%q) = %v, want an error with %q", tt.expr, err, tt.wantErr)
			}
		})
	}
}

// TestNext covers the next run across time zones, the daylight-saving gap and overlap of
// America/New_York (2026: clocks go 02:00→03:00 on 8 March, 02:00→01:00 on 1 November),
// descriptors and @every.
func TestNext(t *testing.T) {
	tests := []struct {
		name  string
		expr  string
		after string
		want  string
	}{
		{"UTC without a prefix", "0 3 * * *", "2026-01-15T02:59:59Z", "2026-01-15T03:00:00Z"},
		{"UTC, after the tick", "0 3 * * *", "2026-01-15T03:00:00Z", "2026-01-16T03:00:00Z"},
		{"New York in winter (UTC-5)", "CRON_TZ=America/New_York 0 3 * * *", "2026-01-15T00:00:00Z", "2026-01-15T08:00:00Z"},
		{"New York in summer (UTC-4)", "CRON_TZ=America/New_York 0 3 * * *", "2026-07-15T00:00:00Z", "2026-07-15T07:00:00Z"},
		{"TZ= is CRON_TZ=", "TZ=America/New_York 0 3 * * *", "2026-07-15T00:00:00Z", "2026-07-15T07:00:00Z"},
		{"Tokyo (UTC+9), the day before in UTC", "CRON_TZ=Asia/Tokyo 0 3 * * *", "2026-01-15T00:00:00Z", "2026-01-15T18:00:00Z"},
		{"Kolkata (UTC+5:30)", "CRON_TZ=Asia/Kolkata 0 * * * *", "2026-01-15T00:00:00Z", "2026-01-15T00:30:00Z"},
		{"@daily in a zone", "CRON_TZ=Europe/Paris @daily", "2026-01-15T12:00:00Z", "2026-01-15T23:00:00Z"},
		// 02:30 does not exist on 8 March 2026 in New York: that day has no run, the next
		// is on 9 March at 02:30 EDT.
		{"DST gap: a time that does not exist is skipped", "CRON_TZ=America/New_York 30 2 * * *", "2026-03-08T05:00:00Z", "2026-03-09T06:30:00Z"},
		{"DST gap: an hourly schedule jumps the missing hour", "CRON_TZ=America/New_York 0 * * * *", "2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z"},
		// 01:30 happens twice on 1 November 2026 (EDT then EST): one run, the first.
		{"DST overlap: the first 01:30", "CRON_TZ=America/New_York 30 1 * * *", "2026-11-01T04:00:00Z", "2026-11-01T05:30:00Z"},
		{"DST overlap: not again an hour later", "CRON_TZ=America/New_York 30 1 * * *", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
		{"DST overlap: @daily at 00:00 is not repeated", "CRON_TZ=America/New_York @daily", "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"},
		{"DST overlap: every 30 minutes from 1 to 2 runs once per time of day", "CRON_TZ=America/New_York */30 1 * * *", "2026-11-01T05:30:00Z", "2026-11-02T06:00:00Z"},
		{"DST overlap: an hourly schedule runs in both hours", "CRON_TZ=America/New_York 30 * * * *", "2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"},
		{"@every from a whole second", "@every 6h", "2026-01-15T00:00:00Z", "2026-01-15T06:00:00Z"},
		{"@every rounds to the second", "@every 5s", "2026-01-15T00:00:00.700Z", "2026-01-15T00:00:05Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustParse(t, tt.expr).Next(utc(tt.after))
			if want := utc(tt.want); !got.Equal(want) {
				t.Errorf("Next(%s) = %s, want %s", tt.after, got.UTC().Format(time.RFC3339), tt.want)
			}
		})
	}
}

func TestLatestTick(t *testing.T) {
	tests := []struct {
		name       string
		expr       string
		since, now string
		want       string // "" means no tick
	}{
		{"no tick yet", "0 * * * *", "2026-01-15T00:10:00Z", "2026-01-15T00:59:59Z", ""},
		{"exactly at the tick", "0 * * * *", "2026-01-15T00:10:00Z", "2026-01-15T01:00:00Z", "2026-01-15T01:00:00Z"},
		{"several missed: the last", "0 * * * *", "2026-01-15T00:10:00Z", "2026-01-15T05:30:00Z", "2026-01-15T05:00:00Z"},
		{"@every, several missed", "@every 5s", "2026-01-15T00:00:00.300Z", "2026-01-15T00:00:23Z", "2026-01-15T00:00:20Z"},
		{"@every, a year of downtime", "@every 1s", "2025-01-15T00:00:00Z", "2026-01-15T00:00:00.5Z", "2026-01-15T00:00:00Z"},
		{"minutely, a month of downtime", "* * * * *", "2025-12-15T00:00:30Z", "2026-01-15T00:00:59Z", "2026-01-15T00:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := LatestTick(s, utc(tt.since), utc(tt.now))
			switch {
			case tt.want == "" && ok:
				t.Errorf("LatestTick = %s, want none", got.UTC())
			case tt.want != "" && (!ok || !got.Equal(utc(tt.want))):
				t.Errorf("LatestTick = %s (%v), want %s", got.UTC(), ok, tt.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	hourly, err := Parse("0 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	created := utc("2026-01-15T00:10:00Z")
	tests := []struct {
		name string
		in   Input
		want Decision
	}{
		{
			name: "a new schedule waits for its first tick",
			in:   Input{Now: created, Since: created, Resumed: true},
			want: Decision{Action: Wait, Next: utc("2026-01-15T01:00:00Z")},
		},
		{
			name: "a new schedule with skipImmediately waits the same",
			in:   Input{Now: created.Add(time.Minute), Since: created, Resumed: true, SkipImmediately: true},
			want: Decision{Action: Wait, Next: utc("2026-01-15T01:00:00Z")},
		},
		{
			name: "woken a little early, it waits for the tick",
			in:   Input{Now: utc("2026-01-15T00:59:59.990Z"), Since: created},
			want: Decision{Action: Wait, Next: utc("2026-01-15T01:00:00Z")},
		},
		{
			name: "the first tick creates a backup named for it",
			in:   Input{Now: utc("2026-01-15T01:00:00.020Z"), Since: created},
			want: Decision{Action: Create, Tick: utc("2026-01-15T01:00:00Z"), Backup: "nightly-20260115010000", Next: utc("2026-01-15T02:00:00Z")},
		},
		{
			name: "after a run, the next tick",
			in:   Input{Now: utc("2026-01-15T01:00:00.500Z"), Since: utc("2026-01-15T01:00:00.100Z")},
			want: Decision{Action: Wait, Next: utc("2026-01-15T02:00:00Z")},
		},
		{
			name: "runs missed during downtime make exactly one backup, for the last tick",
			in:   Input{Now: utc("2026-01-15T05:17:00Z"), Since: utc("2026-01-15T01:00:00Z")},
			want: Decision{Action: Create, Tick: utc("2026-01-15T05:00:00Z"), Backup: "nightly-20260115050000", Next: utc("2026-01-15T06:00:00Z")},
		},
		{
			name: "a restart just after a run finds its backup: the run is done",
			in: Input{Now: utc("2026-01-15T01:00:03Z"), Since: created,
				Backups: []BackupState{{Name: "nightly-20260115010000", Phase: cairnv1.BackupPhaseQueued}}},
			want: Decision{Action: Done, Tick: utc("2026-01-15T01:00:00Z"), Backup: "nightly-20260115010000", Next: utc("2026-01-15T02:00:00Z")},
		},
		{
			name: "a previous backup still queued: the run is skipped",
			in: Input{Now: utc("2026-01-15T02:00:00Z"), Since: utc("2026-01-15T01:00:00Z"),
				Backups: []BackupState{{Name: "nightly-20260115010000", Phase: cairnv1.BackupPhaseQueued}}},
			want: Decision{Action: SkipRunning, Tick: utc("2026-01-15T02:00:00Z"), Running: "nightly-20260115010000", Next: utc("2026-01-15T03:00:00Z")},
		},
		{
			name: "a previous backup still new (phase unset): skipped",
			in: Input{Now: utc("2026-01-15T02:00:00Z"), Since: utc("2026-01-15T01:00:00Z"),
				Backups: []BackupState{{Name: "nightly-20260115010000"}}},
			want: Decision{Action: SkipRunning, Tick: utc("2026-01-15T02:00:00Z"), Running: "nightly-20260115010000", Next: utc("2026-01-15T03:00:00Z")},
		},
		{
			name: "ended, failed and deleting backups do not hold the schedule back",
			in: Input{Now: utc("2026-01-15T02:00:00Z"), Since: utc("2026-01-15T01:00:00Z"),
				Backups: []BackupState{
					{Name: "a", Phase: cairnv1.BackupPhaseCompleted}, {Name: "b", Phase: cairnv1.BackupPhaseFailed},
					{Name: "c", Phase: cairnv1.BackupPhasePartiallyFailed}, {Name: "d", Phase: cairnv1.BackupPhaseFailedValidation},
					{Name: "e", Phase: cairnv1.BackupPhaseDeleting}, {Name: "f", Phase: cairnv1.BackupPhaseDeletionFailed},
				}},
			want: Decision{Action: Create, Tick: utc("2026-01-15T02:00:00Z"), Backup: "nightly-20260115020000", Next: utc("2026-01-15T03:00:00Z")},
		},
		{
			name: "paused: nothing, and no wake-up",
			in:   Input{Now: utc("2026-01-15T05:00:00Z"), Since: utc("2026-01-15T01:00:00Z"), Paused: true},
			want: Decision{Action: Wait},
		},
		{
			name: "unpaused after missed ticks: one backup at once",
			in:   Input{Now: utc("2026-01-15T05:20:00Z"), Since: utc("2026-01-15T01:00:00Z"), Resumed: true},
			want: Decision{Action: Create, Tick: utc("2026-01-15T05:00:00Z"), Backup: "nightly-20260115050000", Next: utc("2026-01-15T06:00:00Z")},
		},
		{
			name: "unpaused after missed ticks with skipImmediately: none, wait for the next tick",
			in:   Input{Now: utc("2026-01-15T05:20:00Z"), Since: utc("2026-01-15T01:00:00Z"), Resumed: true, SkipImmediately: true},
			want: Decision{Action: SkipImmediately, Tick: utc("2026-01-15T05:00:00Z"), Next: utc("2026-01-15T06:00:00Z")},
		},
		{
			name: "unpaused before any missed tick: skipImmediately has nothing to skip",
			in:   Input{Now: utc("2026-01-15T01:20:00Z"), Since: utc("2026-01-15T01:00:00Z"), Resumed: true, SkipImmediately: true},
			want: Decision{Action: Wait, Next: utc("2026-01-15T02:00:00Z")},
		},
		{
			name: "skipImmediately left set does not skip an ordinary tick",
			in:   Input{Now: utc("2026-01-15T02:00:00Z"), Since: utc("2026-01-15T01:00:00Z"), SkipImmediately: true},
			want: Decision{Action: Create, Tick: utc("2026-01-15T02:00:00Z"), Backup: "nightly-20260115020000", Next: utc("2026-01-15T03:00:00Z")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Schedule, tt.in.Name = hourly, "nightly"
			got := Decide(tt.in)
			if got.Action != tt.want.Action || !got.Tick.Equal(tt.want.Tick) || got.Backup != tt.want.Backup ||
				got.Running != tt.want.Running || !got.Next.Equal(tt.want.Next) {
				t.Errorf("Decide =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

// TestDecideEveryAfterDowntime: a fast @every schedule that missed many ticks makes one run.
func TestDecideEveryAfterDowntime(t *testing.T) {
	every, err := Parse("@every 2s")
	if err != nil {
		t.Fatal(err)
	}
	got := Decide(Input{Schedule: every, Name: "fast", Now: utc("2026-01-15T00:01:00.5Z"), Since: utc("2026-01-15T00:00:00Z")})
	want := Decision{Action: Create, Tick: utc("2026-01-15T00:01:00Z"), Backup: "fast-20260115000100", Next: utc("2026-01-15T00:01:02Z")}
	if got != want {
		t.Errorf("Decide = %+v, want %+v", got, want)
	}
}

func TestBackupNameIsUTC(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	if got := BackupName("s", time.Date(2026, 7, 1, 3, 0, 0, 0, paris)); got != "s-20260701010000" {
		t.Errorf("BackupName = %q", got)
	}
}

func TestNewBackup(t *testing.T) {
	s := &cairnv1.Schedule{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "nightly", UID: "u1",
			Labels: map[string]string{"app.kubernetes.io/managed-by": "argocd"}},
		Spec: cairnv1.ScheduleSpec{Schedule: "@daily", Template: cairnv1.BackupSpec{IncludedNamespaces: []string{"team-a"}}},
	}
	tick := utc("2026-01-15T00:00:00Z")

	b := NewBackup(s, tick)
	if b.Namespace != "team-a" || b.Name != "nightly-20260115000000" {
		t.Errorf("backup %s/%s", b.Namespace, b.Name)
	}
	if len(b.Labels) != 1 || b.Labels[cairnv1.ScheduleNameLabel] != "nightly" {
		t.Errorf("labels %v: want only the schedule-name label, never the schedule's own", b.Labels)
	}

	// The template's labels go on the backup, beside the schedule-name label, which a
	// template label of the same key cannot replace; the template's map is not shared.
	labelled := s.DeepCopy()
	labelled.Spec.Template.Metadata = &cairnv1.BackupMetadata{}
	labelled.Spec.Template.Metadata.Labels = map[string]string{"tier": "gold", cairnv1.ScheduleNameLabel: "other"}
	lb := NewBackup(labelled, tick)
	if !maps.Equal(lb.Labels, map[string]string{"tier": "gold", cairnv1.ScheduleNameLabel: "nightly"}) {
		t.Errorf("labels %v: want the template's labels and the schedule-name label", lb.Labels)
	}
	lb.Labels["tier"] = "changed"
	if labelled.Spec.Template.Metadata.Labels["tier"] != "gold" {
		t.Error("the backup's labels share the template's memory")
	}
	if !slices.Equal(b.Spec.IncludedNamespaces, []string{"team-a"}) {
		t.Errorf("spec %+v", b.Spec)
	}
	if len(b.OwnerReferences) != 0 {
		t.Errorf("owner references %v without useOwnerReferencesInBackup", b.OwnerReferences)
	}
	b.Spec.IncludedNamespaces[0] = "changed"
	if s.Spec.Template.IncludedNamespaces[0] != "team-a" {
		t.Error("the backup's spec shares the template's memory")
	}

	s.Spec.UseOwnerReferencesInBackup = true
	refs := NewBackup(s, tick).OwnerReferences
	want := metav1.OwnerReference{APIVersion: "cairn.dev/v1alpha1", Kind: "Schedule", Name: "nightly", UID: "u1", Controller: ptr.To(true)}
	if len(refs) != 1 || refs[0].APIVersion != want.APIVersion || refs[0].Kind != want.Kind || refs[0].Name != want.Name ||
		refs[0].UID != want.UID || !ptr.Deref(refs[0].Controller, false) {
		t.Errorf("owner references %+v, want %+v", refs, want)
	}
}

func TestValidate(t *testing.T) {
	locations := []cairnv1.BackupStorageLocation{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "default"},
		Spec:       cairnv1.BackupStorageLocationSpec{Default: true},
	}}
	schedule := func(ns, expr string, template cairnv1.BackupSpec) *cairnv1.Schedule {
		return &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
			Spec: cairnv1.ScheduleSpec{Schedule: expr, Template: template}}
	}
	// limited takes team backups of at most 24h, from namespaces labelled tier=prod.
	limited := []cairnv1.BackupStorageLocation{*locations[0].DeepCopy()}
	limited[0].Spec.TeamLimits = &cairnv1.LocationTeamLimits{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}},
		MaxTTL:            &metav1.Duration{Duration: 24 * time.Hour},
	}
	withRetention := schedule("team-a", "@daily", cairnv1.BackupSpec{})
	withRetention.Spec.Retention = &cairnv1.RetentionPolicy{Daily: 7}
	tests := []struct {
		name      string
		s         *cairnv1.Schedule
		locations []cairnv1.BackupStorageLocation
		want      []string // substrings, one per message
	}{
		{name: "valid, in a tenant namespace", s: schedule("team-a", "@daily", cairnv1.BackupSpec{}), locations: locations},
		{name: "valid, admin selecting anything", s: schedule("cairn-system", "CRON_TZ=America/New_York 0 3 * * *",
			cairnv1.BackupSpec{IncludedNamespaces: []string{"*"}, IncludeClusterResources: ptr.To(true)}), locations: locations},
		{name: "invalid cron", s: schedule("team-a", "0 3 * *", cairnv1.BackupSpec{}), locations: locations,
			want: []string{`spec.schedule: "0 3 * *": expected exactly 5 fields`}},
		{name: "unknown zone", s: schedule("team-a", "CRON_TZ=America/Nowhere 0 3 * * *", cairnv1.BackupSpec{}), locations: locations,
			want: []string{`spec.schedule: "CRON_TZ=America/Nowhere 0 3 * * *": provided bad location America/Nowhere: unknown time zone America/Nowhere`}},
		{name: "a tenant selecting another namespace", s: schedule("team-a", "@daily", cairnv1.BackupSpec{IncludedNamespaces: []string{"team-b"}}), locations: locations,
			want: []string{`spec.template.includedNamespaces: a backup in namespace team-a may only back up its own namespace, not "team-b"`}},
		{name: "no storage location", s: schedule("team-a", "@daily", cairnv1.BackupSpec{}),
			want: []string{"spec.template.storageLocation"}},
		{name: "cancel in the template", s: schedule("team-a", "@daily", cairnv1.BackupSpec{Cancel: true}), locations: locations,
			want: []string{"spec.template.cancel"}},
		{name: "template labels", s: schedule("team-a", "@daily", cairnv1.BackupSpec{Metadata: &cairnv1.BackupMetadata{Labels: map[string]string{
			"tier": "gold", "example.com/team": "a"}}}), locations: locations},
		{name: "bad template labels", s: schedule("team-a", "@daily", cairnv1.BackupSpec{Metadata: &cairnv1.BackupMetadata{Labels: map[string]string{
			"not a key": "v", "tier": "not a value!", "cairn.dev/schedule-name": "x", "sync.cairn.dev/x": "y", "notcairn.dev/ok": "z"}}}), locations: locations,
			want: []string{
				`spec.template.metadata.labels[cairn.dev/schedule-name]: keys in the cairn.dev domain are Cairn's own`,
				`spec.template.metadata.labels[not a key]: the key is not a label key`,
				`spec.template.metadata.labels[sync.cairn.dev/x]: keys in the cairn.dev domain are Cairn's own`,
				`spec.template.metadata.labels[tier]: "not a value!" is not a label value`,
			}},
		{name: "a team's ttl within its location's limits", s: schedule("team-a", "@daily", cairnv1.BackupSpec{TTL: &metav1.Duration{Duration: time.Hour}}),
			locations: limited},
		{name: "a team's ttl over its location's maxTTL", s: schedule("team-a", "@daily", cairnv1.BackupSpec{TTL: &metav1.Duration{Duration: 48 * time.Hour}}),
			locations: limited, want: []string{"spec.template.ttl: 48h0m0s is longer than storage location default allows a backup in a team namespace (teamLimits.maxTTL 24h0m0s)"}},
		{name: "a team's retention keeps backups with no expiry", s: withRetention, locations: limited,
			want: []string{"spec.template.ttl: 0s (never expire) is longer than storage location default allows"}},
		{name: "a namespace its location's selector leaves out", s: schedule("team-b", "@daily", cairnv1.BackupSpec{TTL: &metav1.Duration{Duration: time.Hour}}),
			locations: limited, want: []string{"spec.template.storageLocation: storage location default takes backups only from the namespaces its teamLimits.namespaceSelector selects (tier=prod), and namespace team-b is not one of them"}},
		{name: "an administrator's schedule is not limited", s: schedule("cairn-system", "@daily", cairnv1.BackupSpec{TTL: &metav1.Duration{}}),
			locations: limited},
	}
	labels := map[string]map[string]string{"team-a": {"tier": "prod"}, "team-b": {"tier": "dev"}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Validate(tt.s, "cairn-system", tt.locations, validation.LimitFacts{NamespaceLabels: labels[tt.s.Namespace], DefaultTTL: time.Hour})
			if len(got) != len(tt.want) {
				t.Fatalf("Validate = %q, want %d messages like %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("message %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestValidateCapsMessages(t *testing.T) {
	var excluded []string
	for range 50 {
		excluded = append(excluded, "Not A Resource")
	}
	s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "s"},
		Spec: cairnv1.ScheduleSpec{Schedule: "nonsense", Template: cairnv1.BackupSpec{ExcludedResources: excluded}}}
	got := Validate(s, "cairn-system", nil, validation.LimitFacts{})
	if len(got) != cairnv1.MaxValidationErrors || !strings.HasPrefix(got[len(got)-1], "and ") {
		t.Errorf("Validate gave %d messages, last %q; want %d, the last counting the rest", len(got), got[len(got)-1], cairnv1.MaxValidationErrors)
	}
}

// A schedule's backups act for the schedule's requester: its requester annotations, and no
// other annotation of the schedule's, go on each backup.
func TestNewBackupCarriesTheRequester(t *testing.T) {
	s := &cairnv1.Schedule{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "nightly", Annotations: map[string]string{
			"cairn.dev/requester":        "system:serviceaccount:team-a:dev",
			"cairn.dev/requester-groups": `["system:serviceaccounts","system:authenticated"]`,
			"note":                       "not copied",
		}},
		Spec: cairnv1.ScheduleSpec{Schedule: "@daily"},
	}
	b := NewBackup(s, utc("2026-01-15T00:00:00Z"))
	want := map[string]string{
		"cairn.dev/requester":        "system:serviceaccount:team-a:dev",
		"cairn.dev/requester-groups": `["system:serviceaccounts","system:authenticated"]`,
	}
	if !maps.Equal(b.Annotations, want) {
		t.Errorf("annotations %v, want %v", b.Annotations, want)
	}
	if b := NewBackup(&cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, utc("2026-01-15T00:00:00Z")); b.Annotations != nil {
		t.Errorf("annotations %v of a schedule without a requester, want none", b.Annotations)
	}
}

func TestZone(t *testing.T) {
	tests := []struct {
		expr, want, wantErr string
	}{
		{expr: "0 3 * * *", want: "UTC"},
		{expr: "@every 1h", want: "UTC"},
		{expr: "CRON_TZ=Europe/Paris 0 3 * * *", want: "Europe/Paris"},
		{expr: "  TZ=Asia/Tokyo @daily", want: "Asia/Tokyo"},
		{expr: "CRON_TZ=Mars/Olympus 0 3 * * *", wantErr: `time zone "Mars/Olympus"`},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			zone, err := Zone(tt.expr)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Zone(%q) = %v, %v; want an error with %q", tt.expr, zone, err, tt.wantErr)
				}
				return
			}
			if err != nil || zone.String() != tt.want {
				t.Fatalf("Zone(%q) = %v, %v; want %s", tt.expr, zone, err, tt.want)
			}
		})
	}
}

func TestNewBackupOfARetentionScheduleNeverExpires(t *testing.T) {
	s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Spec: cairnv1.ScheduleSpec{Schedule: "@hourly"}}
	if b := NewBackup(s, utc("2026-01-15T00:00:00Z")); b.Spec.TTL != nil {
		t.Errorf("without retention, ttl = %v, want unset (the manager's default)", b.Spec.TTL)
	}
	s.Spec.Retention = &cairnv1.RetentionPolicy{Daily: 7}
	b := NewBackup(s, utc("2026-01-15T00:00:00Z"))
	if b.Spec.TTL == nil || b.Spec.TTL.Duration != 0 {
		t.Errorf("with retention, ttl = %v, want 0s (never expires)", b.Spec.TTL)
	}
}

func TestExpectedInterval(t *testing.T) {
	tests := []struct {
		expr string
		now  string
		want time.Duration
	}{
		{"0 3 * * *", "2026-01-15T12:00:00Z", 24 * time.Hour},
		{"*/15 * * * *", "2026-01-15T12:00:00Z", 15 * time.Minute},
		{"@every 6h", "2026-01-15T12:00:00Z", 6 * time.Hour},
		{"@hourly", "2026-01-15T12:00:00Z", time.Hour},
		// Weekdays: Friday to Monday is the longest gap, whatever day it is now.
		{"0 3 * * 1-5", "2026-01-13T12:00:00Z", 72 * time.Hour},
		{"0 3 * * 1-5", "2026-01-17T12:00:00Z", 72 * time.Hour},
		{"0 3 * * 0", "2026-01-15T12:00:00Z", 7 * 24 * time.Hour},
		// From 1 February: February has 28 days in 2026.
		{"0 3 1 * *", "2026-01-15T12:00:00Z", 28 * 24 * time.Hour},
		// Paris, the week the clocks go forward: a day of 23 hours is the shorter, 24h stays.
		{"CRON_TZ=Europe/Paris 0 3 * * *", "2026-03-27T12:00:00Z", 24 * time.Hour},
		// The week they go back: a day of 25 hours.
		{"CRON_TZ=Europe/Paris 0 3 * * *", "2026-10-22T12:00:00Z", 25 * time.Hour},
		{"0 0 30 2 *", "2026-01-15T12:00:00Z", 0}, // 30 February never comes
	}
	for _, tt := range tests {
		t.Run(tt.expr+" at "+tt.now, func(t *testing.T) {
			if got := ExpectedInterval(mustParse(t, tt.expr), utc(tt.now)); got != tt.want {
				t.Errorf("ExpectedInterval = %v, want %v", got, tt.want)
			}
		})
	}
}

// A schedule acts as whom its requester annotations name, since the reconciler first saw them:
// a new requester (another username, or the same name with another UID, a ServiceAccount made
// again) starts a new since and moves the one it replaces to the former requesters; the same one
// keeps both.
func TestActingAs(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC))
	now := time.Date(2026, 2, 1, 3, 0, 0, 0, time.UTC)
	lead := cairnv1.ScheduleRequester{Username: "system:serviceaccount:team-a:lead", UID: "u1", Since: earlier}
	junior := cairnv1.ScheduleRequester{Username: "system:serviceaccount:team-a:junior", UID: "u2", Since: earlier}
	annotated := func(username, uid string) map[string]string {
		return map[string]string{cairnv1.RequesterAnnotation: username, cairnv1.RequesterUIDAnnotation: uid, "other": "x"}
	}
	seen := func(r cairnv1.ScheduleRequester) *cairnv1.ScheduleRequester {
		r.Since = metav1.NewTime(now)
		return &r
	}
	many := make([]cairnv1.ScheduleRequester, MaxFormerRequesters)
	for i := range many {
		many[i] = cairnv1.ScheduleRequester{Username: fmt.Sprintf("user-%d", i), Since: earlier}
	}
	tests := []struct {
		name        string
		status      cairnv1.ScheduleStatus
		annotations map[string]string
		want        *cairnv1.ScheduleRequester
		wantFormer  []cairnv1.ScheduleRequester
	}{
		{name: "first seen", annotations: annotated(lead.Username, "u1"), want: seen(lead)},
		{name: "the same requester keeps its since", status: cairnv1.ScheduleStatus{ActingAs: &lead, FormerRequesters: []cairnv1.ScheduleRequester{junior}},
			annotations: annotated(lead.Username, "u1"), want: &lead, wantFormer: []cairnv1.ScheduleRequester{junior}},
		{name: "another editor redefined it", status: cairnv1.ScheduleStatus{ActingAs: &lead},
			annotations: annotated(junior.Username, "u2"), want: seen(junior), wantFormer: []cairnv1.ScheduleRequester{lead}},
		{name: "back to a former one, who leaves the former list", status: cairnv1.ScheduleStatus{ActingAs: &junior, FormerRequesters: []cairnv1.ScheduleRequester{lead}},
			annotations: annotated(lead.Username, "u1"), want: seen(lead), wantFormer: []cairnv1.ScheduleRequester{junior}},
		{name: "the same name, made again", status: cairnv1.ScheduleStatus{ActingAs: &lead},
			annotations: annotated(lead.Username, "u3"), want: &cairnv1.ScheduleRequester{Username: lead.Username, UID: "u3", Since: metav1.NewTime(now)},
			wantFormer: []cairnv1.ScheduleRequester{lead}},
		{name: "at most MaxFormerRequesters, the oldest dropped", status: cairnv1.ScheduleStatus{ActingAs: &lead, FormerRequesters: many},
			annotations: annotated(junior.Username, "u2"), want: seen(junior), wantFormer: append([]cairnv1.ScheduleRequester{lead}, many[:MaxFormerRequesters-1]...)},
		{name: "no requester recorded", status: cairnv1.ScheduleStatus{ActingAs: &lead}, annotations: map[string]string{"other": "x"}},
		{name: "an empty requester", annotations: annotated("", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Annotations: tt.annotations}}
			got, former := ActingAs(tt.status, s, now)
			if (got == nil) != (tt.want == nil) || got != nil && (*got != *tt.want) {
				t.Errorf("ActingAs = %+v, want %+v", got, tt.want)
			}
			if !slices.Equal(former, tt.wantFormer) {
				t.Errorf("former requesters = %+v, want %+v", former, tt.wantFormer)
			}
		})
	}
}
