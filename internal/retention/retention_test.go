package retention

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"

	_ "time/tzdata"
)

const (
	completed = cairnv1.BackupPhaseCompleted
	partial   = cairnv1.BackupPhasePartiallyFailed
	failed    = cairnv1.BackupPhaseFailed
	invalid   = cairnv1.BackupPhaseFailedValidation
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// at is a backup named by its UTC start time (RFC 3339), in phase.
func at(s string, phase cairnv1.BackupPhase) Backup {
	return Backup{Name: s, Phase: phase, Time: utc(s)}
}

// every is a Completed backup every step from first to last, both included.
func every(first, last string, step time.Duration) []Backup {
	var bs []Backup
	for t := utc(first); !t.After(utc(last)); t = t.Add(step) {
		bs = append(bs, at(t.UTC().Format(time.RFC3339), completed))
	}
	return bs
}

// kept is the verdicts' backups that some rule keeps, by name, with their rules joined by
// commas.
func kept(vs []Verdict) map[string]string {
	m := map[string]string{}
	for _, v := range vs {
		if !v.Deleted() {
			var rules []string
			for _, r := range v.Keep {
				rules = append(rules, string(r))
			}
			m[v.Name] = strings.Join(rules, ",")
		}
	}
	return m
}

func diff(t *testing.T, got, want map[string]string) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[name]; !ok {
			t.Errorf("%s: deleted, want kept by %s", name, want[name])
		} else if g != want[name] {
			t.Errorf("%s: kept by %s, want %s", name, g, want[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: kept by %s, want deleted", name, got[name])
		}
	}
}

// TestAYearOfHourlyBackups: 8760 hourly backups from 2025-03-10T05:00Z to 2026-03-10T04:00Z
// (a Tuesday of ISO week 2026-W11), in UTC, with the policy. The expectation is
// written out by hand from the calendar, not computed.
func TestAYearOfHourlyBackups(t *testing.T) {
	backups := every("2025-03-10T05:00:00Z", "2026-03-10T04:00:00Z", time.Hour)
	if len(backups) != 8760 {
		t.Fatalf("%d backups, want 8760", len(backups))
	}
	policy := Policy{KeepLast: 3, Hourly: 24, Daily: 7, Weekly: 4, Monthly: 12, Yearly: 2}
	want := map[string]string{}
	// hourly: the last 24 hours, 2026-03-09T05:00 to 2026-03-10T04:00.
	for h := 5; h <= 23; h++ {
		want[utc("2026-03-09T00:00:00Z").Add(time.Duration(h)*time.Hour).Format(time.RFC3339)] = "hourly"
	}
	for h := 0; h <= 4; h++ {
		want[utc("2026-03-10T00:00:00Z").Add(time.Duration(h)*time.Hour).Format(time.RFC3339)] = "hourly"
	}
	// keepLast: the last three.
	want["2026-03-10T02:00:00Z"] = "keepLast,hourly"
	want["2026-03-10T03:00:00Z"] = "keepLast,hourly"
	// The newest is every period rule's, and the newest Completed.
	want["2026-03-10T04:00:00Z"] = "keepLast,hourly,daily,weekly,monthly,yearly,newestCompleted"
	// daily: the last hour of the six days before.
	want["2026-03-09T23:00:00Z"] = "hourly,daily"
	for _, d := range []string{"2026-03-04", "2026-03-05", "2026-03-06", "2026-03-07"} {
		want[d+"T23:00:00Z"] = "daily"
	}
	// weekly: Sunday's last hour of the three ISO weeks before W11 (W10 ends on 8 March).
	want["2026-03-08T23:00:00Z"] = "daily,weekly"
	want["2026-03-01T23:00:00Z"] = "weekly"
	want["2026-02-22T23:00:00Z"] = "weekly"
	// monthly: the last hour of the eleven months before March 2026 (March 2025 is the 13th).
	for _, d := range []string{"2026-02-28", "2026-01-31", "2025-11-30", "2025-10-31", "2025-09-30",
		"2025-08-31", "2025-07-31", "2025-06-30", "2025-05-31", "2025-04-30"} {
		want[d+"T23:00:00Z"] = "monthly"
	}
	// yearly: 2025's last hour.
	want["2025-12-31T23:00:00Z"] = "monthly,yearly"

	vs := Decide(backups, policy, time.UTC)
	diff(t, kept(vs), want)
	if len(want) != 42 {
		t.Errorf("the expectation has %d backups, want 42", len(want))
	}
	counts, total, deleted := Counts(vs)
	wantCounts := cairnv1.RetentionCounts{KeepLast: 3, Hourly: 24, Daily: 7, Weekly: 4, Monthly: 12, Yearly: 2, NewestCompleted: 1}
	if counts != wantCounts || total != 42 || deleted != 8760-42 {
		t.Errorf("Counts = %+v, %d kept, %d deleted; want %+v, 42, %d", counts, total, deleted, wantCounts, 8760-42)
	}
}

func TestDecide(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		backups []Backup
		policy  Policy
		zone    *time.Location
		want    map[string]string
	}{{
		// 2026-10-25 03:00 CEST → 02:00 CET (01:00Z): the local hour 02:00 happens twice, as
		// two hours. Every 30 minutes from 01:00+02 to 03:30+01.
		name:    "Paris, clocks go back: the repeated hour is two hours",
		backups: every("2026-10-24T23:00:00Z", "2026-10-25T02:30:00Z", 30*time.Minute),
		policy:  Policy{Hourly: 4},
		zone:    paris,
		want: map[string]string{
			"2026-10-25T02:30:00Z": "hourly,newestCompleted", // 03:30+01
			"2026-10-25T01:30:00Z": "hourly",                 // 02:30+01
			"2026-10-25T00:30:00Z": "hourly",                 // 02:30+02
			"2026-10-24T23:30:00Z": "hourly",                 // 01:30+02
		},
	}, {
		// Daily at 22:30Z: 00:30 the next day in summer (+02), 23:30 the same day in winter
		// (+01). So local 25 October holds two backups (24th 22:30Z and 25th 22:30Z).
		name:    "Paris, clocks go back: a local day with two daily backups keeps the later",
		backups: every("2026-10-22T22:30:00Z", "2026-10-26T22:30:00Z", 24*time.Hour),
		policy:  Policy{Daily: 3},
		zone:    paris,
		want: map[string]string{
			"2026-10-26T22:30:00Z": "daily,newestCompleted", // 26 Oct 23:30+01
			"2026-10-25T22:30:00Z": "daily",                 // 25 Oct 23:30+01
			"2026-10-23T22:30:00Z": "daily",                 // 24 Oct 00:30+02
		},
	}, {
		name:    "the same backups in UTC keep the last three days",
		backups: every("2026-10-22T22:30:00Z", "2026-10-26T22:30:00Z", 24*time.Hour),
		policy:  Policy{Daily: 3},
		want: map[string]string{
			"2026-10-26T22:30:00Z": "daily,newestCompleted",
			"2026-10-25T22:30:00Z": "daily",
			"2026-10-24T22:30:00Z": "daily",
		},
	}, {
		// 2026-03-29 02:00 CET → 03:00 CEST (01:00Z): local 29 March starts at 28 March 23:00Z.
		name:    "Paris, clocks go forward: days are local days",
		backups: every("2026-03-28T20:00:00Z", "2026-03-29T03:00:00Z", time.Hour),
		policy:  Policy{Daily: 2},
		zone:    paris,
		want: map[string]string{
			"2026-03-29T03:00:00Z": "daily,newestCompleted", // 29 Mar 05:00+02
			"2026-03-28T22:00:00Z": "daily",                 // 28 Mar 23:00+01
		},
	}, {
		name:    "Paris, clocks go forward: the skipped hour is no period, the hours around it are",
		backups: every("2026-03-28T23:00:00Z", "2026-03-29T02:00:00Z", time.Hour),
		policy:  Policy{Hourly: 3},
		zone:    paris,
		want: map[string]string{
			"2026-03-29T02:00:00Z": "hourly,newestCompleted", // 04:00+02
			"2026-03-29T01:00:00Z": "hourly",                 // 03:00+02
			"2026-03-29T00:00:00Z": "hourly",                 // 01:00+01
		},
	}, {
		// Sunday 2026-03-08 23:30Z is Monday 00:30 in Paris: ISO week 11 there, 10 in UTC.
		name:    "weeks start on Monday in the zone",
		backups: []Backup{at("2026-03-07T12:00:00Z", completed), at("2026-03-08T23:30:00Z", completed), at("2026-03-10T12:00:00Z", completed)},
		policy:  Policy{Weekly: 2},
		zone:    paris,
		want: map[string]string{
			"2026-03-10T12:00:00Z": "weekly,newestCompleted",
			"2026-03-07T12:00:00Z": "weekly",
		},
	}, {
		name:    "weeks start on Monday in UTC",
		backups: []Backup{at("2026-03-07T12:00:00Z", completed), at("2026-03-08T23:30:00Z", completed), at("2026-03-10T12:00:00Z", completed)},
		policy:  Policy{Weekly: 2},
		want: map[string]string{
			"2026-03-10T12:00:00Z": "weekly,newestCompleted",
			"2026-03-08T23:30:00Z": "weekly",
		},
	}, {
		name: "gaps use up no count: the last three days that have a backup",
		backups: []Backup{at("2026-01-01T03:00:00Z", completed), at("2026-01-02T03:00:00Z", completed),
			at("2026-01-03T03:00:00Z", completed), at("2026-01-20T03:00:00Z", completed), at("2026-02-11T03:00:00Z", completed)},
		policy: Policy{Daily: 3},
		want: map[string]string{
			"2026-02-11T03:00:00Z": "daily,newestCompleted",
			"2026-01-20T03:00:00Z": "daily",
			"2026-01-03T03:00:00Z": "daily",
		},
	}, {
		name: "a failed backup goes once a newer one is restorable; the newest failed one stays",
		backups: []Backup{at("2026-01-01T03:00:00Z", failed), at("2026-01-02T03:00:00Z", completed),
			at("2026-01-03T03:00:00Z", invalid), at("2026-01-04T03:00:00Z", partial),
			at("2026-01-05T03:00:00Z", failed), at("2026-01-06T03:00:00Z", invalid)},
		policy: Policy{KeepLast: 1},
		want: map[string]string{
			"2026-01-06T03:00:00Z": "failedUntilSuccess",
			"2026-01-05T03:00:00Z": "failedUntilSuccess",
			"2026-01-04T03:00:00Z": "keepLast",
			"2026-01-02T03:00:00Z": "newestCompleted",
		},
	}, {
		name: "the newest Completed backup is never deleted, even when the policy keeps newer ones",
		backups: []Backup{at("2026-01-01T03:00:00Z", completed), at("2026-01-01T04:00:00Z", completed),
			at("2026-01-01T05:00:00Z", partial), at("2026-01-01T06:00:00Z", partial)},
		policy: Policy{KeepLast: 2},
		want: map[string]string{
			"2026-01-01T06:00:00Z": "keepLast",
			"2026-01-01T05:00:00Z": "keepLast",
			"2026-01-01T04:00:00Z": "newestCompleted",
		},
	}, {
		name: "a period keeps its newest Completed backup over a newer PartiallyFailed one, and a PartiallyFailed one when it has nothing better",
		backups: []Backup{at("2026-01-01T03:00:00Z", completed), at("2026-01-01T04:00:00Z", completed),
			at("2026-01-01T05:00:00Z", partial), at("2026-01-02T03:00:00Z", partial), at("2026-01-03T03:00:00Z", completed)},
		policy: Policy{Daily: 3},
		want: map[string]string{
			"2026-01-03T03:00:00Z": "daily,newestCompleted",
			"2026-01-02T03:00:00Z": "daily",
			"2026-01-01T04:00:00Z": "daily",
		},
	}, {
		name: "backups that have not ended are kept and take no count",
		backups: []Backup{at("2026-01-01T03:00:00Z", completed), at("2026-01-02T03:00:00Z", completed),
			at("2026-01-03T03:00:00Z", cairnv1.BackupPhaseInProgress), at("2026-01-03T04:00:00Z", cairnv1.BackupPhaseNew)},
		policy: Policy{KeepLast: 1},
		want: map[string]string{
			"2026-01-03T04:00:00Z": "notEnded",
			"2026-01-03T03:00:00Z": "notEnded",
			"2026-01-02T03:00:00Z": "keepLast,newestCompleted",
		},
	}, {
		name:    "a schedule with only failed backups keeps them all",
		backups: []Backup{at("2026-01-01T03:00:00Z", failed), at("2026-01-02T03:00:00Z", invalid)},
		policy:  Policy{Daily: 1},
		want: map[string]string{
			"2026-01-02T03:00:00Z": "failedUntilSuccess",
			"2026-01-01T03:00:00Z": "failedUntilSuccess",
		},
	}, {
		name:    "monthly and yearly count calendar months and years in the zone",
		backups: []Backup{at("2025-12-31T22:30:00Z", completed), at("2025-12-31T23:30:00Z", completed), at("2026-01-15T12:00:00Z", completed)},
		policy:  Policy{Yearly: 2},
		zone:    paris,
		want: map[string]string{
			"2026-01-15T12:00:00Z": "yearly,newestCompleted",
			"2025-12-31T22:30:00Z": "yearly", // 23:30 on 31 December in Paris; the next is 2026 there
		},
	}, {
		name:    "no backups",
		backups: nil,
		policy:  Policy{KeepLast: 3},
		want:    map[string]string{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			diff(t, kept(Decide(tt.backups, tt.policy, tt.zone)), tt.want)
		})
	}
}

func TestDecideOrdersNewestFirst(t *testing.T) {
	vs := Decide([]Backup{at("2026-01-01T03:00:00Z", completed), at("2026-01-03T03:00:00Z", failed), at("2026-01-02T03:00:00Z", completed)}, Policy{KeepLast: 1}, nil)
	var names []string
	for _, v := range vs {
		names = append(names, v.Name)
	}
	if want := []string{"2026-01-03T03:00:00Z", "2026-01-02T03:00:00Z", "2026-01-01T03:00:00Z"}; !slices.Equal(names, want) {
		t.Errorf("order %v, want %v", names, want)
	}
}

// BenchmarkDecideAYearOfHourlyBackups: one retention pass over a schedule's year of hourly
// backups in Europe/Paris, the policy (docs/schedules.md quotes the result).
func BenchmarkDecideAYearOfHourlyBackups(b *testing.B) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		b.Fatal(err)
	}
	backups := every("2025-03-10T05:00:00Z", "2026-03-10T04:00:00Z", time.Hour)
	policy := Policy{KeepLast: 3, Hourly: 24, Daily: 7, Weekly: 4, Monthly: 12, Yearly: 2}
	b.ReportAllocs()
	for b.Loop() {
		Decide(backups, policy, paris)
	}
}
