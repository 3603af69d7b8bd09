package lifecycle

import (
	"k8s.io/apimachinery/pkg/types"
)

// LogUploads are the cancelled runs whose log is being uploaded, by backup UID. A cancelled
// backup moves to FinalizingCancelled before its run uploads its log (a cancel never waits on
// storage); the finalizer, which appends the cancel to that log, waits until the upload is
// over so that neither write loses the other's lines. It lives in memory: after a restart no
// run is uploading anything. Safe for concurrent use.
type LogUploads struct {
	m UIDMap[struct{}]
}

func (l *LogUploads) Hold(uid types.UID)          { l.m.Set(uid, struct{}{}) }
func (l *LogUploads) Release(uid types.UID)       { l.m.Forget(uid) }
func (l *LogUploads) InFlight(uid types.UID) bool { _, ok := l.m.Get(uid); return ok }
