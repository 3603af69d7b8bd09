package controller

import (
	"k8s.io/apimachinery/pkg/types"
)

// logUploads are the cancelled runs whose log is being uploaded, by backup UID. A cancelled
// backup moves to FinalizingCancelled before its run uploads its log (a cancel never waits on
// storage); the finalizer, which appends the cancel to that log, waits until the upload is
// over so that neither write loses the other's lines. It lives in memory: after a restart no
// run is uploading anything. Safe for concurrent use.
type logUploads struct {
	m uidMap[struct{}]
}

func (l *logUploads) hold(uid types.UID)          { l.m.set(uid, struct{}{}) }
func (l *logUploads) release(uid types.UID)       { l.m.forget(uid) }
func (l *logUploads) inFlight(uid types.UID) bool { _, ok := l.m.get(uid); return ok }
