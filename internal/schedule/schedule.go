// Package schedule decides when a Schedule runs and what a run creates (DESIGN.md section 10).
// Everything here is a pure function of its arguments, the current time included: the schedule
// reconciler fetches, calls these, and writes.
package schedule

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/cairn-backup/cairn/internal/validation"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// Parse reads a cron expression: five fields ("0 3 * * *"), or a descriptor ("@daily",
// "@every 6h"), optionally prefixed with a time zone ("CRON_TZ=Europe/Paris 0 3 * * *"; "TZ="
// is read the same). Without a prefix, times are UTC. Time zones come from the binary's own
// copy of the zone database (time/tzdata, imported by the manager), so a scratch image
// understands them too.
func Parse(expr string) (cron.Schedule, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, fmt.Errorf("empty cron expression")
	}
	if !strings.HasPrefix(expr, "CRON_TZ=") && !strings.HasPrefix(expr, "TZ=") {
		// The standard parser reads times in time.Local when no zone is given; Cairn's
		// default is UTC whatever the machine's zone.
		expr = "CRON_TZ=UTC " + expr
	}
	s, err := cron.ParseStandard(expr)
	if err != nil {
		return nil, err
	}
	if spec, ok := s.(*cron.SpecSchedule); ok && !everyHour(spec) {
		return onceInOverlap{spec}, nil
	}
	return s, nil
}

// Zone is the time zone of a cron expression: its CRON_TZ= (or TZ=) prefix, else UTC. It is
// the zone the schedule's retention counts hours, days, weeks, months and years in.
func Zone(expr string) (*time.Location, error) {
	expr = strings.TrimSpace(expr)
	for _, prefix := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(expr, prefix); ok {
			name, _, _ := strings.Cut(rest, " ")
			zone, err := time.LoadLocation(name)
			if err != nil {
				return nil, fmt.Errorf("time zone %q: %w", name, err)
			}
			return zone, nil
		}
	}
	return time.UTC, nil
}

// onceInOverlap is a schedule at fixed hours whose repeated times of day, when the clocks go
// back (01:30 happens twice in New York on the first Sunday of November), run once: the first
// time, as cron does. The cron library would run both. Schedules that run every hour keep both
// hours, since they are an hour apart in real time.
type onceInOverlap struct{ *cron.SpecSchedule }

// Next is the next tick after t that is not the second occurrence of a time of day.
func (s onceInOverlap) Next(t time.Time) time.Time {
	next := s.SpecSchedule.Next(t)
	for range 4 { // an overlap repeats each time of day once; a few steps always leave it
		if next.IsZero() || !repeatedTimeOfDay(next.In(s.Location)) {
			break
		}
		next = s.SpecSchedule.Next(next)
	}
	return next
}

// repeatedTimeOfDay reports whether t's time of day already happened once, shortly before, in
// t's location: t lies in the repeated span after the clocks went back.
func repeatedTimeOfDay(t time.Time) bool {
	_, offset := t.Zone()
	_, before := t.Add(-3 * time.Hour).Zone()
	back := time.Duration(before-offset) * time.Second
	if back <= 0 {
		return false
	}
	const wall = "2006-01-02 15:04:05"
	return t.Add(-back).In(t.Location()).Format(wall) == t.Format(wall)
}

// everyHour reports whether a five-field schedule runs in every hour of the day.
func everyHour(s *cron.SpecSchedule) bool {
	const allHours = 1<<24 - 1
	return s.Hour&allHours == allHours
}

// latestTickLimit bounds the walk from one tick to the next in LatestTick: a five-field
// schedule ticks at most once a minute, so this is about two years of minutely ticks.
const latestTickLimit = 1 << 20

