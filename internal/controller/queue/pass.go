package queue

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/queue"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/validation"
)

// One pass of the queue: what it fetched (the running backups and restores, the locations
// being deleted from, and the line of New and Queued ones, validated), and what it wrote.

// queuePass is what one pass of the queue fetched and decided.
type queuePass struct {
	now time.Time
	// running are the backups and restores that run (ReadyToStart or InProgress).
	running  []queue.Entry
	deleting map[string]string
	// waiting are the New and Queued backups and restores in queue order: queued ones by
	// position, then new ones by creation.
	waiting []candidate

	mu         sync.Mutex // guards the fields below, written by concurrent patches
	structural bool
	written    []client.Object
	// failed are the backups and restores whose write failed in this pass: later steps of the
	// pass leave them alone, and the next pass retries them.
	failed   map[types.UID]bool
	failures []error
}

// record notes the outcome of a write for obj (a backup or a restore): a failure is logged
// and remembered, and the pass goes on. It returns err.
func (p *queuePass) record(ctx context.Context, obj client.Object, err error) error {
	if err == nil {
		return nil
	}
	ctrl.LoggerFrom(ctx).Error(err, "Could not write the queue status of a backup or restore; the queue goes on and retries it later",
		kindOf(obj).String(), lifecycle.ObjectName(obj))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed == nil {
		p.failed = map[types.UID]bool{}
	}
	p.failed[obj.GetUID()] = true
	p.failures = append(p.failures, err)
	return err
}

// hasFailed reports whether a write for obj failed earlier in this pass.
func (p *queuePass) hasFailed(obj client.Object) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed[obj.GetUID()]
}

// wrote notes a successful write of obj, for the cache catch-up and the renumbering's pace.
func (p *queuePass) wrote(obj client.Object, phaseChanged bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.structural = p.structural || phaseChanged
	p.written = append(p.written, obj)
}

// err is what the pass returns: nil, or an error that brings the pass back with backoff.
func (p *queuePass) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.failures) == 0 {
		return nil
	}
	return fmt.Errorf("%d of the queue's writes failed (each is logged; retrying), the first: %w", len(p.failures), p.failures[0])
}

// candidate is a New or Queued backup or restore with what the queue needs to know of it.
// Exactly one of backup and restore is set.
type candidate struct {
	backup  *cairnv1.Backup
	restore *cairnv1.Restore
	entry   queue.Entry
	// validationErrors are a New backup's or restore's validation problems.
	validationErrors []string
	// backupName is the backup a restore reads: what a new one resolved to, or status.backupName.
	backupName string
}

// object is the backup or the restore.
func (c candidate) object() client.Object {
	if c.restore != nil {
		return c.restore
	}
	return c.backup
}

// isNew reports whether it is New (or ""): not yet in the line.
func (c candidate) isNew() bool {
	if c.restore != nil {
		return c.restore.EffectivePhase() == cairnv1.RestorePhaseNew
	}
	return c.backup.EffectivePhase() == cairnv1.BackupPhaseNew
}

// storedPosition is the queue position its status holds (0 when New).
func (c candidate) storedPosition() int32 {
	switch {
	case c.isNew():
		return 0
	case c.restore != nil:
		return c.restore.Status.QueuePosition
	}
	return c.backup.Status.QueuePosition
}

// queuedCondition is its Queued condition, if any.
func (c candidate) queuedCondition() *metav1.Condition {
	if c.restore != nil {
		return meta.FindStatusCondition(c.restore.Status.Conditions, cairnv1.RestoreConditionQueued)
	}
	return meta.FindStatusCondition(c.backup.Status.Conditions, cairnv1.BackupConditionQueued)
}

// kindOf says whether obj is a backup or a restore.
func kindOf(obj client.Object) queue.Kind {
	if _, ok := obj.(*cairnv1.Restore); ok {
		return queue.KindRestore
	}
	return queue.KindBackup
}

