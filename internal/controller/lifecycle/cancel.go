package lifecycle

import (
	"fmt"
	"strings"
	"time"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// CancelRequester says who asked a backup to stop and when, for its log: the field manager that
// set spec.cancel (kubectl patch is "kubectl-patch") and the time of that write, or the deletion
// time. The API server records the manager, not the user; the audit log has the user.
func CancelRequester(b *cairnv1.Backup) string {
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
