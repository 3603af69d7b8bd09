// Package controller holds Cairn's reconcilers. Each one owns the Backup phases named in its
// doc comment (DESIGN.md section 1, docs/architecture.md) and acts on no others; they never
// call each other and coordinate only through status.phase.
package controller

// The manager reads the requester admission policies and their bindings
// (internal/requester.PoliciesInstalled) to know whether the cairn.dev/requester annotations can
// be trusted; list and watch for a cached client.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingadmissionpolicies;mutatingadmissionpolicybindings;validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list;watch

import (
	"context"
	"fmt"
	"slices"
	"time"

	signing "github.com/cairn-backup/cairn/internal/download"
	"github.com/cairn-backup/cairn/internal/podvolume"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/backupsync"
	backupcontroller "github.com/cairn-backup/cairn/internal/controller/backup"
	synccontroller "github.com/cairn-backup/cairn/internal/controller/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/chartobjects"
	"github.com/cairn-backup/cairn/internal/controller/deletion"
	"github.com/cairn-backup/cairn/internal/controller/download"
	"github.com/cairn-backup/cairn/internal/controller/expiry"
	"github.com/cairn-backup/cairn/internal/controller/finalizer"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/operations"
	"github.com/cairn-backup/cairn/internal/controller/queue"
	"github.com/cairn-backup/cairn/internal/controller/readiness"
	"github.com/cairn-backup/cairn/internal/controller/repositories"
	restorecontroller "github.com/cairn-backup/cairn/internal/controller/restore"
	"github.com/cairn-backup/cairn/internal/controller/schedule"
	"github.com/cairn-backup/cairn/internal/controller/storagelocation"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/hooks"
	"github.com/cairn-backup/cairn/internal/metrics"
	"github.com/cairn-backup/cairn/internal/requester"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

// The defaults of Config's durations that belong to the queue and the backup reconciler.
const (
	// DefaultQueueResyncPeriod is how often the queue is reconciled without any event.
	DefaultQueueResyncPeriod = queue.DefaultResyncPeriod
	// DefaultProgressInterval is how often a running backup's progress is written, at most.
	DefaultProgressInterval = backup.DefaultProgressInterval
)

// Config is what the reconcilers need from the manager's flags.
type Config struct {
	// Namespace is the operator's namespace: it holds the storage locations and the
	// administrators' backups.
	Namespace string
	// ConcurrentBackups is how many backups may be ReadyToStart or InProgress at once.
	ConcurrentBackups int
	// ItemBlockWorkerCount is the size of each running backup's own worker pool.
	ItemBlockWorkerCount int
	// QueueResyncPeriod is how often the queue is reconciled without any event; 0 means
	// DefaultQueueResyncPeriod.
	QueueResyncPeriod time.Duration
	// Clock is the time source of every reconciler; nil means the real clock.
	Clock clock.Clock
	// Controllers names the reconcilers to run ("queue" (backups and restores), "backup",
	// "operations", "finalizer", "deletion", "restore", "restoreoperations", "restorefinalizer",
	// "cancelwarning", "restorecancelwarning", "schedule", "storagelocation", "gc", "sync",
	// "downloadrequest", "readiness" (the kstatus conditions of every kind), "phaseevents" (an
	// Event and the metrics counters on every phase change), "chartobjects" (with ChartObjects));
	// empty means all of them.
	// Tests use it to play a reconciler's part.
	Controllers []string
	// ItemOperationSyncFrequency is how often unfinished async operations are polled; 0 means
	// operations.DefaultSyncFrequency.
	ItemOperationSyncFrequency time.Duration
	// ProgressInterval is how often a running backup's progress is written, at most; 0 means
	// DefaultProgressInterval.
	ProgressInterval time.Duration
	// Actions are BackupItemActions registered in-process after the built-in ones.
	Actions []backup.BackupItemAction
	// OnWorkerPool, when set, is told when a backup's worker pool starts (+n) and stops (-n).
	OnWorkerPool func(backup string, delta int)
	// WrapStore, when set, wraps the object store of every location the reconcilers open (tests
	// inject faults with it).
	WrapStore func(*cairnv1.BackupStorageLocation, storage.ObjectStore) storage.ObjectStore
	// StorageTimeout bounds small storage calls (DefaultStorageTimeout when 0).
	StorageTimeout time.Duration
	// RetryBackoffMin and RetryBackoffMax bound the backoff between attempts to remove a
	// backup's data (deletion, cleanup of a cancelled backup); 0 means the defaults (10s, 1m).
	RetryBackoffMin, RetryBackoffMax time.Duration
	// PhaseTimeout is how long a backup may stay in one non-terminal phase that cannot move on
	// before its owner ends it with the last error; 0 means lifecycle.DefaultPhaseTimeout.
	PhaseTimeout time.Duration
	// ConcurrentRestores is how many restores may be ReadyToStart or InProgress at once; 0 means 1.
	ConcurrentRestores int
	// RestoreWorkerCount is the size of each running restore's own worker pool; 0 means
	// restore.DefaultWorkers.
	RestoreWorkerCount int
	// RestorePriorities order the resources a restore creates after CRDs; nil means
	// restore.DefaultPriorities.
	RestorePriorities []string
	// RestoreScratchDir holds the restores' unpacked archives; "" means the system's temporary
	// directory.
	RestoreScratchDir string
	// RestoreActions are RestoreItemActions registered in-process after the built-in ones.
	RestoreActions []restore.Action
	// RestoreNamespaceTimeout bounds how long a restore waits for a terminating target
	// namespace; 0 means restore.DefaultNamespaceTimeout.
	RestoreNamespaceTimeout time.Duration
	// DefaultBackupTTL is how long a backup without spec.ttl is kept (--default-backup-ttl); 0
	// means cairnv1.DefaultBackupTTL.
	DefaultBackupTTL time.Duration
	// BackupSyncPeriod is how often a location without spec.backupSyncPeriod is synced from
	// storage (--backup-sync-period): 0 never; nil means the sync reconciler's DefaultPeriod.
	BackupSyncPeriod *time.Duration
	// DownloadBindAddress is where the download server for filesystem locations listens
	// (--download-bind-address); "" or "0" runs none.
	DownloadBindAddress string
	// DownloadURLBase is how clients reach the download server (--download-url-base); ""
	// means http://<the bound address>.
	DownloadURLBase string
	// DownloadSigningKey signs the download server's URLs (--download-signing-key-file); nil
	// means a random key of this process.
	DownloadSigningKey []byte
	// DownloadRequestTTL is how long a download URL works; 0 means download.DefaultRequestTTL.
	DownloadRequestTTL time.Duration
	// ChartObjects names the ConfigMap of the chart's storage locations and schedules, in
	// Namespace (--chart-objects); "" means none.
	ChartObjects string
	// MaxArchiveEntrySize is the largest archive entry the manager reads
	// (--max-archive-entry-size); 0 means archive.DefaultMaxEntrySize.
	MaxArchiveEntrySize int64
	// ActAsRequesterEverywhere applies the requester rule (DESIGN.md section 15) in Namespace
	// too (--act-as-requester=all-namespaces); by default the operator carries out the objects
	// there with its own rights.
	ActAsRequesterEverywhere bool
	// VolumeData configures the copies of pod volume data (DESIGN.md section 16).
	VolumeData VolumeDataConfig
	// Hooks configures backup hooks (DESIGN.md section 17).
	Hooks HooksConfig
	// RecoverySteps run once, in order, when this manager starts leading and before any
	// reconciler handles a backup (DESIGN.md section 7).
	RecoverySteps []lifecycle.RecoveryStep
}

// namedReconciler is a reconciler and its name in Config.Controllers.
type namedReconciler struct {
	name string
	r    interface{ SetupWithManager(ctrl.Manager) error }
}

// SetupWithManager registers the startup recovery and every reconciler with mgr.
func SetupWithManager(mgr ctrl.Manager, cfg Config) error {
	if err := cfg.complete(); err != nil {
		return err
	}
	w, err := wire(mgr, cfg)
	if err != nil {
		return err
	}
	// The gauges are computed from the cache at every scrape, on every replica.
	metrics.SetSource(metrics.Source{Reader: mgr.GetCache(), Namespace: cfg.Namespace})
	for _, rc := range slices.Concat(w.backupOwners(), w.restoreOwners(), w.otherOwners()) {
		if len(cfg.Controllers) > 0 && !slices.Contains(cfg.Controllers, rc.name) {
			continue
		}
		if err := rc.r.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the %s reconciler: %w", rc.name, err)
		}
	}
	return nil
}

