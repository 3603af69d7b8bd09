// Package backupsync holds the reconciler that syncs storage into the cluster (DESIGN.md
// section 11); the decisions are internal/backupsync's. The backupsync.Catalog it fills is
// made in setup.go and passed to it and to the queue, which checks new backups' names against
// it: the one piece of memory they share.
package backupsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/validation"
	"github.com/cairn-backup/cairn/internal/velerofmt"
)

const (
	// DefaultPeriod is the default of --backup-sync-period: how often a location
	// without spec.backupSyncPeriod is synced.
	DefaultPeriod = time.Minute
	// syncParallelism is how many synced backups a pass makes at once (each a marker read, a
	// create and a status write).
	syncParallelism = 16
	// lastSyncedRefresh is how stale a location's status.lastSyncedTime may get before a pass
	// that changed nothing writes it: an idle sync costs no API writes in between.
	lastSyncedRefresh = 5 * time.Minute
	// syncReportLimit is how many backups an event of a pass names, at most.
	syncReportLimit = 5
)

// Reconciler mirrors storage into the cluster (DESIGN.md section 11): storage is where
// backups live, and the Backup objects show what it holds. For each Available location, every
// spec.backupSyncPeriod (--backup-sync-period when unset; 0s turns it off) and whenever the
// location becomes Available, it lists the location's committed backups in one storage List and
// compares them with the cluster's backups (backupsync.Decide):
//   - a committed backup the cluster has no object for gets one in its namespace, made from its
//     commit marker (spec, labels, label cairn.dev/storage-location, annotation
//     cairn.dev/synced-from, the data finalizer), and its terminal status at once. A namespace
//     that does not exist is skipped, with a Warning event on the location naming it;
//   - it owns the backups in phase "" with the annotation cairn.dev/synced-from (no other
//     reconciler acts on them) and moves them to Completed or PartiallyFailed from their
//     marker, or to FailedValidation when the marker is gone or refused;
//   - a Completed or PartiallyFailed backup of the location whose marker is gone gets
//     DataAvailable=False and a Warning event; True again when the marker is back.
//
// A location of format velero is read through internal/velerofmt's store, which shows Velero's
// backups in Cairn's layout: each Completed or PartiallyFailed one is made as above in the
// operator's namespace, annotated with its Velero name and UID, under velero-<name> when a
// Backup of another origin holds its name (backupsync.Input.Rename); one in another phase is
// skipped and named in the SyncSkipped event.
//
// It writes the location's status.lastSyncedTime (the storage location reconciler owns the
// rest of that status), and the names the location holds that no backup of the cluster stands
// for into the Catalog, which the queue checks new backups against. Every storage call is
// bounded by the storage timeout (the listing of the location by ten times that), and one that
// fails ends the pass, retried with backoff: a storage service that hangs holds only this
// reconciler, and only that long. A location with more than storage.MaxCommittedBackups
// committed backups is not synced: each pass fails, with a Warning event on the location.
type Reconciler struct {
	client.Client
	// Namespace is the operator's namespace: it holds the storage locations.
	Namespace string
	// DefaultPeriod is the sync period of a location without spec.backupSyncPeriod
	// (--backup-sync-period); 0 turns their sync off.
	DefaultPeriod time.Duration
	Stores        stores.Stores
	Clock         clock.Clock
	Recorder      events.EventRecorder
	Gate          interface {
		Wait(ctx context.Context) error
	}
	// Catalog receives, per location, the committed names no backup of the cluster stands for.
	Catalog *backupsync.Catalog

	// reported holds, per location, what the last Warning event about skipped backups said,
	// so that a pass that finds the same problems again writes no event.
	reported sync.Map
}

