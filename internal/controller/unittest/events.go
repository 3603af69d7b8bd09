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
