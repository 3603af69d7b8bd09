// Package unittest holds what the internal (package-level) tests of several reconciler
// packages share. It imports no reconciler package, so any of them may use it.
package unittest

import "k8s.io/client-go/tools/events"

// DrainEvents returns the events recorded so far by rec, an events.FakeRecorder.
func DrainEvents(rec events.EventRecorder) []string {
	fr := rec.(*events.FakeRecorder)
	var out []string
	for {
		select {
		case e := <-fr.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