// +kubebuilder:rbac:groups=cairn.dev,resources=backups,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=backups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=backupstoragelocations,verbs=get;list;watch,namespace=cairn-system
// +kubebuilder:rbac:groups=cairn.dev,resources=backupstoragelocations/status,verbs=get;update;patch,namespace=cairn-system
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// syncPass is what one pass over a location fetched.
type syncPass struct {
	bsl   *cairnv1.BackupStorageLocation
	store *location.Store
	// backups are the cluster's backups by namespace and name.
	backups map[types.NamespacedName]*cairnv1.Backup
	plan    backupsync.Plan
	now     time.Time

	mu sync.Mutex // guards the fields below, written by the pass's parallel writes
	// created counts the backups the pass made; skipped says why it made others not.
	created int
	skipped []string
}

func (p *syncPass) skip(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.skipped = append(p.skipped, fmt.Sprintf(format, args...))
}

func (p *syncPass) made() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.created++
}

// Reconcile syncs one location.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.Gate.Wait(ctx); err != nil {
		return ctrl.Result{}, err
	}
	var bsl cairnv1.BackupStorageLocation
	if err := r.Get(ctx, req.NamespacedName, &bsl); err != nil {
		if apierrors.IsNotFound(err) {
			r.Catalog.Forget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	period := syncPeriod(&bsl, r.DefaultPeriod)
	switch {
	case bsl.DeletionTimestamp != nil || period == 0:
		r.Catalog.Forget(bsl.Name)
		return ctrl.Result{}, nil
	case bsl.Status.Phase != cairnv1.StorageLocationPhaseAvailable:
		// Its becoming Available brings it back; until then the catalog keeps the last pass.
		return ctrl.Result{}, nil
	}
	pass, err := r.fetch(ctx, &bsl)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.Catalog.Set(bsl.Name, pass.plan.Unclaimed)
	if err := r.apply(ctx, pass); err != nil {
		r.report(pass)
		return ctrl.Result{}, err
	}
	r.report(pass)
	if err := r.recordSynced(ctx, pass); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: period}, nil
}

// syncPeriod is how often a location is synced: spec.backupSyncPeriod, or the manager's
// default; 0 means never.
func syncPeriod(bsl *cairnv1.BackupStorageLocation, defaultPeriod time.Duration) time.Duration {
	if bsl.Spec.BackupSyncPeriod != nil {
		return bsl.Spec.BackupSyncPeriod.Duration
	}
	return defaultPeriod
}

