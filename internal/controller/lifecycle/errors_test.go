package lifecycle

import (
	"fmt"
	"testing"

	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/failure"
)

// The controller's own errors, in the classes of internal/failure (tested there).
func TestControllerErrorClasses(t *testing.T) {
	tests := []struct {
		name             string
		err              error
		permanent, waits bool
	}{
		{name: "operations corrupt", err: fmt.Errorf("%w: bad gzip", backup.ErrCorruptOperations), permanent: true},
		{name: "operations lost", err: ErrOperationsLost, permanent: true},
		{name: "location not validated yet", err: ErrLocationNotValidated, waits: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failure.IsPermanent(tt.err); got != tt.permanent {
				t.Errorf("failure.IsPermanent(%v) = %v, want %v", tt.err, got, tt.permanent)
			}
			if got := failure.IsWaiting(tt.err); got != tt.waits {
				t.Errorf("failure.IsWaiting(%v) = %v, want %v", tt.err, got, tt.waits)
			}
		})
	}
}
