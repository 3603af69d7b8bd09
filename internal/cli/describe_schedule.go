package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/retention"
	"github.com/cairn-backup/cairn/internal/schedule"
)

// describeSchedule writes a schedule: when it runs, its last and next runs, its template.
func (e *env) describeSchedule(s *cairnv1.Schedule) error {
	tw := printers.GetNewTabWriter(e.streams.Out)
	d := describer{w: tw, now: e.clock.Now()}
	d.line(0, "Name", "%s", s.Name)
	d.line(0, "Namespace", "%s", s.Namespace)
	d.line(0, "Labels", "%s", labelsString(s.Labels))
	phase := string(s.EffectivePhase())
	if len(s.Status.ValidationErrors) > 0 {
		phase += ": " + strings.Join(s.Status.ValidationErrors, "; ")
	}
	d.line(0, "Phase", "%s", phase)
	d.line(0, "Acts as", "%s", e.actingAs(d, s))
	d.line(0, "Schedule", "%s", s.Spec.Schedule)
	d.line(0, "Paused", "%t", s.Spec.Paused)
	d.line(0, "Last backup", "%s", d.when(s.Status.LastBackup))
	if s.Status.LastSkipped != nil {
		d.line(0, "Last skipped", "%s", d.when(s.Status.LastSkipped))
	}
	next := d.when(s.Status.NextBackup)
	if s.Spec.Paused {
		next = "<paused>"
	}
	d.line(0, "Next backup", "%s", next)
	d.line(0, "Owns its backups", "%t", s.Spec.UseOwnerReferencesInBackup)
	d.section("Backup template")
	var backupLabels map[string]string
	if m := s.Spec.Template.Metadata; m != nil {
		backupLabels = m.Labels
	}
	d.line(1, "Labels", "%s", labelsString(backupLabels))
	d.backupSpec(1, s.Spec.Template)
	if err := e.describeRetention(d, s); err != nil {
		return err
	}
	d.conditions(s.Status.Conditions)
	return tw.Flush()
}

// describeRetention writes a schedule's retention policy and, as a dry run, what it does with
// each of the schedule's backups: the rules keeping it, or "will be deleted". The answer is
// retention.ForSchedule's, the function the schedule reconciler deletes by.
func (e *env) describeRetention(d describer, s *cairnv1.Schedule) error {
	p := s.Spec.Retention
	if p == nil {
		d.line(0, "Retention", "<none> (each backup expires by its ttl)")
		return nil
	}
	zone, err := schedule.Zone(s.Spec.Schedule)
	if err != nil {
		d.line(0, "Retention", "%s: %v", retentionPolicyString(p), err)
		return nil
	}
	d.line(0, "Retention", "%s (periods in %s; backups never expire by ttl)", retentionPolicyString(p), zone)
	if st := s.Status.Retention; st != nil {
		d.line(1, "Kept", "%d (%s)", st.Total, retentionCountsString(st.Kept))
		if st.LastApplied != nil {
			d.line(1, "Last deleted", "%d at %s", st.Deleted, d.when(st.LastApplied))
		}
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	var backups cairnv1.BackupList
	if err := c.List(context.Background(), &backups, client.InNamespace(s.Namespace), client.MatchingLabels{cairnv1.ScheduleNameLabel: s.Name}); err != nil {
		d.line(1, "Backups", "cannot be listed: %v", err)
		return nil
	}
	verdicts, err := retention.ForSchedule(s, backups.Items)
	if err != nil {
		return err
	}
	if len(verdicts) == 0 {
		d.line(1, "Backups", "<none>")
		return nil
	}
	d.section("  Backups (newest first)")
	for _, v := range verdicts {
		keep := "will be deleted"
		if !v.Deleted() {
			var rules []string
			for _, r := range v.Keep {
				rules = append(rules, string(r))
			}
			keep = "kept by " + strings.Join(rules, ", ")
		}
		d.line(2, v.Name, "%s\t%s\t%s", v.Phase, v.Time.UTC().Format(time.RFC3339), keep)
	}
	return nil
}

// retentionPolicyString is a policy's non-zero counts, in the rules' order.
func retentionPolicyString(p *cairnv1.RetentionPolicy) string {
	return countsString([]string{"keepLast", "hourly", "daily", "weekly", "monthly", "yearly"},
		[]int32{p.KeepLast, p.Hourly, p.Daily, p.Weekly, p.Monthly, p.Yearly}, " ")
}

// retentionCountsString is status.retention.kept's non-zero counts.
func retentionCountsString(k cairnv1.RetentionCounts) string {
	return countsString([]string{"keepLast", "hourly", "daily", "weekly", "monthly", "yearly", "newestCompleted", "notEnded", "failedUntilSuccess"},
		[]int32{k.KeepLast, k.Hourly, k.Daily, k.Weekly, k.Monthly, k.Yearly, k.NewestCompleted, k.NotEnded, k.FailedUntilSuccess}, "=")
}

func countsString(names []string, counts []int32, sep string) string {
	var parts []string
	for i, n := range counts {
		if n != 0 {
			parts = append(parts, fmt.Sprintf("%s%s%d", names[i], sep, n))
		}
	}
	return orNone(parts)
}

// actingAs says whom a schedule's backups act for (DESIGN.md sections 15 and 21): its
// requester, whom the admission policies re-record on every change of its spec but a pause,
// and since when the operator has seen them (status.actingAs). In the operator's namespace the
// operator acts with its own rights, unless it was started with the requester rule for every
// namespace, which the CLI cannot see: it says both.
func (e *env) actingAs(d describer, s *cairnv1.Schedule) string {
	username := s.Annotations[cairnv1.RequesterAnnotation]
	if username == "" {
		return "<no requester recorded: its backups fail validation outside " + e.operatorNamespace + "; change its spec, or create it again, with Cairn's admission policies installed (docs/security.md)>"
	}
	since := "not yet seen by the operator"
	if a := s.Status.ActingAs; a != nil && a.Username == username && a.UID == s.Annotations[cairnv1.RequesterUIDAnnotation] {
		since = d.when(&a.Since)
	}
	who := fmt.Sprintf("%s, since %s", username, since)
	if s.Namespace == e.operatorNamespace {
		who += " (in " + e.operatorNamespace + " the operator uses its own rights, unless it acts as requesters in every namespace)"
	}
	return who
}
