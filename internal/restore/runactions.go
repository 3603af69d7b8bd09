package restore

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

// CreatedObserver is an Action whose operations must know which object the item they were
// started for became: the object the create answered (its UID, its owner references), not
// whatever has the item's name later. The restore tells it right after the item is created,
// before it follows the operations; an item that was not created by the restore (it existed
// already) is never told. An error abandons the item's operations, as a failed create does
// (DESIGN.md section 20: the node agent writes only into the pod the restore created).
type CreatedObserver interface {
	Created(ctx context.Context, operationID string, rs *cairnv1.Restore, created *unstructured.Unstructured) error
}

// tellCreated tells each action that started one of ops, and observes creations, what the
// item became.
func (ru *run) tellCreated(ctx context.Context, ops []backup.Operation, created *unstructured.Unstructured) error {
	var errs []error
	for _, op := range ops {
		observer, ok := ru.actions().Named(op.Action).(CreatedObserver)
		if !ok {
			continue
		}
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backup.OperationCallTimeout)
		if err := observer.Created(callCtx, op.OperationID, ru.restore, created); err != nil {
			errs = append(errs, fmt.Errorf("restore item action %s: %w", op.Action, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// facts are what the restore's actions may ask about it.
func (ru *run) facts() Facts {
	facts := Facts{PVRestored: ru.pvRestored, BackedUp: ru.backedUp, SnapshotOf: ru.snapshotOfClaim, Restore: ru.restore, SnapshotAllowed: ru.snapshotAllowed,
		BackupOperations: ru.backupOperations, BackupLocation: ru.req.BackupLocation}
	if ru.req.UnverifiedArchive {
		// A Velero backup: its operations file is Velero's (none of Cairn's volume copies), and
		// its pod volumes' data, if any, is in Velero's kopia repositories.
		facts.BackupOperations = nil
		facts.VeleroVolumes = ru.veleroVolumes
	}
	return facts
}

// executeActions runs the actions of gr on the prepared item in.Item (ref in messages), in
// registration order, and returns the item to create and the operations the actions started;
// ok is false when the item is not to be created (an action failed or skipped it: recorded
// here, and its operations abandoned).
func (ru *run) executeActions(ctx context.Context, gr schema.GroupResource, target, ref string, in ActionInput) (desired *unstructured.Unstructured, started []backup.Operation, ok bool) {
	desired = in.Item
	for _, action := range ru.actions().For(gr) {
		in.Item = desired
		out, err := action.Execute(ctx, in)
		if out.OperationID != "" {
			started = append(started, backup.Operation{Action: action.Name(), OperationID: out.OperationID,
				Item: backup.ItemID{GroupResource: gr, Namespace: target, Name: desired.GetName()}, Started: ru.clock().Now()})
		}
		if err != nil {
			ru.abandon(ctx, started, "the item could not be restored")
			if ctx.Err() != nil {
				// Cancelled (or stopping) while the action ran: not an error of the item.
				ru.record(gr, target, desired.GetName(), Skipped, fmt.Sprintf("%s: the restore stopped before it was created", ref))
				return nil, nil, false
			}
			ru.record(gr, target, desired.GetName(), FailedItem, fmt.Sprintf("%s: restore item action %s: %v", ref, action.Name(), err))
			return nil, nil, false
		}
		if out.Skip {
			ru.abandon(ctx, started, "the item was skipped")
			ru.record(gr, target, desired.GetName(), Skipped, "")
			ru.log.WithField("item", ref).WithField("action", action.Name()).Info("Skipped: " + out.SkipReason)
			return nil, nil, false
		}
		if out.Item != nil {
			desired = out.Item
		}
		for _, note := range out.Notes {
			ru.log.WithField("item", ref).WithField("action", action.Name()).Info(note)
		}
		for _, message := range out.Errors {
			ru.message(target, ref, true, fmt.Sprintf("%s: restore item action %s: %s", ref, action.Name(), message))
		}
		for _, more := range out.AdditionalItems {
			ru.restoreAdditional(ctx, more)
		}
	}
	return desired, started, true
}

// keepOperations keeps the operations an item's actions started, for the restore to follow,
// once the item was written: the actions that observe creations told what was created first
// (tellCreated). They are abandoned when the item was not written, or when an action could
// not take note of what was created (an error of the item: its operations would act on an
// object they cannot tell from another of the same name).
func (ru *run) keepOperations(ctx context.Context, target, ref string, started []backup.Operation, outcome Outcome, created *unstructured.Unstructured, err error) {
	if err != nil || (outcome != Created && outcome != Updated) {
		ru.abandon(ctx, started, "the item was not created")
		return
	}
	if len(started) == 0 {
		return
	}
	if created != nil {
		if err := ru.tellCreated(ctx, started, created); err != nil {
			ru.abandon(ctx, started, "what was created could not be recorded")
			ru.message(target, ref, true, fmt.Sprintf("%s: created, but its operations were abandoned: %v", ref, err))
			return
		}
	}
	ru.mu.Lock()
	ru.ops = append(ru.ops, started...)
	ru.mu.Unlock()
}
