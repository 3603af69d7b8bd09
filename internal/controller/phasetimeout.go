package controller

import (
	"time"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// DefaultPhaseTimeout is how long a backup may stay in one non-terminal phase that cannot move
// on (storage down, the API server refusing a write) before its owner gives up and ends it with
// the last error (DESIGN.md section 7: no backup stays non-terminal forever).
const DefaultPhaseTimeout = time.Hour

// phaseTimedOut reports whether a backup has been in its current phase for longer than timeout
// at now. A backup with no phaseTransitionTime (written before the field existed) is measured
// from its creation. A timeout of 0 or less never times out.
func phaseTimedOut(b *cairnv1.Backup, now time.Time, timeout time.Duration) bool {
	if timeout <= 0 {
		return false
	}
	since := b.CreationTimestamp.Time
	if b.Status.PhaseTransitionTime != nil {
		since = b.Status.PhaseTransitionTime.Time
	}
	return now.Sub(since) > timeout
}