// LatestTick is the last tick of s after since and at or before now, and whether there is one.
// Ticks are walked forward from since; a fixed interval ("@every") is computed directly.
// Past latestTickLimit ticks (years of minutely downtime) it returns the tick it reached, which
// is still after since and at or before now.
func LatestTick(s cron.Schedule, since, now time.Time) (time.Time, bool) {
	first := s.Next(since)
	if first.IsZero() || first.After(now) {
		return time.Time{}, false
	}
	if every, ok := s.(cron.ConstantDelaySchedule); ok {
		// Next(t) is t truncated to the second plus the delay: the ticks are first + k*delay.
		k := now.Sub(first) / every.Delay
		return first.Add(k * every.Delay), true
	}
	tick := first
	for range latestTickLimit {
		next := s.Next(tick)
		if next.IsZero() || next.After(now) {
			break
		}
		tick = next
	}
	return tick, true
}

// intervalWindow is how far ahead ExpectedInterval looks: a week holds every pattern of a
// five-field schedule's days of the week.
const intervalWindow = 7 * 24 * time.Hour

// intervalTickLimit bounds ExpectedInterval's walk: a week of minutely ticks.
const intervalTickLimit = 7 * 24 * 60

// ExpectedInterval is the longest time between two consecutive ticks of s from now on, over a
// week (at least two ticks): the most a healthy schedule can go between two successful runs,
// give or take a backup's duration. A schedule on weekdays answers 3 days (Friday to Monday),
// a monthly one about a month. Zero when s has fewer than two ticks left.
func ExpectedInterval(s cron.Schedule, now time.Time) time.Duration {
	prev := s.Next(now)
	if prev.IsZero() {
		return 0
	}
	var longest time.Duration
	for range intervalTickLimit {
		next := s.Next(prev)
		if next.IsZero() {
			break
		}
		longest = max(longest, next.Sub(prev))
		if next.Sub(now) >= intervalWindow {
			break
		}
		prev = next
	}
	return longest
}

// Action is what a due run does.
type Action string

const (
	// Wait: no run is due; wake at Decision.Next.
	Wait Action = "Wait"
	// Create: create the backup Decision.Backup.
	Create Action = "Create"
	// Done: the backup of this run exists already (created just before a restart, say): it
	// counts as the run, and only the status is written.
	Done Action = "Done"
	// SkipRunning: the run is skipped because the schedule's previous backup (Decision.Running)
	// has not ended; schedules never pile up.
	SkipRunning Action = "SkipRunning"
	// SkipImmediately: a run missed while the schedule was paused (or before it was first
	// seen) is skipped because spec.skipImmediately asked so; the flag is then reset.
	SkipImmediately Action = "SkipImmediately"
)

// BackupState is what the decision needs of one backup of the schedule.
type BackupState struct {
	Name  string
	Phase cairnv1.BackupPhase
}

// Input is what Decide decides from.
type Input struct {
	// Schedule is the parsed cron expression.
	Schedule cron.Schedule
	// Name is the schedule's name (backup names start with it).
	Name string
	// Now is the current time.
	Now time.Time
	// Since is when ticks are counted from: the last run (status.lastBackup or lastSkipped,
	// the later) or, before any, the schedule's creation. Runs missed after it make one run.
	Since time.Time
	// Paused is spec.paused.
	Paused bool
	// SkipImmediately is spec.skipImmediately.
	SkipImmediately bool
	// Resumed is true when the schedule is new or was paused (status.phase New or Paused) and
	// is not paused now: a run due at once is the one skipImmediately skips.
	Resumed bool
	// Backups are the schedule's existing backups (by the schedule-name label).
	Backups []BackupState
}

// Decision is what the schedule does now.
type Decision struct {
	Action Action
	// Tick is the tick this run is for (zero when waiting).
	Tick time.Time
	// Backup is the name of the run's backup (Create and Done).
	Backup string
	// Running names the unfinished backup that made the run skip (SkipRunning).
	Running string
	// Next is the next tick after now: when to wake (zero when paused or the schedule has no
	// more ticks).
	Next time.Time
}

