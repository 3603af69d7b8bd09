// Command manager is Cairn's operator, every reconciler in one binary, and, as
// `manager node-agent`, its node agent (DESIGN.md section 16).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	// Time zone data in the binary, so that a schedule's CRON_TZ=Area/City resolves in a
	// scratch or distroless image without /usr/share/zoneinfo.
	_ "time/tzdata"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run starts the manager and returns the process exit code.
func run(args []string) int {
	if len(args) > 0 && args[0] == nodeAgentCommand {
		return runNodeAgent(args[1:])
	}
	if len(args) > 0 && args[0] == restoreHelperCommand {
		return runRestoreHelper(args[1:])
	}
	opts, err := parseOptions(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Print(usage())
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		return 2
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.zap)))
	log := ctrl.Log.WithName("setup")

	cfg, err := restConfig(opts.kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager: cannot load the cluster configuration: %v\n", err)
		return 1
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cairnv1.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   controller.CacheOptions(opts.namespace),
		Metrics:                 metricsserver.Options{BindAddress: opts.metricsAddr},
		HealthProbeBindAddress:  opts.probeAddr,
		PprofBindAddress:        opts.pprofAddr,
		LeaderElection:          opts.leaderElect,
		LeaderElectionID:        "manager.cairn.dev",
		LeaderElectionNamespace: opts.namespace,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager: cannot create the manager: %v\n", err)
		return 1
	}
	var downloadKey []byte
	if opts.downloadKeyFile != "" {
		if downloadKey, err = os.ReadFile(opts.downloadKeyFile); err != nil {
			fmt.Fprintf(os.Stderr, "manager: cannot read --download-signing-key-file: %v\n", err)
			return 1
		}
	}
	if err := controller.SetupWithManager(mgr, controller.Config{
		Namespace:                  opts.namespace,
		ConcurrentBackups:          opts.concurrentBackups,
		ItemBlockWorkerCount:       opts.itemBlockWorkerCount,
		QueueResyncPeriod:          opts.queueResyncPeriod,
		ItemOperationSyncFrequency: opts.operationSync,
		RetryBackoffMin:            opts.backoffMin,
		StorageTimeout:             opts.storageTimeout,
		RetryBackoffMax:            opts.backoffMax,
		PhaseTimeout:               opts.phaseTimeout,
		ConcurrentRestores:         opts.concurrentRestores,
		RestoreWorkerCount:         opts.restoreWorkerCount,
		RestorePriorities:          opts.priorities,
		RestoreNamespaceTimeout:    opts.restoreNamespaceWait,
		RestoreScratchDir:          opts.restoreScratchDir,
		DefaultBackupTTL:           opts.defaultBackupTTL,
		BackupSyncPeriod:           &opts.backupSyncPeriod,
		DownloadBindAddress:        opts.downloadAddr,
		DownloadURLBase:            opts.downloadURLBase,
		ChartObjects:               opts.chartObjects,
		ActAsRequesterEverywhere:   opts.actAsRequester == actAsRequesterEverywhere,
		MaxArchiveEntrySize:        opts.maxEntryBytes,
		DownloadSigningKey:         downloadKey,
		VolumeData: controller.VolumeDataConfig{
			PasswordSecret:          opts.passwordSecret,
			ServerBindAddress:       opts.repositoryAddr,
			NodeAgentServiceAccount: opts.nodeAgentSA,
			ServerTLSSecret:         opts.repositoryTLSSecret,
			ServerService:           opts.repositoryService,
			MaintenanceInterval:     opts.maintenanceInterval,
			MaintenanceTimeout:      opts.maintenanceTimeout,
			RestoreHelperImage:      opts.restoreHelperImage,
		},
		Hooks: controller.HooksConfig{Disabled: !opts.hooksEnabled, DefaultTimeout: opts.defaultHookTimeout},
	}); err != nil {
		fmt.Fprintf(os.Stderr, "manager: cannot set up the reconcilers: %v\n", err)
		return 1
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		fmt.Fprintf(os.Stderr, "manager: cannot add the health check: %v\n", err)
		return 1
	}
	if err := mgr.AddReadyzCheck("cache", cacheSynced(mgr.GetCache())); err != nil {
		fmt.Fprintf(os.Stderr, "manager: cannot add the ready check: %v\n", err)
		return 1
	}

	log.Info("Starting manager", "namespace", opts.namespace,
		"concurrentBackups", opts.concurrentBackups, "itemBlockWorkerCount", opts.itemBlockWorkerCount)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Manager stopped with an error")
		return 1
	}
	return 0
}

// cacheSyncWait bounds how long one readiness probe waits for the informer caches.
const cacheSyncWait = time.Second

// cacheSynced is the readiness check: ready once the manager's informer caches have synced, so
// that a pod is not ready (and a rollout does not go on) before it could reconcile anything.
// Every replica's caches start, leader or not, so a standby is ready to take over.
func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), cacheSyncWait)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the informer caches have not synced yet")
		}
		return nil
	}
}

// restConfig loads the cluster configuration from an explicit kubeconfig, or the usual places.
// Client-side rate limiting is off, as controller-runtime's own loader does: the API server's
// priority and fairness protects it, and client-go's default of 5 requests a second would make
// the queue's hand-offs wait.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return ctrl.GetConfig()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	if cfg.QPS == 0 {
		cfg.QPS = -1
	}
	return cfg, nil
}
