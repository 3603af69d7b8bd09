package controller

import (
	"fmt"
	"strings"
	"time"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// cancellation is runKind.cancellation for a backup.
//
// It and restoreCancellation are kept for the reconcilers that still call them
// (operations_controller.go, restoreoperations_controller.go, finalizer_controller.go,
// restorefinalizer_controller.go, backupqueue_controller.go) until they call the lifecycle's.
func cancellation(b *cairnv1.Backup) (reason, failureReason string, ok bool) {
	return backupKind.cancellation(b)
}

// restoreCancellation says whether a restore must stop, and the failureReason
// (runKind.cancellation).
func restoreCancellation(rs *cairnv1.Restore) (failureReason string, ok bool) {
	_, failureReason, ok = restoreKind.cancellation(rs)
	return failureReason, ok
}

// cancelRequester says who asked a backup to stop and when, for its log: the field manager that
// set spec.cancel (kubectl patch is "kubectl-patch") and the time of that write, or the deletion
// time. The API server records the manager, not the user; the audit log has the user.
func cancelRequester(b *cairnv1.Backup) string {
	if !b.Spec.Cancel && b.DeletionTimestamp != nil {
		return "deletion of the Backup at " + b.DeletionTimestamp.UTC().Format(time.RFC3339)
	}
	for _, mf := range b.ManagedFields {
		if mf.FieldsV1 == nil || !strings.Contains(mf.FieldsV1.GetRawString(), `"f:cancel"`) {
			continue
		}
		when := "an unknown time"
		if mf.Time != nil {
			when = mf.Time.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("field manager %q at %s", mf.Manager, when)
	}
	return "spec.cancel (the field manager is not recorded)"
}
