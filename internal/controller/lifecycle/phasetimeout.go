package lifecycle

import (
	"time"
)

// DefaultPhaseTimeout is how long a backup or restore may stay in one non-terminal phase that
// cannot move on (storage down, the API server refusing a write) before its owner gives up and
// ends it with the last error (DESIGN.md section 7: no backup stays non-terminal forever).
const DefaultPhaseTimeout = time.Hour

// PhaseTimedOut reports whether obj has been in its current phase for longer than timeout at
// now: strictly longer, so that an object is given the whole timeout, and one looked at exactly
// when it ends is not failed yet (the rule of both kinds; a restore's check once gave up at the
// timeout itself). An object with no phaseTransitionTime (written before the field existed) is
// measured from its creation. A timeout of 0 or less never times out.
func (k *RunKind[O, S, P]) PhaseTimedOut(obj O, now time.Time, timeout time.Duration) bool {
	if timeout <= 0 {
		return false
	}
	since := obj.GetCreationTimestamp().Time
	if entered := *k.fields(k.status(obj)).phaseTransitionTime; entered != nil {
		since = entered.Time
	}
	return now.Sub(since) > timeout
}
