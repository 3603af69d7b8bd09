// Package retention decides which of a schedule's backups its spec.retention keeps
// (DESIGN.md section 18, docs/schedules.md "Retention"). Decide is a pure function of the
// backups, the policy and the time zone: the schedule reconciler deletes what it returns as
// deleted, and `cairn schedule describe` shows the same answer before it happens.
package retention

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// Rule is why a backup is kept.
type Rule string

// The rules, in the order they are shown.
const (
	KeepLast Rule = "keepLast"
	Hourly   Rule = "hourly"
	Daily    Rule = "daily"
	Weekly   Rule = "weekly"
	Monthly  Rule = "monthly"
	Yearly   Rule = "yearly"
	// NewestCompleted keeps the schedule's newest Completed backup whatever the policy says.
	NewestCompleted Rule = "newestCompleted"
	// NotEnded keeps a backup that has not ended: it is judged once it has.
	NotEnded Rule = "notEnded"
	// FailedUntilSuccess keeps a Failed backup (for its logs) until a newer backup of the
	// schedule is restorable (Completed or PartiallyFailed).
	FailedUntilSuccess Rule = "failedUntilSuccess"
)

// Backup is what Decide needs of one backup of the schedule.
type Backup struct {
	Name  string
	Phase cairnv1.BackupPhase
	// Time is when the backup started (status.startTimestamp), or, for one that never started,
	// when it was created.
	Time time.Time
}

// Verdict is Decide's answer for one backup: the rules keeping it, or none, and then it is to
// be deleted.
type Verdict struct {
	Backup
	Keep []Rule
}

// Deleted reports whether no rule keeps the backup.
func (v Verdict) Deleted() bool { return len(v.Keep) == 0 }

// Policy is spec.retention.
type Policy = cairnv1.RetentionPolicy

// restorable reports whether a backup in phase holds committed data a restore can use.
func restorable(p cairnv1.BackupPhase) bool {
	return p == cairnv1.BackupPhaseCompleted || p == cairnv1.BackupPhasePartiallyFailed
}

// period is one rule's calendar periods: key names the period a time (already in the
// schedule's zone) falls in.
type period struct {
	rule  Rule
	count func(Policy) int32
	key   func(time.Time) string
}

var periods = []period{
	// An hour is a real hour: the zone offset is part of its name, so the hour repeated when
	// the clocks go back is two periods, not one.
	{Hourly, func(p Policy) int32 { return p.Hourly }, func(t time.Time) string { return t.Format("2006-01-02T15 -0700") }},
	{Daily, func(p Policy) int32 { return p.Daily }, func(t time.Time) string { return t.Format(time.DateOnly) }},
	{Weekly, func(p Policy) int32 { return p.Weekly }, func(t time.Time) string {
		y, w := t.ISOWeek()
		return fmt.Sprintf("%d-W%02d", y, w)
	}},
	{Monthly, func(p Policy) int32 { return p.Monthly }, func(t time.Time) string { return t.Format("2006-01") }},
	{Yearly, func(p Policy) int32 { return p.Yearly }, func(t time.Time) string { return t.Format("2006") }},
}

// Decide says, for every backup of a schedule, which rules keep it; a verdict with none is a
// backup to delete. The verdicts come newest first (ties by name).
//
//   - A backup that has not ended (phases before terminal) is kept (NotEnded).
//   - keepLast keeps the newest N restorable (Completed or PartiallyFailed) backups.
//   - Each period rule with count N walks the periods (in zone; ISO weeks from Monday) that hold
//     a restorable backup, newest first, and keeps one backup in each of the first N: the
//     newest Completed one of the period, or, when the period has none, its newest
//     PartiallyFailed one. A period with no backup (a gap) uses up no count.
//   - The newest Completed backup is always kept (NewestCompleted).
//   - A Failed or FailedValidation backup is kept while it is newer than every restorable
//     backup (FailedUntilSuccess): the next success lets it go.
//
// Backups being deleted are not the caller's to pass: they are gone already.
func Decide(backups []Backup, policy Policy, zone *time.Location) []Verdict {
	if zone == nil {
		zone = time.UTC
	}
	vs := make([]Verdict, len(backups))
	for i, b := range backups {
		vs[i] = Verdict{Backup: b}
	}
	slices.SortStableFunc(vs, func(a, b Verdict) int {
		if c := b.Time.Compare(a.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	keep := func(i int, r Rule) { vs[i].Keep = append(vs[i].Keep, r) }

	newestRestorable := time.Time{}
	kept := int32(0)
	newestCompleted := -1
	for i := range vs {
		p := vs[i].Phase
		if !restorable(p) {
			continue
		}
		if newestRestorable.IsZero() {
			newestRestorable = vs[i].Time
		}
		if kept < policy.KeepLast {
			keep(i, KeepLast)
			kept++
		}
		if newestCompleted < 0 && p == cairnv1.BackupPhaseCompleted {
			newestCompleted = i
		}
	}
	for _, per := range periods {
		n := per.count(policy)
		if n <= 0 {
			continue
		}
		// The backups of each period, newest first: the first Completed, else the first
		// restorable, is the period's.
		chosen, order := map[string]int{}, []string(nil)
		for i := range vs {
			if !restorable(vs[i].Phase) {
				continue
			}
			k := per.key(vs[i].Time.In(zone))
			j, seen := chosen[k]
			switch {
			case !seen:
				chosen[k] = i
				order = append(order, k)
			case vs[j].Phase != cairnv1.BackupPhaseCompleted && vs[i].Phase == cairnv1.BackupPhaseCompleted:
				chosen[k] = i
			}
		}
		for _, k := range order[:min(int(n), len(order))] {
			keep(chosen[k], per.rule)
		}
	}
	for i := range vs {
		p := vs[i].Phase
		switch {
		case i == newestCompleted:
			keep(i, NewestCompleted)
		case !p.IsTerminal():
			keep(i, NotEnded)
		case !restorable(p) && vs[i].Time.After(newestRestorable):
			keep(i, FailedUntilSuccess)
		}
		slices.SortFunc(vs[i].Keep, func(a, b Rule) int { return cmp.Compare(ruleOrder(a), ruleOrder(b)) })
	}
	return vs
}

// ruleOrder is a rule's place in the shown order.
func ruleOrder(r Rule) int {
	return slices.Index([]Rule{KeepLast, Hourly, Daily, Weekly, Monthly, Yearly, NewestCompleted, NotEnded, FailedUntilSuccess}, r)
}

// Counts counts the verdicts each rule keeps, the backups kept, and those to delete.
func Counts(vs []Verdict) (kept cairnv1.RetentionCounts, total, deleted int32) {
	for _, v := range vs {
		if v.Deleted() {
			deleted++
			continue
		}
		total++
		for _, r := range v.Keep {
			switch r {
			case KeepLast:
				kept.KeepLast++
			case Hourly:
				kept.Hourly++
			case Daily:
				kept.Daily++
			case Weekly:
				kept.Weekly++
			case Monthly:
				kept.Monthly++
			case Yearly:
				kept.Yearly++
			case NewestCompleted:
				kept.NewestCompleted++
			case NotEnded:
				kept.NotEnded++
			case FailedUntilSuccess:
				kept.FailedUntilSuccess++
			}
		}
	}
	return kept, total, deleted
}