// Decide says what a schedule does at in.Now. A new schedule waits for its first tick; ticks
// missed (downtime, pause) make exactly one run, not one per tick; a paused schedule does
// nothing; a run while a backup of the schedule has not ended is skipped.
func Decide(in Input) Decision {
	if in.Paused {
		return Decision{Action: Wait}
	}
	next := in.Schedule.Next(in.Now)
	tick, due := LatestTick(in.Schedule, in.Since, in.Now)
	if !due {
		return Decision{Action: Wait, Next: in.Schedule.Next(in.Since)}
	}
	d := Decision{Tick: tick, Next: next, Backup: BackupName(in.Name, tick)}
	if in.SkipImmediately && in.Resumed {
		d.Action, d.Backup = SkipImmediately, ""
		return d
	}
	for _, b := range in.Backups {
		if b.Name == d.Backup {
			d.Action = Done
			return d
		}
	}
	for _, b := range in.Backups {
		if Unfinished(b.Phase) {
			d.Action, d.Backup, d.Running = SkipRunning, "", b.Name
			return d
		}
	}
	d.Action = Create
	return d
}

// Unfinished reports whether a backup in phase has not ended: a run of its schedule now would
// pile up behind it. Terminal backups and backups being deleted do not hold a schedule back.
func Unfinished(phase cairnv1.BackupPhase) bool {
	switch phase {
	case cairnv1.BackupPhaseDeleting, cairnv1.BackupPhaseDeletionFailed:
		return false
	}
	return !phase.IsTerminal()
}

// NameTimeLayout is the run's time in a backup's name: yyyyMMddHHmmss, UTC.
const NameTimeLayout = "20060102150405"

// BackupName is the name of the backup a schedule's run for tick creates:
// <schedule>-<yyyyMMddHHmmss> (UTC). One tick, one name: creating it twice (a restart just
// after a run) finds the first.
func BackupName(schedule string, tick time.Time) string {
	return schedule + "-" + tick.UTC().Format(NameTimeLayout)
}

// NewBackup is the backup a run of s for tick creates, in the schedule's namespace: the
// template as its spec (with ttl 0s, never expiring, when the schedule has retention), the template's labels (spec.template.metadata.labels) and the
// cairn.dev/schedule-name label (never the Schedule's own labels, which GitOps tools track),
// the schedule's requester (its cairn.dev/requester* annotations), and the schedule as its
// owner when useOwnerReferencesInBackup.
func NewBackup(s *cairnv1.Schedule, tick time.Time) *cairnv1.Backup {
	var labels map[string]string
	if m := s.Spec.Template.Metadata; m != nil {
		labels = maps.Clone(m.Labels)
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[cairnv1.ScheduleNameLabel] = s.Name
	b := &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.Namespace,
			Name:      BackupName(s.Name, tick),
			Labels:    labels,
		},
		Spec: *s.Spec.Template.DeepCopy(),
	}
	if s.Spec.Retention != nil {
		// The schedule's retention decides when its backups go, not a TTL (the CRD refuses a
		// template ttl with retention): 0s never expires.
		b.Spec.TTL = &metav1.Duration{}
	}
	// The schedule's requester is its backups' (DESIGN.md section 15): the admission policy
	// keeps these as the operator writes them.
	for _, k := range cairnv1.RequesterAnnotations {
		if v, ok := s.Annotations[k]; ok {
			if b.Annotations == nil {
				b.Annotations = map[string]string{}
			}
			b.Annotations[k] = v
		}
	}
	if s.Spec.UseOwnerReferencesInBackup {
		b.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: cairnv1.GroupVersion.String(),
			Kind:       "Schedule",
			Name:       s.Name,
			UID:        s.UID,
			Controller: ptr.To(true),
		}}
	}
	return b
}

