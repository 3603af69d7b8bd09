package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/storage"
)

// FinalizerReconciler finishes backups. It owns Finalizing and FinalizingPartiallyFailed: it
// writes the metadata object (the commit marker, with the archive's checksum) and moves the
// backup to Completed or PartiallyFailed. This is the minimal finalizer of the execution
// issue plus post-operation items: the items that completed async operations name are added to
// a rebuilt archive. FinalizingCancelled comes with the cancellation issue.
type FinalizerReconciler struct {
	client.Client
	Namespace string
	// Runner fetches post-operation items and rebuilds the archive with them.
	Runner    *backup.Runner
	Discovery discovery.DiscoveryInterface
	Clock     clock.Clock
	Recorder  events.EventRecorder
	Gate      interface {
		Wait(ctx context.Context) error
	}
}

// Reconcile finalizes one backup.
func (r *FinalizerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.Gate.Wait(ctx); err != nil {
		return ctrl.Result{}, err
	}
	var b cairnv1.Backup
	if err := r.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	final, ok := finalPhase(b.Status.Phase)
	if !ok {
		return ctrl.Result{}, nil
	}
	store, err := backupStore(ctx, r.Client, r.Namespace, &b)
	if err != nil {
		return ctrl.Result{}, err // the location may come back; retried with backoff
	}
	keys := store.Layout.Backup(b.Namespace, b.Name)
	digest, warnings, err := r.finalArchive(ctx, store, keys)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, w := range warnings {
		r.Recorder.Eventf(&b, nil, corev1.EventTypeWarning, "PostOperationItem", "Finalize", w)
	}
	now := r.Clock.Now()
	meta := storage.BackupMetadata{
		FormatVersion: archive.FormatVersion, Namespace: b.Namespace, Name: b.Name, UID: string(b.UID),
		Phase: string(final), ArchiveSHA256: digest.SHA256, ArchiveSize: digest.Size,
		CompletionTimestamp: now, Warnings: int(b.Status.Warnings) + len(warnings), Errors: int(b.Status.Errors),
	}
	if b.Status.StartTimestamp != nil {
		meta.StartTimestamp = b.Status.StartTimestamp.Time
	}
	if err := storage.WriteMetadata(ctx, store, keys, meta); err != nil {
		return ctrl.Result{}, err
	}
	t := metav1.NewTime(now)
	if err := patchBackupStatus(ctx, r.Client, &b, func(s *cairnv1.BackupStatus) {
		s.Phase = final
		s.CompletionTimestamp = &t
		s.Warnings += int32(len(warnings))
	}); err != nil {
		return ctrl.Result{}, err
	}
	r.Recorder.Eventf(&b, nil, corev1.EventTypeNormal, string(final), "Finalize", "Backup %s", final)
	return ctrl.Result{}, nil
}

// finalPhase is the terminal phase a finalizing backup ends in.
func finalPhase(p cairnv1.BackupPhase) (cairnv1.BackupPhase, bool) {
	switch p {
	case cairnv1.BackupPhaseFinalizing:
		return cairnv1.BackupPhaseCompleted, true
	case cairnv1.BackupPhaseFinalizingPartiallyFailed:
		return cairnv1.BackupPhasePartiallyFailed, true
	}
	return "", false
}

// finalArchive adds the post-operation items of completed operations to the archive, when
// there are any, and returns the final archive's checksum.
func (r *FinalizerReconciler) finalArchive(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys) (storage.ArchiveDigest, []string, error) {
	var postItems []backup.ItemID
	if ok, err := store.Exists(ctx, keys.ItemOperations); err != nil {
		return storage.ArchiveDigest{}, nil, err
	} else if ok {
		ops, err := readOperations(ctx, store, keys)
		if err != nil {
			return storage.ArchiveDigest{}, nil, err
		}
		for _, op := range ops {
			if op.Phase == backup.OperationCompleted {
				postItems = append(postItems, op.PostOperationItems...)
			}
		}
	}
	if len(postItems) == 0 {
		d, err := archiveDigest(ctx, store, keys)
		return d, nil, err
	}
	lists, err := r.Discovery.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return storage.ArchiveDigest{}, nil, fmt.Errorf("discovering the cluster's resources: %w", err)
	}
	return r.Runner.AddPostOperationItems(ctx, store, keys, backup.ResourcesFromDiscovery(lists), postItems)
}

// archiveDigest reads the uploaded archive back and computes its checksum.
func archiveDigest(ctx context.Context, store storage.ObjectStore, keys storage.BackupKeys) (storage.ArchiveDigest, error) {
	rc, err := store.Get(ctx, keys.Archive)
	if err != nil {
		return storage.ArchiveDigest{}, fmt.Errorf("reading the archive back: %w", err)
	}
	defer rc.Close()
	return storage.Digest(rc)
}

// SetupWithManager registers the reconciler for backups in its phases.
func (r *FinalizerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	owned := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		b, ok := obj.(*cairnv1.Backup)
		_, finalizing := finalPhase(b.Status.Phase)
		return ok && finalizing
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("finalizer").
		For(&cairnv1.Backup{}, builder.WithPredicates(owned)).
		Complete(r)
}