// fetch reads the cluster's backups and namespaces, then lists the location's committed
// backups (in that order: see backupsync.Input), and decides.
func (r *Reconciler) fetch(ctx context.Context, bsl *cairnv1.BackupStorageLocation) (*syncPass, error) {
	var backups cairnv1.BackupList
	if err := r.List(ctx, &backups); err != nil {
		return nil, err
	}
	var namespaces corev1.NamespaceList
	if err := r.List(ctx, &namespaces, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	pass := &syncPass{bsl: bsl, now: r.Clock.Now(), backups: make(map[types.NamespacedName]*cairnv1.Backup, len(backups.Items))}
	in := backupsync.Input{Location: bsl.Name, Backups: backups.Items}
	if bsl.Spec.Format == cairnv1.LocationFormatVelero {
		in.Rename = velerofmt.Rename
	}
	for i := range backups.Items {
		b := &backups.Items[i]
		pass.backups[client.ObjectKeyFromObject(b)] = b
	}
	for _, ns := range namespaces.Items {
		in.Namespaces = append(in.Namespaces, ns.Name)
	}
	err := r.Stores.Call(ctx, func(ctx context.Context) (err error) {
		if pass.store, err = r.Stores.Open(ctx, bsl); err != nil {
			return fmt.Errorf("opening storage location %s: %w", bsl.Name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The listing gets its own, longer timeout: it pages through every object of the location.
	// It is given the store itself, not the location.Store around it, so that it reaches the
	// provider's ListFunc.
	listCtx, cancel := r.Stores.Listing(ctx)
	defer cancel()
	if in.Committed, err = storage.ListCommitted(listCtx, pass.store.ObjectStore, pass.store.Layout); err != nil {
		if errors.Is(err, storage.ErrTooManyBackups) {
			r.Recorder.Eventf(bsl, nil, corev1.EventTypeWarning, "TooManyBackups", "Sync", "Not synced: %v", err)
		}
		return nil, err
	}
	pass.plan = backupsync.Decide(in)
	for _, c := range pass.plan.Invalid {
		pass.skip("%s/%s (%s)", c.Namespace, c.Name, backupsync.CheckName(c))
	}
	for _, c := range pass.plan.Conflicts {
		pass.skip("%s/%s (%s)", c.Stored.Namespace, c.Stored.Name, c.Message)
	}
	return pass, nil
}

// apply makes the pass's writes, syncParallelism at a time. A backup whose marker or object is
// refused is skipped and reported; any other failure (storage, the API server) ends the pass
// with that error, to be retried with backoff.
func (r *Reconciler) apply(ctx context.Context, pass *syncPass) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(syncParallelism)
	for _, c := range pass.plan.Create {
		g.Go(func() error { return r.create(gctx, pass, c) })
	}
	for _, key := range pass.plan.Complete {
		g.Go(func() error { return r.complete(gctx, pass, pass.backups[key]) })
	}
	for _, key := range pass.plan.MarkMissing {
		g.Go(func() error { return r.markData(gctx, pass, pass.backups[key], false) })
	}
	for _, key := range pass.plan.MarkFound {
		g.Go(func() error { return r.markData(gctx, pass, pass.backups[key], true) })
	}
	return g.Wait()
}

// readMarker reads a committed backup's marker within the storage timeout; ok is false when it
// is gone, is not a marker, or cannot be read (skipped and reported: one bad object — one the
// credentials may not read, say — never stops the pass). A storage call that times out, or a
// pass that ends, ends the pass: the storage service itself is in trouble.
func (r *Reconciler) readMarker(ctx context.Context, pass *syncPass, c storage.CommittedBackup) (m storage.BackupMetadata, ok bool, err error) {
	err = r.Stores.Call(ctx, func(ctx context.Context) (err error) {
		m, err = storage.ReadMetadata(ctx, pass.store, pass.store.Layout.Backup(c.Namespace, c.Name))
		return err
	})
	switch {
	case errors.Is(err, storage.ErrNotCommitted):
		return m, false, nil
	case err != nil && (ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		return m, false, fmt.Errorf("reading the commit marker of %s/%s in storage location %s: %w", c.Namespace, c.Name, pass.bsl.Name, err)
	case err != nil:
		pass.skip("%s/%s (%v)", c.Namespace, c.Name, err)
		return m, false, nil
	}
	return m, true, nil
}

// create makes the Backup object of a committed backup and writes its status: two writes.
// The marker is read now, after the cluster was listed, so that a backup deleted meanwhile
// (its marker goes first) is not made again.
func (r *Reconciler) create(ctx context.Context, pass *syncPass, c storage.CommittedBackup) error {
	m, ok, err := r.readMarker(ctx, pass, c)
	if err != nil || !ok {
		return err
	}
	b, err := backupsync.Object(c, m, pass.bsl.Name, r.Namespace)
	if err != nil {
		pass.skip("%s/%s (%v)", c.Namespace, c.Name, err)
		return nil
	}
	if pass.store.Velero {
		veleroOrigin(b, pass.plan.Renamed, m.UID)
	}
	status, err := backupsync.Status(m, pass.bsl.Name, 1, pass.now)
	if err != nil {
		pass.skip("%s/%s (%v)", c.Namespace, c.Name, err)
		return nil
	}
	switch err := r.Create(ctx, b); {
	case apierrors.IsAlreadyExists(err):
		return nil // made meanwhile (by this cluster, or a pass of another location)
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsNotFound(err):
		// A spec or labels the API server refuses, a namespace being deleted.
		pass.skip("%s/%s (%v)", c.Namespace, c.Name, err)
		return nil
	case err != nil:
		return fmt.Errorf("creating backup %s/%s: %w", c.Namespace, c.Name, err)
	}
	pass.made()
	status.Conditions[0].ObservedGeneration = b.Generation
	return r.writeStatus(ctx, pass, b, status)
}

// veleroOrigin annotates a Backup made from a Velero backup with the Velero backup's name (its
// own, or the one it was renamed from) and UID.
func veleroOrigin(b *cairnv1.Backup, renamed map[types.NamespacedName]string, uid string) {
	name := b.Name
	if from, ok := renamed[client.ObjectKeyFromObject(b)]; ok {
		name = from
	}
	b.Annotations[cairnv1.VeleroBackupNameAnnotation] = name
	if uid != "" {
		b.Annotations[cairnv1.VeleroBackupUIDAnnotation] = uid
	}
}

// writeStatus writes a synced backup's terminal status. One the API server refuses (a marker
// Cairn did not write) ends the backup in FailedValidation with its message, and the pass goes
// on.
func (r *Reconciler) writeStatus(ctx context.Context, pass *syncPass, b *cairnv1.Backup, status cairnv1.BackupStatus) error {
	old := b.Status.DeepCopy()
	err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerSync, b, func(s *cairnv1.BackupStatus) { *s = status })
	if err != nil {
		b.Status = *old // as the API server still has it, for the next write's patch
	}
	if apierrors.IsInvalid(err) {
		pass.skip("%s/%s (%v)", b.Namespace, b.Name, err)
		return r.refuse(ctx, pass, b, err)
	}
	return client.IgnoreNotFound(err)
}

// refuse ends a synced backup that cannot be shown as its marker says in FailedValidation.
func (r *Reconciler) refuse(ctx context.Context, pass *syncPass, b *cairnv1.Backup, problem error) error {
	now := metav1.NewTime(pass.now)
	message := fmt.Sprintf("cannot be synced from storage location %s: %v", pass.bsl.Name, problem)
	return client.IgnoreNotFound(lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerSync, b, func(s *cairnv1.BackupStatus) {
		*s = cairnv1.BackupStatus{
			Phase:               cairnv1.BackupPhaseFailedValidation,
			StorageLocation:     pass.bsl.Name,
			ValidationErrors:    validation.Cap([]string{message}),
			CompletionTimestamp: &now,
		}
	}))
}

// complete writes the status of a synced backup still in phase "" (its status write failed,
// or the manager stopped, after it was made; or it was made by hand): terminal from its
// marker, or FailedValidation when the marker is gone or refused.
func (r *Reconciler) complete(ctx context.Context, pass *syncPass, b *cairnv1.Backup) error {
	c := storage.CommittedBackup{Namespace: b.Namespace, Name: b.Name}
	m, ok, err := r.readMarker(ctx, pass, c)
	if err != nil {
		return err
	}
	var status cairnv1.BackupStatus
	var problem error
	if !ok {
		problem = fmt.Errorf("storage location %s holds no committed backup named %s/%s", pass.bsl.Name, b.Namespace, b.Name)
	} else if _, problem = backupsync.Object(c, m, pass.bsl.Name, r.Namespace); problem == nil {
		// A Backup made by hand to be synced keeps the spec it was made with (spec is
		// immutable): one a team could not have run is refused, not shown as completed.
		if errs := validation.Tenancy("backup", b.Namespace, b.Spec.Filters(), r.Namespace); len(errs) > 0 {
			problem = fmt.Errorf("its spec is not one a backup in namespace %s may have: %s", b.Namespace, strings.Join(errs, "; "))
		}
	}
	if problem == nil {
		status, problem = backupsync.Status(m, pass.bsl.Name, b.Generation, pass.now)
	}
	if problem != nil {
		return r.refuse(ctx, pass, b, problem)
	}
	return r.writeStatus(ctx, pass, b, status)
}

// markData sets a backup's DataAvailable condition: False, with a Warning event, when its
// marker is gone; True when it is back.
func (r *Reconciler) markData(ctx context.Context, pass *syncPass, b *cairnv1.Backup, found bool) error {
	cond := backupsync.DataCondition(found, pass.bsl.Name, b.Generation, pass.now)
	if err := lifecycle.PatchBackupStatus(ctx, r.Client, r.Clock, phases.OwnerSync, b, func(s *cairnv1.BackupStatus) {
		meta.SetStatusCondition(&s.Conditions, cond)
	}); err != nil {
		return client.IgnoreNotFound(err)
	}
	if found {
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "DataFound", "Sync", "The backup's data is in storage location %s again", pass.bsl.Name)
	} else {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, cairnv1.ReasonNotFoundInStorage, "Sync", cond.Message)
	}
	return nil
}

// report sends the location's events of a pass: how many backups it made, and (only when it
// differs from the last report) which namespaces are missing and which backups were skipped.
func (r *Reconciler) report(pass *syncPass) {
	if pass.created > 0 {
		r.Recorder.Eventf(pass.bsl, nil, corev1.EventTypeNormal, "Synced", "Sync", "Made %d Backup objects from the committed backups in storage", pass.created)
	}
	var problems []string
	if ns := pass.plan.MissingNamespaces; len(ns) > 0 {
		problems = append(problems, fmt.Sprintf("backups of namespaces that do not exist were skipped: %s", listSome(ns)))
	}
	if len(pass.skipped) > 0 {
		skipped := slices.Sorted(slices.Values(pass.skipped))
		problems = append(problems, fmt.Sprintf("committed backups that cannot be synced were skipped: %s", listSome(skipped)))
	}
	message := strings.Join(problems, "; ")
	if last, _ := r.reported.Load(pass.bsl.Name); last == message {
		return
	}
	r.reported.Store(pass.bsl.Name, message)
	if message != "" {
		r.Recorder.Eventf(pass.bsl, nil, corev1.EventTypeWarning, "SyncSkipped", "Sync", "%s", capMessage(message))
	}
}

// listSome joins the first few of items, saying how many more there are.
func listSome(items []string) string {
	if len(items) <= syncReportLimit {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:syncReportLimit], ", "), len(items)-syncReportLimit)
}