// Validate returns what is wrong with a schedule, as messages for status.validationErrors
// (already bounded with validation.Cap): its cron expression or time zone, and its
// template, checked by validation.Backup, as the queue checks on the backup a run would create (so
// tenancy, the storage location and its limits for team backups, with facts, are checked as
// for any backup). A template with cancel set would make backups cancelled at birth, so it is
// refused too.
func Validate(s *cairnv1.Schedule, operatorNamespace string, locations []cairnv1.BackupStorageLocation, facts validation.LimitFacts) []string {
	var errs []string
	if _, err := Parse(s.Spec.Schedule); err != nil {
		errs = append(errs, fmt.Sprintf("spec.schedule: %q: %v", s.Spec.Schedule, err))
	}
	if s.Spec.Template.Cancel {
		errs = append(errs, "spec.template.cancel: a schedule's backups cannot be cancelled before they are created; pause the schedule instead")
	}
	if m := s.Spec.Template.Metadata; m != nil {
		errs = append(errs, ValidateTemplateLabels(m.Labels)...)
	}
	backupErrs, _ := validation.Backup(NewBackup(s, time.Time{}), operatorNamespace, locations, facts)
	for _, e := range backupErrs {
		// The queue's messages name the backup's fields (spec.x); here they are the template's.
		if rest, ok := strings.CutPrefix(e, "spec."); ok {
			errs = append(errs, "spec.template."+rest)
		} else {
			errs = append(errs, "spec.template: "+e)
		}
	}
	return validation.Cap(errs)
}

// ValidateTemplateLabels checks the labels a schedule puts on its backups: valid label keys
// and values (the API server would refuse the backups otherwise, at every run), and none in
// Cairn's own cairn.dev domain, whose labels say what Cairn made (the schedule-name label is
// set by the run itself). `cairn schedule create --backup-labels` checks its labels with it
// too, before they reach the API.
func ValidateTemplateLabels(labels map[string]string) []string {
	var errs []string
	for _, key := range slices.Sorted(maps.Keys(labels)) {
		path := fmt.Sprintf("spec.template.metadata.labels[%s]", key)
		for _, msg := range k8svalidation.IsQualifiedName(key) {
			errs = append(errs, fmt.Sprintf("%s: the key is not a label key: %s", path, msg))
		}
		for _, msg := range k8svalidation.IsValidLabelValue(labels[key]) {
			errs = append(errs, fmt.Sprintf("%s: %q is not a label value: %s", path, labels[key], msg))
		}
		if prefix, _, ok := strings.Cut(key, "/"); ok && (prefix == cairnv1.GroupVersion.Group || strings.HasSuffix(prefix, "."+cairnv1.GroupVersion.Group)) {
			errs = append(errs, fmt.Sprintf("%s: keys in the %s domain are Cairn's own", path, cairnv1.GroupVersion.Group))
		}
	}
	return errs
}

// MaxFormerRequesters is how many former requesters a schedule's status keeps.
const MaxFormerRequesters = 10

// ActingAs is the schedule's status.actingAs and status.formerRequesters (DESIGN.md section 21)
// once the reconciler has seen s at now: whom its cairn.dev/requester annotations name, since
// now when they name someone other than st.ActingAs does (the admission policies re-record them
// on every change of the spec but paused and skipImmediately), else st.ActingAs unchanged. The
// one it replaces goes first into the former requesters, which keep at most
// MaxFormerRequesters and never the current one. A schedule that records no requester
// (created before the policies were installed) acts as nobody: nil.
func ActingAs(st cairnv1.ScheduleStatus, s *cairnv1.Schedule, now time.Time) (current *cairnv1.ScheduleRequester, former []cairnv1.ScheduleRequester) {
	username := s.Annotations[cairnv1.RequesterAnnotation]
	if username == "" {
		return nil, st.FormerRequesters
	}
	uid := s.Annotations[cairnv1.RequesterUIDAnnotation]
	if st.ActingAs != nil && st.ActingAs.Username == username && st.ActingAs.UID == uid {
		return st.ActingAs, st.FormerRequesters
	}
	current = &cairnv1.ScheduleRequester{Username: username, UID: uid, Since: metav1.NewTime(now)}
	if st.ActingAs != nil {
		former = append(former, *st.ActingAs)
	}
	for _, r := range st.FormerRequesters {
		if r.Username != username || r.UID != uid {
			former = append(former, r)
		}
	}
	if len(former) > MaxFormerRequesters {
		former = former[:MaxFormerRequesters]
	}
	return current, former
}
