package controller

import (
	"errors"

	"github.com/cairn-backup/cairn/internal/failure"
)

// errLocationNotValidated: a backup's or restore's storage location exists but was not
// validated yet. It is a waiting failure (failure.IsWaiting): the owner looks again after
// storageWaitRequeue rather than fail.
var errLocationNotValidated = failure.Waiting(errors.New("the storage location has not been validated yet"))
