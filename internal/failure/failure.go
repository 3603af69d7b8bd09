// Package failure is Cairn's one classification of errors (STYLE.md 7): what waiting can do
// for a failure, decided once here and used alike by the reconcilers (internal/controller)
// and the runs (internal/backup, internal/restore). Each error falls in exactly one class:
//
//   - Permanent: waiting will not mend it. Those marked with Permanent, a storage location that
//     is gone or misconfigured, a write to a ReadOnly location, an object of the backup that is
//     missing from storage, and an API request the operator is forbidden to make. A reconciler
//     ends the object with it (a phase with a message, no requeue); a run does not retry it.
//   - Waiting: the object waits on another reconciler (marked with Waiting: a storage location
//     not validated yet). A reconciler requeues after a named interval and returns no error.
//   - Transient: known to pass: an API server that timed out, throttles, is restarting or
//     overloaded, and a connection that broke or timed out. A run retries it in place
//     (backup.RetryTransient); a reconciler returns it and the rate limiter backs off.
//   - anything else is unclassified: a reconciler treats it as transient (returns it, and the
//     rate limiter backs off, up to the phase timeout where one applies); a run does not retry
//     it in place, and handles or reports it.
//
// The classes are checked in that order, so an error marked Permanent that also wraps a
// timeout is permanent.
package failure

import (
	"errors"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
)

// class is what waiting can do for a failure; see the package comment.
type class int

const (
	unclassified class = iota
	permanent
	waiting
	transient
)

// permanentError marks a failure that waiting will not mend.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// waitingError marks a failure that another reconciler's work mends.
type waitingError struct{ err error }

func (e waitingError) Error() string { return e.err.Error() }
func (e waitingError) Unwrap() error { return e.err }

// Permanent marks err as permanent: its owner ends the object with it rather than retry. The
// text is err's.
func Permanent(err error) error { return permanentError{err} }

// Waiting marks err as waiting on another reconciler: its owner requeues after a named
// interval, without an error. The text is err's.
func Waiting(err error) error { return waitingError{err} }

// IsPermanent tells the failures that retrying will not mend.
func IsPermanent(err error) bool { return classify(err) == permanent }

// IsWaiting tells the failures that another reconciler's work mends.
func IsWaiting(err error) bool { return classify(err) == waiting }

// IsTransient tells the failures known to pass: a run retries them in place.
func IsTransient(err error) bool { return classify(err) == transient }

// classify puts err in its class, checking them in the package comment's order.
func classify(err error) class {
	switch {
	case err == nil:
		return unclassified
	case isPermanent(err):
		return permanent
	case errors.As(err, new(waitingError)):
		return waiting
	case isTransient(err):
		return transient
	}
	return unclassified
}

func isPermanent(err error) bool {
	return errors.As(err, new(permanentError)) ||
		errors.Is(err, location.ErrMissing) || errors.Is(err, location.ErrConfig) ||
		errors.Is(err, storage.ErrReadOnly) || errors.Is(err, storage.ErrNotFound) ||
		apierrors.IsForbidden(err)
}

func isTransient(err error) bool {
	switch {
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsUnexpectedServerError(err):
		return true
	case utilnet.IsConnectionReset(err), utilnet.IsConnectionRefused(err), utilnet.IsProbableEOF(err):
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}