// capMessage bounds an event's note, which the API server limits to 1 kB.
func capMessage(s string) string {
	const limit = 1000
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}

// recordSynced writes the location's status.lastSyncedTime when the pass changed something,
// or when the stored time is older than lastSyncedRefresh.
func (r *Reconciler) recordSynced(ctx context.Context, pass *syncPass) error {
	last := pass.bsl.Status.LastSyncedTime
	if !pass.plan.Changed() && last != nil && pass.now.Sub(last.Time) < lastSyncedRefresh {
		return nil
	}
	now := metav1.NewTime(pass.now)
	bsl := pass.bsl
	// The storage location reconciler writes the rest of this status: a conflict with it is
	// retried on the fresh object, never by overwriting its write.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if bsl == nil {
			bsl = &cairnv1.BackupStorageLocation{}
			if err := r.Get(ctx, client.ObjectKeyFromObject(pass.bsl), bsl); err != nil {
				return err
			}
		}
		old := bsl.DeepCopy()
		bsl.Status.LastSyncedTime = &now
		err := r.Status().Patch(ctx, bsl, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
		bsl = nil
		return err
	})
	return client.IgnoreNotFound(err)
}

// SetupWithManager registers the reconciler for locations: created, changed (such as their
// backupSyncPeriod), or becoming Available.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Catalog == nil {
		r.Catalog = &backupsync.Catalog{}
	}
	trigger := predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*cairnv1.BackupStorageLocation)
			cur, ok2 := e.ObjectNew.(*cairnv1.BackupStorageLocation)
			return ok1 && ok2 && (old.Generation != cur.Generation ||
				(old.Status.Phase != cairnv1.StorageLocationPhaseAvailable && cur.Status.Phase == cairnv1.StorageLocationPhaseAvailable))
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return lifecycle.Register("sync", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.BackupStorageLocation{}, builder.WithPredicates(trigger)).
		// Locations are synced side by side: one whose storage hangs holds only its own pass.
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 2, RateLimiter: lifecycle.StorageRateLimiter()}),
		r)
}
