package backup

import (
	"context"
	"fmt"
	"time"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// OperationCallTimeout bounds each call of an action's Progress or Cancel by default: an action
// that hangs holds up only its own operation, never the other operations of the backup nor the
// reconciler. A call cut short fails its operation with the context's error.
const OperationCallTimeout = 30 * time.Second

// OperationTracker is what advancing or cancelling an async operation asks of the action that
// started it: a backup's BackupItemAction or a restore's RestoreItemAction, bound to its
// object. Advance and Cancel are the one way an operation moves, for both kinds.
type OperationTracker interface {
	Progress(ctx context.Context, operationID string) (OperationProgress, error)
	Cancel(ctx context.Context, operationID string) error
}

// AdvanceOperation is Advance for an operation of a backup; action is nil when no registered
// action has the operation's name.
func AdvanceOperation(ctx context.Context, op Operation, action BackupItemAction, b *cairnv1.Backup, now time.Time, timeout time.Duration) Operation {
	return Advance(ctx, op, backupTracker(action, b), now, timeout)
}

// Advance asks an unfinished operation's action how it is doing and returns the operation
// updated: Completed, Failed (with the error), or still InProgress with its progress. One past
// its timeout is cancelled and fails with "timed out". t is nil when no registered action has
// the operation's name. ctx bounds this one call.
func Advance(ctx context.Context, op Operation, t OperationTracker, now time.Time, timeout time.Duration) Operation {
	if !op.Running() {
		return op
	}
	op.Updated = now
	if t == nil {
		op.Phase, op.Error = OperationFailed, fmt.Sprintf("action %s is not registered", op.Action)
		return op
	}
	if now.Sub(op.Started) > timeout {
		return Cancel(ctx, op, t, now, fmt.Sprintf("timed out after %s", timeout))
	}
	p, err := t.Progress(ctx, op.OperationID)
	switch {
	case err != nil:
		op.Phase, op.Error = OperationFailed, err.Error()
	case p.Err != "":
		op.Phase, op.Error = OperationFailed, p.Err
		op.Result = p.Result
	case p.Completed:
		op.Phase = OperationCompleted
		op.PostOperationItems = append(op.PostOperationItems, p.PostOperationItems...)
		op.Result = p.Result
	default:
		op.Phase = OperationInProgress
	}
	op.NCompleted, op.NTotal, op.Units, op.Description = p.NCompleted, p.NTotal, p.Units, p.Description
	return op
}

// backupTracker binds a backup's action to the backup; nil when there is no action.
func backupTracker(action BackupItemAction, b *cairnv1.Backup) OperationTracker {
	if action == nil {
		return nil
	}
	return boundBackupAction{action, b}
}

type boundBackupAction struct {
	action BackupItemAction
	b      *cairnv1.Backup
}

func (a boundBackupAction) Progress(ctx context.Context, id string) (OperationProgress, error) {
	return a.action.Progress(ctx, id, a.b)
}

func (a boundBackupAction) Cancel(ctx context.Context, id string) error {
	return a.action.Cancel(ctx, id, a.b)
}

// OperationCounts counts operations by outcome.
func OperationCounts(ops []Operation) (running, completed, failed int) {
	for _, op := range ops {
		switch {
		case op.Running():
			running++
		case op.Phase == OperationCompleted:
			completed++
		default:
			failed++
		}
	}
	return running, completed, failed
}

// UnitsBytes are the units of an operation whose progress counts bytes (a volume copy).
const UnitsBytes = "bytes"

// OperationBytes sums the progress of the operations that count bytes: what the volume
// copies have read so far and what they will read, as far as known. A completed copy whose
// total was never reported counts what it read.
func OperationBytes(ops []Operation) (done, total int64) {
	for _, op := range ops {
		if op.Units != UnitsBytes {
			continue
		}
		done += op.NCompleted
		total += max(op.NTotal, op.NCompleted)
	}
	return done, total
}

// AfterOperations is the one decision of what follows a wait for async operations, for
// backups and restores alike: still waiting while any runs, and partial (PartiallyFailed)
// once the owner was partial already or an operation failed.
func AfterOperations(partialSoFar bool, ops []Operation) (waiting, partial bool) {
	running, _, failed := OperationCounts(ops)
	return running > 0, partialSoFar || failed > 0
}

// NextAfterOperations is the phase of a backup in WaitingForPluginOperations* given its
// operations: it stays (turning PartiallyFailed once one failed) while any runs, then goes to
// Finalizing or FinalizingPartiallyFailed.
func NextAfterOperations(phase cairnv1.BackupPhase, ops []Operation) cairnv1.BackupPhase {
	waiting, partial := AfterOperations(phase == cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed, ops)
	switch {
	case waiting && partial:
		return cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed
	case waiting:
		return cairnv1.BackupPhaseWaitingForPluginOperations
	case partial:
		return cairnv1.BackupPhaseFinalizingPartiallyFailed
	}
	return cairnv1.BackupPhaseFinalizing
}

// CancelOperation is Cancel for an operation of a backup; action is nil when no registered
// action has the operation's name.
func CancelOperation(ctx context.Context, op Operation, action BackupItemAction, b *cairnv1.Backup, now time.Time, reason string) Operation {
	return Cancel(ctx, op, backupTracker(action, b), now, reason)
}

// Cancel cancels one unfinished operation: its action's Cancel is called (unless t is nil: no
// registered action has its name) and the operation fails with reason. A Cancel that fails is
// part of the operation's error. ctx bounds this one call. A finished operation is returned as
// it is.
func Cancel(ctx context.Context, op Operation, t OperationTracker, now time.Time, reason string) Operation {
	if !op.Running() {
		return op
	}
	op.Phase, op.Error, op.Updated = OperationFailed, reason, now
	if t != nil {
		if err := t.Cancel(ctx, op.OperationID); err != nil {
			op.Error = fmt.Sprintf("%s (cancelling it failed: %v)", reason, err)
		}
	}
	return op
}

// CancelOperations cancels every unfinished operation of a backup that is being cancelled
// (CancelOperation), each Cancel bounded by OperationCallTimeout on its own. registry finds each
// operation's action by name.
func CancelOperations(ctx context.Context, ops []Operation, registry *Registry, b *cairnv1.Backup, now time.Time, reason string) []Operation {
	out := make([]Operation, len(ops))
	for i, op := range ops {
		callCtx, cancel := context.WithTimeout(ctx, OperationCallTimeout)
		out[i] = CancelOperation(callCtx, op, registry.Named(op.Action), b, now, reason)
		cancel()
	}
	return out
}
