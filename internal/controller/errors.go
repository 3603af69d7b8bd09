package controller

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
)

// permanentError marks a failure that waiting will not mend (STYLE.md: errors are classified):
// its owner ends the backup with it rather than retry.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// permanent marks err as permanent.
func permanent(err error) error { return permanentError{err} }

// isPermanent tells the failures that retrying will not mend: those marked permanent, a
// storage location that is gone or misconfigured, a write to a ReadOnly location, an object
// of the backup that is missing or corrupt, and an API request the operator is forbidden to
// make. Anything else (timeouts, a storage service or API server that is down) is transient.
func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p) ||
		errors.Is(err, location.ErrMissing) || errors.Is(err, location.ErrConfig) ||
		errors.Is(err, storage.ErrReadOnly) || errors.Is(err, storage.ErrNotFound) ||
		errors.Is(err, errCorruptOperations) || apierrors.IsForbidden(err)
}
