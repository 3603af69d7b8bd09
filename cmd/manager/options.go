package main

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/controller/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/operations"
	"github.com/cairn-backup/cairn/internal/controller/repositories"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/hooks"
	"github.com/cairn-backup/cairn/internal/restore"
)

// The values of --act-as-requester (DESIGN.md section 15).
const (
	actAsRequesterTeams      = "team-namespaces"
	actAsRequesterEverywhere = "all-namespaces"
)

// options are the manager's command-line settings.
type options struct {
	namespace            string
	concurrentBackups    int
	itemBlockWorkerCount int
	kubeconfig           string
	metricsAddr          string
	probeAddr            string
	pprofAddr            string
	leaderElect          bool
	queueResyncPeriod    time.Duration
	operationSync        time.Duration
	backoffMin           time.Duration
	storageTimeout       time.Duration
	backoffMax           time.Duration
	phaseTimeout         time.Duration
	concurrentRestores   int
	restoreWorkerCount   int
	restorePriorities    string
	restoreNamespaceWait time.Duration
	restoreScratchDir    string
	defaultBackupTTL     time.Duration
	backupSyncPeriod     time.Duration
	downloadAddr         string
	downloadURLBase      string
	downloadKeyFile      string
	chartObjects         string
	actAsRequester       string
	maxEntrySize         string
	repositoryAddr       string
	nodeAgentSA          string
	repositoryTLSSecret  string
	repositoryService    string
	passwordSecret       string
	maintenanceInterval  time.Duration
	maintenanceTimeout   time.Duration
	restoreHelperImage   string
	hooksEnabled         bool
	defaultHookTimeout   time.Duration
	// maxEntryBytes is maxEntrySize, parsed.
	maxEntryBytes int64
	// priorities is restorePriorities, parsed.
	priorities []string
	zap        zap.Options
}

