package lifecycle

import (
	"errors"

	"github.com/cairn-backup/cairn/internal/failure"
)

// ErrLocationNotValidated: a backup's or restore's storage location exists but was not
// validated yet. It is a waiting failure (failure.IsWaiting): the owner looks again after
// StorageWaitRequeue rather than fail.
var ErrLocationNotValidated = failure.Waiting(errors.New("the storage location has not been validated yet"))

// ErrOperationsLost means a restore's operations were kept only in the memory of a manager
// that has stopped since (the restore had no storage for its files).
var ErrOperationsLost = failure.Permanent(errors.New("the restore's async operations were kept only in memory (no ReadWrite location for its files), and the operator restarted since"))