// complete checks cfg and fills in the defaults of what it leaves unset.
func (cfg *Config) complete() error {
	if cfg.ConcurrentBackups < 1 {
		return fmt.Errorf("concurrent backups must be at least 1, got %d", cfg.ConcurrentBackups)
	}
	if cfg.ItemBlockWorkerCount < 1 {
		return fmt.Errorf("item block worker count must be at least 1, got %d", cfg.ItemBlockWorkerCount)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.ItemOperationSyncFrequency <= 0 {
		cfg.ItemOperationSyncFrequency = operations.DefaultSyncFrequency
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if cfg.PhaseTimeout <= 0 {
		cfg.PhaseTimeout = lifecycle.DefaultPhaseTimeout
	}
	if cfg.DefaultBackupTTL <= 0 {
		cfg.DefaultBackupTTL = cairnv1.DefaultBackupTTL
	}
	if cfg.QueueResyncPeriod <= 0 {
		cfg.QueueResyncPeriod = DefaultQueueResyncPeriod
	}
	return nil
}

// wiring is what the reconcilers are handed, made once: the clients, the domain runners, and
// the few things that more than one owner is given on purpose (each named where it is made).
type wiring struct {
	mgr            ctrl.Manager
	cfg            Config
	dyn            dynamic.Interface
	disco          *discovery.DiscoveryClient
	stores         stores.Stores
	recovery       *lifecycle.StartupRecovery
	chartObjects   *chartobjects.Reconciler
	requesters     *requester.Resolver
	runner         *backup.Runner
	registry       *backup.Registry
	restoreRunner  *restore.Runner
	restoreActions *restore.Actions
	// logs are the cancelled runs whose log upload is in flight: the backup reconciler holds
	// them, the finalizer waits for them before it appends to that log (finalizer.LogUploads).
	logs *lifecycle.LogUploads
	// restoreFiles are the cancelled restores whose run stores its files after its
	// FinalizingCancelled write: the restore reconciler holds them, the restore finalizer ends
	// such a restore once they are stored (lifecycle.FileStores).
	restoreFiles *lifecycle.FileStores
	// heldOps are the operations of restores that have no location for their files: handed
	// over from the restore reconciler to the restore operations reconciler (operations.Held).
	heldOps *operations.Held
	// catalog holds the names committed in each location that no backup of the cluster stands
	// for: the sync writes them, the queue checks new backups against them.
	catalog      *backupsync.Catalog
	signer       *signing.Signer
	downloadBase string
	// passwords, repositories and leftovers are volume data's (volumedata.go): the backup
	// action makes passwords; the finalizer's cleanup and the deletion remove leftovers.
	passwords    *podvolume.Passwords
	repositories *repositories.Service
	leftovers    lifecycle.Leftovers
}

// wire makes what the reconcilers share and adds the startup recovery and the download server
// to mgr.
func wire(mgr ctrl.Manager, cfg Config) (*wiring, error) {
	w := &wiring{mgr: mgr, cfg: cfg}
	var err error
	if w.dyn, err = dynamic.NewForConfig(mgr.GetConfig()); err != nil {
		return nil, fmt.Errorf("creating the dynamic client: %w", err)
	}
	if w.disco, err = discovery.NewDiscoveryClientForConfig(mgr.GetConfig()); err != nil {
		return nil, fmt.Errorf("creating the discovery client: %w", err)
	}
	w.stores = stores.Stores{Client: mgr.GetClient(), Namespace: cfg.Namespace, Wrap: cfg.WrapStore, Timeout: cfg.StorageTimeout}
	steps := []lifecycle.RecoveryStep{
		lifecycle.EndInterruptedRuns(mgr.GetClient(), cfg.Clock, lifecycle.Backups),
		lifecycle.EndInterruptedRuns(mgr.GetClient(), cfg.Clock, lifecycle.Restores),
	}
	if cfg.ChartObjects != "" && (len(cfg.Controllers) == 0 || slices.Contains(cfg.Controllers, "chartobjects")) {
		w.chartObjects = &chartobjects.Reconciler{
			Client:    mgr.GetClient(),
			Namespace: cfg.Namespace,
			ConfigMap: cfg.ChartObjects,
			Recorder:  mgr.GetEventRecorder("cairn-chart"),
		}
		steps = append(steps, w.chartObjects.RecoveryStep())
	}
	w.recovery = lifecycle.NewStartupRecovery(append(steps, cfg.RecoverySteps...)...)
	if w.chartObjects != nil {
		w.chartObjects.Gate = w.recovery
	}
	if err := mgr.Add(w.recovery); err != nil {
		return nil, fmt.Errorf("adding the startup recovery: %w", err)
	}
	if err := w.volumeData(mgr); err != nil {
		return nil, err
	}
	// Whom each backup, restore and download acts for (DESIGN.md section 15): the requester
	// the admission policies recorded, trusted only while those policies are installed.
	w.requesters = &requester.Resolver{
		Client: mgr.GetClient(), Config: mgr.GetConfig(), OperatorNamespace: cfg.Namespace, Everywhere: cfg.ActAsRequesterEverywhere,
		Parse: requester.From,
		Trust: func(ctx context.Context) (string, error) { return requester.PoliciesInstalled(ctx, mgr.GetAPIReader()) },
		Clock: cfg.Clock,
	}
	hookRunner, err := w.hooks(mgr)
	if err != nil {
		return nil, err
	}
	// A pod's actions run in this order: its pre hooks, then its volume copies start, then its
	// post hooks (at once, or as an operation that waits for those copies).
	actions := append([]backup.BackupItemAction{
		backup.CSISnapshotAction{Dynamic: w.dyn},
		hooks.PreAction{Runner: hookRunner},
		podvolume.BackupAction{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: cfg.Namespace, Repositories: w.repositories},
		hooks.PostAction{Runner: hookRunner, Reader: mgr.GetAPIReader(), Namespace: cfg.Namespace},
	}, cfg.Actions...)
	w.registry = backup.NewRegistry(nil, actions...)
	w.runner = &backup.Runner{Dynamic: w.dyn, Raw: w.disco.RESTClient(), Discovery: w.disco, Workers: cfg.ItemBlockWorkerCount,
		ExtraActions: actions, OnWorkerPool: cfg.OnWorkerPool, Clock: cfg.Clock, StorageTimeout: cfg.StorageTimeout,
		ProgressInterval: cfg.ProgressInterval}
	w.logs = &lifecycle.LogUploads{}
	w.restoreFiles = &lifecycle.FileStores{}
	// A restored pod gets its volume restores, the restore helper and its init hooks, then its
	// exec hooks' operation, which waits for it to run.
	w.restoreActions = restore.NewActions(append([]restore.Action{
		restore.CSIRestoreAction{Dynamic: w.dyn},
		podvolume.RestoreAction{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: cfg.Namespace,
			HelperImage: cfg.VolumeData.RestoreHelperImage, Repositories: w.repositories},
		hooks.RestoreExecAction{Runner: hookRunner},
	}, cfg.RestoreActions...)...)
	w.heldOps = &operations.Held{}
	w.restoreRunner = &restore.Runner{Dynamic: w.dyn, Discovery: w.disco, Workers: cfg.RestoreWorkerCount, Priorities: cfg.RestorePriorities, Actions: w.restoreActions,
		Clock: cfg.Clock, ProgressInterval: cfg.ProgressInterval, StorageTimeout: cfg.StorageTimeout, ScratchDir: cfg.RestoreScratchDir,
		NamespaceTimeout: cfg.RestoreNamespaceTimeout, MaxEntrySize: cfg.MaxArchiveEntrySize}
	w.catalog = &backupsync.Catalog{}
	if w.signer, w.downloadBase, err = download.StartServer(mgr, cfg.DownloadBindAddress, cfg.DownloadURLBase, cfg.DownloadSigningKey, cfg.Clock, w.stores); err != nil {
		return nil, err
	}
	return w, nil
}

// backupOwners are the owners of a backup's phases, in the order a backup meets them.
func (w *wiring) backupOwners() []namedReconciler {
	// One operations reconciler, with each kind's adapter, set up under each kind's name.
	ops := &operations.Reconciler[*cairnv1.Backup, cairnv1.BackupPhase]{
		Client:        w.mgr.GetClient(),
		Stores:        w.stores,
		Clock:         w.cfg.Clock,
		Recorder:      w.mgr.GetEventRecorder("cairn-operations"),
		Gate:          w.recovery,
		SyncFrequency: w.cfg.ItemOperationSyncFrequency,
		PhaseTimeout:  w.cfg.PhaseTimeout,
		Kind:          operations.Backups(w.registry),
		WakeOn:        []operations.WakeOn{{Object: &cairnv1.PodVolumeBackup{}, Owner: podvolume.BackupOf}},
	}
	return []namedReconciler{
		{"queue", &queue.Reconciler{
			Client:             w.mgr.GetClient(),
			Namespace:          w.cfg.Namespace,
			ConcurrentBackups:  w.cfg.ConcurrentBackups,
			ConcurrentRestores: w.cfg.ConcurrentRestores,
			ResyncPeriod:       w.cfg.QueueResyncPeriod,
			Clock:              w.cfg.Clock,
			Recorder:           w.mgr.GetEventRecorder("cairn-queue"),
			Gate:               w.recovery,
			Catalog:            w.catalog,
			RestoreAccess:      queue.RestoreAccess(w.mgr.GetClient(), w.cfg.Namespace, w.requesters),
			Requesters:         w.requesters,
			RemovingData:       deletion.RemovingData,
			DefaultBackupTTL:   w.cfg.DefaultBackupTTL,
		}},
		{"backup", &backupcontroller.Reconciler{
			Requesters:        w.requesters,
			Client:            w.mgr.GetClient(),
			APIReader:         w.mgr.GetAPIReader(),
			Namespace:         w.cfg.Namespace,
			Runner:            w.runner,
			Stores:            w.stores,
			Clock:             w.cfg.Clock,
			Recorder:          w.mgr.GetEventRecorder("cairn-backup"),
			Gate:              w.recovery,
			ConcurrentBackups: w.cfg.ConcurrentBackups,
			PhaseTimeout:      w.cfg.PhaseTimeout,
			DefaultBackupTTL:  w.cfg.DefaultBackupTTL,
			Logs:              w.logs,
		}},
		{ops.Name(), ops},
		{"finalizer", &finalizer.BackupReconciler{
			Client:            w.mgr.GetClient(),
			Namespace:         w.cfg.Namespace,
			Runner:            w.runner,
			Discovery:         w.disco,
			Leftovers:         w.leftovers,
			APIReader:         w.mgr.GetAPIReader(),
			Stores:            w.stores,
			Clock:             w.cfg.Clock,
			Recorder:          w.mgr.GetEventRecorder("cairn-finalizer"),
			Gate:              w.recovery,
			CleanupBackoffMin: w.cfg.RetryBackoffMin,
			CleanupBackoffMax: w.cfg.RetryBackoffMax,
			PhaseTimeout:      w.cfg.PhaseTimeout,
			Logs:              w.logs,

			MaxArchiveEntrySize: w.cfg.MaxArchiveEntrySize,
		}},
		{"deletion", &deletion.Reconciler{
			Client:     w.mgr.GetClient(),
			Leftovers:  w.leftovers,
			Stores:     w.stores,
			Clock:      w.cfg.Clock,
			Recorder:   w.mgr.GetEventRecorder("cairn-deletion"),
			Gate:       w.recovery,
			BackoffMin: w.cfg.RetryBackoffMin,
			BackoffMax: w.cfg.RetryBackoffMax,
		}},
	}
}

// restoreOwners are the owners of a restore's phases after the queue, in the order a restore
// meets them.
func (w *wiring) restoreOwners() []namedReconciler {
	ops := &operations.Reconciler[*cairnv1.Restore, cairnv1.RestorePhase]{
		Client:        w.mgr.GetClient(),
		Stores:        w.stores,
		Clock:         w.cfg.Clock,
		Recorder:      w.mgr.GetEventRecorder("cairn-restore-operations"),
		Gate:          w.recovery,
		SyncFrequency: w.cfg.ItemOperationSyncFrequency,
		PhaseTimeout:  w.cfg.PhaseTimeout,
		Kind:          operations.Restores(w.restoreActions, w.heldOps),
		WakeOn:        []operations.WakeOn{{Object: &cairnv1.PodVolumeRestore{}, Owner: podvolume.RestoreOf}},
	}
	return []namedReconciler{
		{"restore", &restorecontroller.Reconciler{
			Requesters:         w.requesters,
			Client:             w.mgr.GetClient(),
			APIReader:          w.mgr.GetAPIReader(),
			Namespace:          w.cfg.Namespace,
			Runner:             w.restoreRunner,
			Stores:             w.stores,
			Clock:              w.cfg.Clock,
			Recorder:           w.mgr.GetEventRecorder("cairn-restore"),
			Gate:               w.recovery,
			ConcurrentRestores: w.cfg.ConcurrentRestores,
			PhaseTimeout:       w.cfg.PhaseTimeout,
			Operations:         w.heldOps,
			Files:              w.restoreFiles,
		}},
		{ops.Name(), ops},
		{"restorefinalizer", &finalizer.RestoreReconciler{
			Client:    w.mgr.GetClient(),
			Namespace: w.cfg.Namespace,
			Stores:    w.stores,
			Clock:     w.cfg.Clock,
			Recorder:  w.mgr.GetEventRecorder("cairn-restore-finalizer"),
			Gate:      w.recovery,
			Files:     w.restoreFiles,
		}},
	}
}

// otherOwners own no backup or restore phase past the queue: the other kinds, the conditions,
// events and warnings of every kind, expiry and the sync from storage.
func (w *wiring) otherOwners() []namedReconciler {
	backupCancelWarning, restoreCancelWarning := readiness.NewCancelWarningReconcilers(w.mgr.GetClient(), w.mgr.GetEventRecorder("cairn-cancel"))
	syncPeriod := synccontroller.DefaultPeriod
	if w.cfg.BackupSyncPeriod != nil {
		syncPeriod = *w.cfg.BackupSyncPeriod
	}
	owners := []namedReconciler{
		{backupCancelWarning.Name, backupCancelWarning},
		{restoreCancelWarning.Name, restoreCancelWarning},
		{"schedule", &schedule.Reconciler{
			Requesters:       w.requesters,
			Client:           w.mgr.GetClient(),
			Namespace:        w.cfg.Namespace,
			Clock:            w.cfg.Clock,
			Recorder:         w.mgr.GetEventRecorder("cairn-schedule"),
			APIReader:        w.mgr.GetAPIReader(),
			DefaultBackupTTL: w.cfg.DefaultBackupTTL,
		}},
		{"storagelocation", &storagelocation.Reconciler{
			Client:    w.mgr.GetClient(),
			Namespace: w.cfg.Namespace,
			Stores:    w.stores,
			Clock:     w.cfg.Clock,
			Recorder:  w.mgr.GetEventRecorder("cairn-storage-location"),
		}},
		{"gc", &expiry.Reconciler{
			Client:    w.mgr.GetClient(),
			Namespace: w.cfg.Namespace,
			Clock:     w.cfg.Clock,
			Recorder:  w.mgr.GetEventRecorder("cairn-gc"),
			Gate:      w.recovery,
		}},
		{"sync", &synccontroller.Reconciler{
			Client:        w.mgr.GetClient(),
			Namespace:     w.cfg.Namespace,
			DefaultPeriod: syncPeriod,
			Stores:        w.stores,
			Clock:         w.cfg.Clock,
			Recorder:      w.mgr.GetEventRecorder("cairn-sync"),
			Gate:          w.recovery,
			Catalog:       w.catalog,
		}},
		{"downloadrequest", &download.Reconciler{
			Requesters:   w.requesters,
			Client:       w.mgr.GetClient(),
			Namespace:    w.cfg.Namespace,
			Clock:        w.cfg.Clock,
			Signer:       w.signer,
			DownloadBase: w.downloadBase,
			TTL:          w.cfg.DownloadRequestTTL,
			Stores:       w.stores,
		}},
		{"readiness", readiness.NewReconcilers(w.mgr.GetClient(), w.cfg.Clock)},
		{"phaseevents", &readiness.PhaseWatcher{Recorder: w.mgr.GetEventRecorder("cairn-phase")}},
	}
	if w.chartObjects != nil {
		owners = append(owners, namedReconciler{"chartobjects", w.chartObjects})
	}
	return owners
}

// CacheOptions limits the manager's cache to what Cairn reads: storage locations and Secrets
// only in the operator's namespace (never every Secret of the cluster), Backups everywhere
// (teams create them in their own namespaces).
func CacheOptions(namespace string) cache.Options {
	only := map[string]cache.Config{namespace: {}}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}:                 {Namespaces: only},
		&corev1.ConfigMap{}:              {Namespaces: only},
		&cairnv1.BackupStorageLocation{}: {Namespaces: only},
		&cairnv1.PodVolumeBackup{}:       {Namespaces: only},
		&cairnv1.PodVolumeRestore{}:      {Namespaces: only},
	}}
}
