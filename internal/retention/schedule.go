package retention

import (
	"strings"
	"time"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/schedule"
)

// Of is the backups of schedule s that its retention judges, among backups (those of the
// schedule's namespace with its cairn.dev/schedule-name label). Only what the schedule made is
// judged: a backup named as a run of the schedule names it (<schedule>-<yyyyMMddHHmmss>), with
// a requester the schedule acted as (madeFor), not synced from storage (another cluster's, or one whose object
// was removed with keep-data), and not being deleted already. So a member of the namespace who
// may create backups but not delete them cannot make the schedule delete its own backups by
// labelling newer ones as the schedule's: the admission policy writes their requester, not the
// schedule's.
func Of(s *cairnv1.Schedule, backups []cairnv1.Backup) []Backup {
	var out []Backup
	for i := range backups {
		b := &backups[i]
		if !madeBy(s, b) || b.DeletionTimestamp != nil ||
			b.Status.Phase == cairnv1.BackupPhaseDeleting || b.Status.Phase == cairnv1.BackupPhaseDeletionFailed {
			continue
		}
		t := b.CreationTimestamp.Time
		if b.Status.StartTimestamp != nil {
			t = b.Status.StartTimestamp.Time
		}
		out = append(out, Backup{Name: b.Name, Phase: b.EffectivePhase(), Time: t})
	}
	return out
}

// madeBy reports whether backup b was made by a run of schedule s.
func madeBy(s *cairnv1.Schedule, b *cairnv1.Backup) bool {
	if b.Namespace != s.Namespace || b.Labels[cairnv1.ScheduleNameLabel] != s.Name {
		return false
	}
	if _, synced := b.Annotations[cairnv1.SyncedFromAnnotation]; synced {
		return false
	}
	stamp, ok := strings.CutPrefix(b.Name, s.Name+"-")
	if !ok {
		return false
	}
	tick, err := time.Parse(schedule.NameTimeLayout, stamp)
	if err != nil || schedule.BackupName(s.Name, tick) != b.Name {
		return false
	}
	return madeFor(s, b)
}

// madeFor reports whether backup b carries a requester schedule s acted as, by username and
// UID: its current one (the schedule copies its requester annotations onto each backup; a
// backup made before the same requester changed the spec again, with another token, has other
// groups or extra), or one of its former requesters (status.formerRequesters), whom it acted as
// until someone changed its spec. A backup created by anyone else records its creator, whom the
// schedule never acted as.
func madeFor(s *cairnv1.Schedule, b *cairnv1.Backup) bool {
	username, ok := b.Annotations[cairnv1.RequesterAnnotation]
	uid := b.Annotations[cairnv1.RequesterUIDAnnotation]
	if !ok {
		_, scheduleHas := s.Annotations[cairnv1.RequesterAnnotation]
		return !scheduleHas // a schedule from before the policies, and its backups
	}
	if s.Annotations[cairnv1.RequesterAnnotation] == username && s.Annotations[cairnv1.RequesterUIDAnnotation] == uid {
		return true
	}
	for _, r := range s.Status.FormerRequesters {
		if r.Username == username && r.UID == uid {
			return true
		}
	}
	return false
}

// ForSchedule decides for every backup of s that its retention judges (Of), in the schedule's
// zone. It returns nothing for a schedule without retention, and an error only for a time
// zone the binary does not know (the schedule then fails validation too).
func ForSchedule(s *cairnv1.Schedule, backups []cairnv1.Backup) ([]Verdict, error) {
	if s.Spec.Retention == nil {
		return nil, nil
	}
	zone, err := schedule.Zone(s.Spec.Schedule)
	if err != nil {
		return nil, err
	}
	return Decide(Of(s, backups), *s.Spec.Retention, zone), nil
}