// fetch reads the backups, restores, namespaces and storage locations, and sorts the backups
// and restores into the running ones, the backups being deleted, and the queue.
func (r *Reconciler) fetch(ctx context.Context) (*queuePass, error) {
	var backups cairnv1.BackupList
	if err := r.List(ctx, &backups); err != nil {
		return nil, err
	}
	var restores cairnv1.RestoreList
	if err := r.List(ctx, &restores); err != nil {
		return nil, err
	}
	// Only the names and labels are read: the cache's own objects are enough.
	var namespaces corev1.NamespaceList
	if err := r.List(ctx, &namespaces, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var locations cairnv1.BackupStorageLocationList
	if err := r.List(ctx, &locations, client.InNamespace(r.Namespace)); err != nil {
		return nil, err
	}
	clusterNamespaces := make([]string, 0, len(namespaces.Items))
	namespaceLabels := make(map[string]map[string]string, len(namespaces.Items))
	for _, ns := range namespaces.Items {
		clusterNamespaces = append(clusterNamespaces, ns.Name)
		namespaceLabels[ns.Name] = ns.Labels
	}
	if r.resolutions == nil {
		r.resolutions = queue.NewResolutions(r.Namespace)
	}
	r.resolutions.Begin(clusterNamespaces)
	defer r.resolutions.End()

	pass := &queuePass{now: r.Clock.Now(), deleting: map[string]string{}}
	var waiting []client.Object
	byName := make(map[types.NamespacedName]*cairnv1.Backup, len(backups.Items))
	for i := range backups.Items {
		b := &backups.Items[i]
		byName[client.ObjectKeyFromObject(b)] = b
		if loc := b.Status.StorageLocation; loc != "" && r.removingData(b) {
			if _, seen := pass.deleting[loc]; !seen {
				pass.deleting[loc] = lifecycle.ObjectName(b)
			}
			continue
		}
		switch b.EffectivePhase() {
		case cairnv1.BackupPhaseReadyToStart, cairnv1.BackupPhaseInProgress:
			pass.running = append(pass.running, r.entry(b, b.Status.StorageLocation))
		case cairnv1.BackupPhaseNew, cairnv1.BackupPhaseQueued:
			if b.IsSyncPending() {
				continue // made by the sync from storage, which owns it (DESIGN.md section 11)
			}
			waiting = append(waiting, b)
		}
	}
	// readBackup is the backup a restore reads, when the cache holds it.
	readBackup := func(rs *cairnv1.Restore) *cairnv1.Backup {
		return byName[types.NamespacedName{Namespace: rs.Namespace, Name: rs.Status.BackupName}]
	}
	for i := range restores.Items {
		rs := &restores.Items[i]
		switch rs.EffectivePhase() {
		case cairnv1.RestorePhaseReadyToStart, cairnv1.RestorePhaseInProgress:
			pass.running = append(pass.running, r.restoreEntry(rs, readBackup(rs)))
		case cairnv1.RestorePhaseNew, cairnv1.RestorePhaseQueued:
			waiting = append(waiting, rs)
		}
	}
	queue.Order(waiting)

	for _, obj := range waiting {
		switch x := obj.(type) {
		case *cairnv1.Backup:
			c := candidate{backup: x}
			loc := x.Status.StorageLocation
			if x.EffectivePhase() == cairnv1.BackupPhaseNew && !leavesQueue(x) {
				_, why, err := r.Requesters.For(ctx, x)
				if pass.record(ctx, x, err) != nil {
					continue // not decided on; the next pass tries again
				}
				c.validationErrors, loc = validation.Backup(x, r.Namespace, locations.Items,
					validation.LimitFacts{NamespaceLabels: namespaceLabels[x.Namespace], DefaultTTL: r.DefaultBackupTTL})
				c.validationErrors = append(c.validationErrors, syncNameConflict(r.Catalog, x, loc, locations.Items)...)
				if why != "" {
					c.validationErrors = append(c.validationErrors, why)
				}
			}
			c.entry = r.entry(x, loc)
			pass.waiting = append(pass.waiting, c)
		case *cairnv1.Restore:
			c := candidate{restore: x, backupName: x.Status.BackupName}
			backup := readBackup(x)
			if x.EffectivePhase() == cairnv1.RestorePhaseNew {
				if _, _, cancelled := lifecycle.Restores.Cancellation(x); !cancelled {
					// Validated as the restore reconciler will validate it again when it starts.
					facts, backupName, err := lifecycle.RestoreValidationFacts(ctx, r.Client, r.Namespace, x)
					if pass.record(ctx, x, err) != nil {
						continue // not decided on; the next pass tries again
					}
					c.validationErrors = restore.Validate(x, r.Namespace, facts)
					_, why, err := r.Requesters.For(ctx, x)
					if pass.record(ctx, x, err) != nil {
						continue
					}
					if why != "" {
						c.validationErrors = append(c.validationErrors, why)
					}
					if r.RestoreAccess != nil { // the operator may be installed to back up only
						denied, err := r.RestoreAccess(ctx, x)
						if pass.record(ctx, x, err) != nil {
							continue
						}
						if denied != "" {
							c.validationErrors = append(c.validationErrors, denied)
						}
					}
					c.backupName, backup = backupName, facts.Backup
				}
			}
			c.entry = r.restoreEntry(x, backup)
			pass.waiting = append(pass.waiting, c)
		}
	}
	return pass, nil
}

func (r *Reconciler) entry(b *cairnv1.Backup, location string) queue.Entry {
	return queue.Entry{
		Kind:       queue.KindBackup,
		Namespace:  b.Namespace,
		Name:       b.Name,
		Namespaces: r.resolutions.Resolve(b),
		Location:   location,
	}
}

// restoreEntry is a restore as the queue sees it: the namespaces it may write into, from the
// backup it reads (nil when unknown).
func (r *Reconciler) restoreEntry(rs *cairnv1.Restore, b *cairnv1.Backup) queue.Entry {
	return queue.Entry{
		Kind:       queue.KindRestore,
		Namespace:  rs.Namespace,
		Name:       rs.Name,
		Namespaces: queue.RestoreTargets(rs, b, r.Namespace),
	}
}
