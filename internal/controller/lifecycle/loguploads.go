package lifecycle

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
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

// FileStores are the cancelled restores whose run is storing its files (resource list,
// results, log) after its FinalizingCancelled write, by restore UID, and how each store ended.
// A cancel never waits on storage: the restore reconciler records it first and stores the files
// after (restore.Result.StoreFiles); the restore finalizer ends the restore only once they are
// stored, and records whether they were (the FilesStored condition). It lives in memory: after a
// restart no run is storing anything. Safe for concurrent use; a nil one holds nothing.
type FileStores struct {
	inFlight UIDMap[struct{}]
	ended    UIDMap[error]
}

// Hold marks uid's files as being stored.
func (f *FileStores) Hold(uid types.UID) {
	if f != nil {
		f.inFlight.Set(uid, struct{}{})
	}
}

// Release records how the store of uid's files ended (err nil: stored) and that it is over.
func (f *FileStores) Release(uid types.UID, err error) {
	if f == nil {
		return
	}
	f.ended.Set(uid, err)
	f.inFlight.Forget(uid)
}

// InFlight reports whether uid's files are being stored.
func (f *FileStores) InFlight(uid types.UID) bool {
	if f == nil {
		return false
	}
	_, ok := f.inFlight.Get(uid)
	return ok
}

// Ended is how the store of uid's files ended (err nil: stored); ok is false when this process
// did not store them (it restarted since).
func (f *FileStores) Ended(uid types.UID) (err error, ok bool) {
	if f == nil {
		return nil, false
	}
	return f.ended.Get(uid)
}

// Forget drops what is known of uid's files, once it is recorded.
func (f *FileStores) Forget(uid types.UID) {
	if f != nil {
		f.ended.Forget(uid)
	}
}

// FilesStoredCondition is a restore's FilesStored condition once its run's files were stored,
// or not (filesErr), from the one that said where they go (pending, status Unknown).
func FilesStoredCondition(pending metav1.Condition, filesErr error, generation int64, now metav1.Time) metav1.Condition {
	stored := metav1.Condition{Type: cairnv1.RestoreConditionFilesStored, Status: metav1.ConditionTrue, Reason: cairnv1.ReasonFilesStored,
		Message: strings.Replace(pending.Message, " go to ", " were written to ", 1), ObservedGeneration: generation, LastTransitionTime: now}
	if filesErr != nil {
		stored.Status, stored.Reason, stored.Message = metav1.ConditionFalse, cairnv1.ReasonStorageUnavailable, "storing the restore's files failed: "+filesErr.Error()
	}
	return stored
}
