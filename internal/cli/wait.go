package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// errGone means the followed object was deleted.
var errGone = errors.New("the object was deleted")

// interruptContext ends with Ctrl-C (or SIGTERM).
func interruptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// watchUntil calls done with the named object now and with every change a watch delivers,
// until done says true; errGone if the object is deleted (or absent: the NotFound error).
// A watch that ends (the API server closes watches now and then) is started again from the
// object's current state, so no change is missed and nothing is polled.
func watchUntil(ctx context.Context, c client.WithWatch, obj client.Object, list client.ObjectList, done func(client.Object) bool) error {
	key := client.ObjectKeyFromObject(obj)
	for {
		if err := c.Get(ctx, key, obj); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if done(obj) {
			return nil
		}
		w, err := c.Watch(ctx, list, &client.ListOptions{
			Namespace:     key.Namespace,
			FieldSelector: fields.OneTermEqualSelector("metadata.name", key.Name),
			Raw:           &metav1.ListOptions{ResourceVersion: obj.GetResourceVersion(), AllowWatchBookmarks: false},
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		finished, err := drain(ctx, w, done)
		w.Stop()
		if finished || err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// drain reads one watch until it ends: finished when done said true or the object went.
func drain(ctx context.Context, w watch.Interface, done func(client.Object) bool) (bool, error) {
	for {
		var ev watch.Event
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case e, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			ev = e
		}
		switch ev.Type {
		case watch.Deleted:
			return true, errGone
		case watch.Added, watch.Modified:
			o, ok := ev.Object.(client.Object)
			if ok && done(o) {
				return true, nil
			}
		case watch.Error:
			return false, nil // e.g. the version is too old: start again from a fresh Get
		}
	}
}

// backupObservation is what the progress printer shows of a backup.
func backupObservation(b *cairnv1.Backup) observation {
	o := observation{Phase: string(b.EffectivePhase()), Reason: waitReason(b.Status.QueuePosition, b.Status.Conditions, b.Status.FailureReason, b.Status.ValidationErrors)}
	if p := b.Status.Progress; p != nil {
		o.Done, o.Total = p.ItemsBackedUp, p.TotalItems
		o.VolumeDone, o.VolumeTotal = p.VolumeBytesDone, p.VolumeBytesTotal
	}
	return o
}

// restoreObservation is what the progress printer shows of a restore.
func restoreObservation(r *cairnv1.Restore) observation {
	o := observation{Phase: string(r.EffectivePhase()), Reason: waitReason(r.Status.QueuePosition, r.Status.Conditions, r.Status.FailureReason, r.Status.ValidationErrors)}
	if p := r.Status.Progress; p != nil {
		o.Done, o.Total = p.ItemsRestored, p.TotalItems
	}
	return o
}

// waitReason says why a backup or restore is where it is: its queue position and the Queued
// condition's message, or its failure.
func waitReason(position int32, conditions []metav1.Condition, failure string, validation []string) string {
	switch {
	case position > 0:
		reason := fmt.Sprintf("position %d", position)
		if c := meta.FindStatusCondition(conditions, cairnv1.BackupConditionQueued); c != nil && c.Status == metav1.ConditionTrue && c.Message != "" {
			reason += ", " + c.Message
		}
		return reason
	case failure != "":
		return failure
	case len(validation) > 0:
		return validation[0]
	}
	return ""
}

// phaseExitCode is the exit code for a backup or restore that ended in phase: 0 only for
// Completed.
func phaseExitCode(phase string) int {
	switch phase {
	case "Completed":
		return ExitOK
	case "PartiallyFailed":
		return ExitPartiallyFailed
	}
	return ExitFailed
}

// phaseError is the error for a finished backup or restore that did not complete, or nil.
func phaseError(kind, name, phase, reason string) error {
	code := phaseExitCode(phase)
	if code == ExitOK {
		return nil
	}
	msg := fmt.Sprintf("%s %s ended %s", kind, name, phase)
	if reason != "" {
		msg += ": " + reason
	}
	return withCode(code, errors.New(msg))
}

// follow watches a backup or restore until it is terminal, showing its progress, and returns
// the error its final phase calls for. Ctrl-C stops following (the backup goes on) and says
// how to cancel it.
func (e *env) follow(kind string, obj client.Object, list client.ObjectList, observe func(client.Object) (observation, bool)) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	ctx, stop := e.interrupt(context.Background())
	defer stop()
	p := &progressPrinter{w: e.streams.Out, terminal: e.terminal, noun: "items"}
	var final observation
	err = watchUntil(ctx, c, obj, list, func(o client.Object) bool {
		obs, terminal := observe(o)
		obs.At = e.clock.Now()
		p.observe(obs)
		final = obs
		return terminal
	})
	p.finish()
	name, ns := obj.GetName(), obj.GetNamespace()
	switch {
	case ctx.Err() != nil && err != nil:
		e.errorf("Stopped following %s %s; it goes on. Follow it again with `cairn %s describe %s -n %s`, cancel it with `cairn %s cancel %s -n %s`.\n",
			kind, name, kind, name, ns, kind, name, ns)
		return withCode(ExitDetached, nil)
	case errors.Is(err, errGone) || apierrors.IsNotFound(err):
		return fmt.Errorf("%s %s was deleted", kind, name)
	case err != nil:
		return err
	}
	return phaseError(kind, name, final.Phase, final.Reason)
}

// followBackup follows a backup until it is terminal.
func (e *env) followBackup(b *cairnv1.Backup) error {
	return e.follow("backup", b, &cairnv1.BackupList{}, func(o client.Object) (observation, bool) {
		cur, ok := o.(*cairnv1.Backup)
		if !ok {
			return observation{}, false
		}
		return backupObservation(cur), cur.Status.Phase.IsTerminal()
	})
}

// followRestore follows a restore until it is terminal.
func (e *env) followRestore(r *cairnv1.Restore) error {
	return e.follow("restore", r, &cairnv1.RestoreList{}, func(o client.Object) (observation, bool) {
		cur, ok := o.(*cairnv1.Restore)
		if !ok {
			return observation{}, false
		}
		return restoreObservation(cur), cur.Status.Phase.IsTerminal()
	})
}
