package failure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
)

func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Resource: "backups"}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	tests := []struct {
		name string
		err  error
		want class
	}{
		// Permanent: the owner ends the object with it.
		{name: "marked permanent", err: Permanent(errors.New("checksum mismatch")), want: permanent},
		{name: "marked permanent, wrapped", err: fmt.Errorf("finalizing: %w", Permanent(errors.New("x"))), want: permanent},
		{name: "location gone", err: fmt.Errorf("x: %w", location.ErrMissing), want: permanent},
		{name: "location misconfigured", err: fmt.Errorf("x: %w", location.ErrConfig), want: permanent},
		{name: "location read-only", err: fmt.Errorf("writing: %w", storage.ErrReadOnly), want: permanent},
		{name: "object missing", err: fmt.Errorf("reading: %w", storage.ErrNotFound), want: permanent},
		{name: "forbidden", err: apierrors.NewForbidden(gr, "b", errors.New("no")), want: permanent},
		{name: "marked permanent, wrapping a timeout", err: Permanent(context.DeadlineExceeded), want: permanent},

		// Waiting: the owner requeues after a named interval.
		{name: "marked waiting", err: Waiting(errors.New("not validated yet")), want: waiting},
		{name: "marked waiting, wrapped", err: fmt.Errorf("starting: %w", Waiting(errors.New("x"))), want: waiting},

		// Transient: a run retries it in place, a reconciler backs off.
		{name: "storage timeout", err: context.DeadlineExceeded, want: transient},
		{name: "API server unavailable", err: apierrors.NewServiceUnavailable("down"), want: transient},
		{name: "API server timeout", err: apierrors.NewServerTimeout(gr, "list", 1), want: transient},
		{name: "API request timeout", err: apierrors.NewTimeoutError("slow", 1), want: transient},
		{name: "throttled", err: apierrors.NewTooManyRequests("slow down", 1), want: transient},
		{name: "API server internal error", err: apierrors.NewInternalError(errors.New("boom")), want: transient},
		{name: "unexpected server error", err: apierrors.NewGenericServerResponse(500, "get", gr, "b", "", 0, true), want: transient},
		{name: "connection refused", err: refused, want: transient},
		{name: "connection reset", err: fmt.Errorf("listing: %w", reset), want: transient},
		{name: "connection closed", err: io.ErrUnexpectedEOF, want: transient},

		// Unclassified: a reconciler backs off, a run does not retry it in place.
		{name: "connection refused, only as text", err: errors.New("dial tcp 127.0.0.1:9: connect: connection refused")},
		{name: "conflict", err: apierrors.NewConflict(gr, "b", errors.New("changed"))},
		{name: "not found", err: apierrors.NewNotFound(gr, "b")},
		{name: "bad request", err: apierrors.NewBadRequest("no")},
		{name: "cancelled", err: context.Canceled},
		{name: "nil", err: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsPermanent(tt.err); got != (tt.want == permanent) {
				t.Errorf("IsPermanent(%v) = %v, want %v", tt.err, got, tt.want == permanent)
			}
			if got := IsWaiting(tt.err); got != (tt.want == waiting) {
				t.Errorf("IsWaiting(%v) = %v, want %v", tt.err, got, tt.want == waiting)
			}
			if got := IsTransient(tt.err); got != (tt.want == transient) {
				t.Errorf("IsTransient(%v) = %v, want %v", tt.err, got, tt.want == transient)
			}
		})
	}
}

func TestMarkersKeepTheText(t *testing.T) {
	cause := errors.New("the storage location has not been validated yet")
	for _, err := range []error{Permanent(cause), Waiting(cause)} {
		if err.Error() != cause.Error() || !errors.Is(err, cause) {
			t.Errorf("%#v: text %q, errors.Is(cause) %v; want %q and true", err, err.Error(), errors.Is(err, cause), cause.Error())
		}
	}
}
