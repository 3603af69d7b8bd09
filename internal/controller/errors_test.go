package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
)

func TestIsPermanent(t *testing.T) {
	gr := schema.GroupResource{Resource: "backups"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "marked permanent", err: permanent(errors.New("checksum mismatch")), want: true},
		{name: "marked permanent, wrapped", err: fmt.Errorf("finalizing: %w", permanent(errors.New("x"))), want: true},
		{name: "location gone", err: fmt.Errorf("x: %w", location.ErrMissing), want: true},
		{name: "location misconfigured", err: fmt.Errorf("x: %w", location.ErrConfig), want: true},
		{name: "location read-only", err: fmt.Errorf("writing: %w", storage.ErrReadOnly), want: true},
		{name: "object missing", err: fmt.Errorf("reading: %w", storage.ErrNotFound), want: true},
		{name: "operations corrupt", err: fmt.Errorf("%w: bad gzip", errCorruptOperations), want: true},
		{name: "forbidden", err: apierrors.NewForbidden(gr, "b", errors.New("no")), want: true},
		{name: "storage timeout", err: context.DeadlineExceeded},
		{name: "connection refused", err: errors.New("dial tcp 127.0.0.1:9: connect: connection refused")},
		{name: "API server unavailable", err: apierrors.NewServiceUnavailable("down")},
		{name: "conflict", err: apierrors.NewConflict(gr, "b", errors.New("changed"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isPermanent(tt.err); got != tt.want {
				t.Errorf("isPermanent(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