// newFlagSet returns the manager's flags, bound to o, with their defaults.
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("cairn-manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.namespace, "namespace", "cairn-system",
		"Namespace of the operator: it holds the storage locations and the administrators' backups.")
	fs.IntVar(&o.concurrentBackups, "concurrent-backups", 1,
		"How many backups may be ReadyToStart or InProgress at once (at least 1).")
	fs.IntVar(&o.itemBlockWorkerCount, "item-block-worker-count", 4,
		"Goroutines in each running backup's own worker pool (at least 1).")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "",
		"Path to a kubeconfig. Empty: $KUBECONFIG, the in-cluster config, or ~/.kube/config.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080",
		"Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081",
		"Address of the /healthz and /readyz endpoints; 0 disables them.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0",
		"Address of Go's profiling endpoints (/debug/pprof/), such as 127.0.0.1:6060, for measuring the manager (docs/benchmarks.md); 0 disables them. They answer anyone who reaches them: bind them to a local address only.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Elect a leader so that only one manager replica reconciles at a time.")
	fs.DurationVar(&o.queueResyncPeriod, "queue-resync-period", controller.DefaultQueueResyncPeriod,
		"How often the backup queue is reconciled without any event (a safety net; hand-offs are event-driven).")
	fs.DurationVar(&o.operationSync, "item-operation-sync-frequency", operations.DefaultSyncFrequency,
		"How often unfinished async plugin operations (such as volume snapshots) are polled.")
	fs.DurationVar(&o.storageTimeout, "storage-timeout", stores.DefaultStorageTimeout,
		"How long a small storage call (a log, the metadata, a listing, a deletion) may take before it fails and is retried; a hung storage service cannot hold a reconciler longer.")
	fs.DurationVar(&o.backoffMin, "retry-backoff-min", lifecycle.DefaultRetryBackoffMin,
		"The first wait before a failed removal of a backup's data (a deletion, or the cleanup of a cancelled backup) is tried again; it doubles with each failure.")
	fs.DurationVar(&o.backoffMax, "retry-backoff-max", lifecycle.DefaultRetryBackoffMax,
		"The longest wait between attempts to remove a backup's data.")
	fs.DurationVar(&o.phaseTimeout, "phase-timeout", lifecycle.DefaultPhaseTimeout,
		"How long a backup may stay in one non-terminal phase that cannot move on (storage or the API server failing) before it is ended with the last error.")
	fs.IntVar(&o.concurrentRestores, "concurrent-restores", 1,
		"How many restores may run at once.")
	fs.IntVar(&o.restoreWorkerCount, "restore-worker-count", restore.DefaultWorkers,
		"The size of each running restore's own worker pool: how many items of one priority group it creates in parallel.")
	fs.StringVar(&o.restorePriorities, "restore-resource-priorities", strings.Join(restore.DefaultPriorities, ","),
		"The order in which a restore creates resources, after CRDs: resource or resource.group names, comma-separated; the rest follow together.")
	fs.DurationVar(&o.restoreNamespaceWait, "restore-namespace-timeout", restore.DefaultNamespaceTimeout,
		"How long a restore waits for a target namespace that is still terminating before it fails.")
	fs.StringVar(&o.restoreScratchDir, "restore-scratch-dir", "",
		"Where restores unpack their backup's archive while they run (default: the system's temporary directory); it needs room for the largest archive, uncompressed.")
	fs.DurationVar(&o.defaultBackupTTL, "default-backup-ttl", cairnv1.DefaultBackupTTL,
		"How long a backup without spec.ttl is kept before it expires and is deleted (a backup's ttl: 0s keeps it forever).")
	fs.DurationVar(&o.backupSyncPeriod, "backup-sync-period", backupsync.DefaultPeriod,
		"How often the committed backups of a storage location without spec.backupSyncPeriod are synced into the cluster (0s: never).")
	fs.StringVar(&o.downloadAddr, "download-bind-address", ":8086",
		"Address of the download server that serves filesystem locations' files to signed DownloadRequest URLs; 0 disables it.")
	fs.StringVar(&o.downloadURLBase, "download-url-base", "",
		"The URL clients reach the download server by, such as https://cairn-downloads.example.com (default: http://localhost:<port>, for kubectl port-forward).")
	fs.StringVar(&o.downloadKeyFile, "download-signing-key-file", "",
		"A file holding the key (at least 32 bytes) that signs download URLs, the same for every replica (such as a mounted Secret); default: a random key per process, so a URL works only on the replica that answered its DownloadRequest.")
	fs.StringVar(&o.chartObjects, "chart-objects", "",
		"A ConfigMap in --namespace whose objects.yaml declares storage locations and schedules that the manager applies, as the Helm chart's values give them (default: none).")
	fs.StringVar(&o.actAsRequester, "act-as-requester", actAsRequesterTeams,
		"Where backups, restores and downloads act with the rights of the person who created them: "+actAsRequesterTeams+" (every namespace but --namespace, whose objects the operator carries out with its own rights: who may create them there is an administrator) or "+actAsRequesterEverywhere+" (--namespace too).")
	fs.StringVar(&o.maxEntrySize, "max-archive-entry-size", resource.NewQuantity(archive.DefaultMaxEntrySize, resource.BinarySI).String(),
		"The largest single entry of a backup archive the manager reads (a quantity such as 16Mi): a larger one is refused before it is read, so a hostile archive cannot make the manager's memory grow. Keep it well above the largest object your API server stores.")
	fs.StringVar(&o.repositoryAddr, "repository-server-bind-address", "0",
		"Where the repository server (the blob proxy the node agents copy volume data through) listens, such as :8445; 0 runs none, and no volume data can be copied.")
	fs.StringVar(&o.repositoryTLSSecret, "repository-server-tls-secret", "",
		"The Secret in --namespace of the repository server's TLS certificate (tls.crt, tls.key, and ca.crt, which the node agents verify it with). When it does not exist, the manager makes it: a new CA and a certificate for the names of --repository-server-service. Empty: plain HTTP, which carries the agents' tokens in clear (tests only).")
	fs.StringVar(&o.repositoryService, "repository-server-service", controller.DefaultRepositoryService,
		"The Service in --namespace that the node agents reach the repository server by: a certificate the manager makes serves <service>, <service>.<namespace>, <service>.<namespace>.svc and <service>.<namespace>.svc.cluster.local.")
	fs.StringVar(&o.nodeAgentSA, "node-agent-service-account", controller.DefaultNodeAgentServiceAccount,
		"The node agents' ServiceAccount in --namespace: the only one the repository server accepts.")
	fs.StringVar(&o.passwordSecret, "repository-password-secret", controller.DefaultRepositoryPasswordSecret,
		"The Secret in --namespace that holds the volume repositories' passwords, one key per repository, created at first use. Keep a copy: without it the volume data cannot be read.")
	fs.DurationVar(&o.maintenanceInterval, "repository-maintenance-interval", repositories.DefaultMaintenanceInterval,
		"How often each volume repository is maintained (deleted snapshots' space given back).")
	fs.DurationVar(&o.maintenanceTimeout, "repository-maintenance-timeout", repositories.DefaultMaintenanceTimeout,
		"The longest one repository's maintenance may take, including waiting for the copies into it to end.")
	fs.StringVar(&o.restoreHelperImage, "restore-helper-image", "",
		"The image of the init container that holds a restored pod back until its volumes' data is written: the manager's own image. Empty: volume data is not restored.")
	fs.BoolVar(&o.hooksEnabled, "hooks-enabled", true,
		"Whether backups run their hooks (docs/hooks.md): the manager then needs the pods/exec permission, the power to run commands in pods (the chart grants it with hooks.enabled). False: every hook fails, saying so.")
	fs.DurationVar(&o.defaultHookTimeout, "default-hook-timeout", cairnv1.DefaultHookTimeout,
		"How long a hook that sets no timeout may run before it is abandoned and fails (1s to 1h).")
	o.zap.BindFlags(fs)
	return fs
}

// parseOptions parses and checks the manager's arguments. Its errors are one line that names
// the offending flag. flag.ErrHelp means -h or --help was asked for.
func parseOptions(args []string) (options, error) {
	var o options
	fs := newFlagSet(&o)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: the manager takes only flags", fs.Arg(0))
	}
	if o.downloadURLBase != "" {
		u, err := url.Parse(o.downloadURLBase)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
			return o, fmt.Errorf("invalid value %q for --download-url-base: must be an http or https URL without a query", o.downloadURLBase)
		}
	}
	if o.concurrentBackups < 1 {
		return o, fmt.Errorf("invalid value %d for --concurrent-backups: must be at least 1", o.concurrentBackups)
	}
	if o.itemBlockWorkerCount < 1 {
		return o, fmt.Errorf("invalid value %d for --item-block-worker-count: must be at least 1", o.itemBlockWorkerCount)
	}
	if o.queueResyncPeriod <= 0 {
		return o, fmt.Errorf("invalid value %s for --queue-resync-period: must be greater than zero", o.queueResyncPeriod)
	}
	if o.operationSync <= 0 {
		return o, fmt.Errorf("invalid value %s for --item-operation-sync-frequency: must be greater than zero", o.operationSync)
	}
	if o.storageTimeout <= 0 {
		return o, fmt.Errorf("invalid value %s for --storage-timeout: must be greater than zero", o.storageTimeout)
	}
	if o.backoffMin <= 0 {
		return o, fmt.Errorf("invalid value %s for --retry-backoff-min: must be greater than zero", o.backoffMin)
	}
	if o.backoffMax < o.backoffMin {
		return o, fmt.Errorf("invalid value %s for --retry-backoff-max: must be at least --retry-backoff-min (%s)", o.backoffMax, o.backoffMin)
	}
	if o.maintenanceInterval <= 0 {
		return o, fmt.Errorf("invalid value %s for --repository-maintenance-interval: must be greater than zero", o.maintenanceInterval)
	}
	if o.maintenanceTimeout <= 0 {
		return o, fmt.Errorf("invalid value %s for --repository-maintenance-timeout: must be greater than zero", o.maintenanceTimeout)
	}
	if errs := validation.IsDNS1123Subdomain(o.passwordSecret); len(errs) > 0 {
		return o, fmt.Errorf("invalid value %q for --repository-password-secret: %s", o.passwordSecret, strings.Join(errs, "; "))
	}
	if o.defaultHookTimeout < time.Second || o.defaultHookTimeout > hooks.MaxTimeout {
		return o, fmt.Errorf("invalid value %s for --default-hook-timeout: must be from 1s to 1h", o.defaultHookTimeout)
	}
	if o.phaseTimeout <= 0 {
		return o, fmt.Errorf("invalid value %s for --phase-timeout: must be greater than zero", o.phaseTimeout)
	}
	if o.concurrentRestores < 1 {
		return o, fmt.Errorf("invalid value %d for --concurrent-restores: must be at least 1", o.concurrentRestores)
	}
	if o.restoreWorkerCount < 1 {
		return o, fmt.Errorf("invalid value %d for --restore-worker-count: must be at least 1", o.restoreWorkerCount)
	}
	if o.restoreNamespaceWait <= 0 {
		return o, fmt.Errorf("invalid value %s for --restore-namespace-timeout: must be greater than zero", o.restoreNamespaceWait)
	}
	if o.defaultBackupTTL <= 0 {
		return o, fmt.Errorf("invalid value %s for --default-backup-ttl: must be greater than zero (a backup's own ttl: 0s keeps it forever)", o.defaultBackupTTL)
	}
	if o.backupSyncPeriod < 0 {
		return o, fmt.Errorf("invalid value %s for --backup-sync-period: must be 0s (off) or more", o.backupSyncPeriod)
	}
	if o.actAsRequester != actAsRequesterTeams && o.actAsRequester != actAsRequesterEverywhere {
		return o, fmt.Errorf("invalid value %q for --act-as-requester: must be %s or %s", o.actAsRequester, actAsRequesterTeams, actAsRequesterEverywhere)
	}
	q, err := resource.ParseQuantity(o.maxEntrySize)
	if err != nil || q.Value() < 1<<20 {
		return o, fmt.Errorf("invalid value %q for --max-archive-entry-size: must be a quantity of at least 1Mi", o.maxEntrySize)
	}
	o.maxEntryBytes = q.Value()
	priorities, err := restore.ParsePriorities(o.restorePriorities)
	if err != nil {
		return o, fmt.Errorf("invalid value %q for --restore-resource-priorities: %w", o.restorePriorities, err)
	}
	o.priorities = priorities
	if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
		return o, fmt.Errorf("invalid value %q for --namespace: %s", o.namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(o.chartObjects); o.chartObjects != "" && len(errs) > 0 {
		return o, fmt.Errorf("invalid value %q for --chart-objects: %s", o.chartObjects, strings.Join(errs, "; "))
	}
	return o, nil
}

// usage is the manager's help text.
func usage() string {
	var o options
	fs := newFlagSet(&o)
	var b strings.Builder
	b.WriteString("Usage: manager [flags]\n\nCairn's operator: every reconciler in one binary.\n\nFlags:\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	return b.String()
}
