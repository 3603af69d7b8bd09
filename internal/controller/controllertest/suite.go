// Package controllertest runs the reconcilers' envtest suites: each package under
// internal/controller that has specs against a real API server starts its own (Start) in its
// BeforeSuite, runs the manager's reconcilers in it (StartManager), and checks in its
// AfterSuite that the owner tables refused no status write (RefusedPhaseTransitions). The
// fixtures several packages' specs share live here too. Only external test packages import it:
// it imports internal/controller, which imports every owner.
package controllertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// OperatorNamespace is the operator's namespace in every suite.
const OperatorNamespace = "cairn-system"

// What a suite's specs reach its API server with, set by Start: one suite per test binary.
var (
	// K8sClient is a direct (uncached) client: specs assert through it.
	K8sClient client.Client
	// RestCfg is the API server's administrator, the manager's identity too.
	RestCfg *rest.Config
	// SuiteCtx ends when the suite stops.
	SuiteCtx context.Context

	env       *envtest.Environment
	stopSuite context.CancelFunc
)

// Start starts a real kube-apiserver with Cairn's CRDs, the operator's namespace and the
// requester admission policies as the chart installs them (the manager runs as envtest's
// administrator, the operator's identity). Call it in BeforeSuite.
func Start() {
	GinkgoHelper()
	SetDefaultEventuallyTimeout(10 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	SuiteCtx, stopSuite = context.WithCancel(context.Background())
	var err error
	env, err = testenv.New()
	Expect(err).NotTo(HaveOccurred())
	RestCfg, err = env.Start()
	Expect(err).NotTo(HaveOccurred())
	K8sClient, err = client.New(RestCfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	Expect(K8sClient.Create(SuiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}})).To(Succeed())
	Expect(testenv.InstallAdmissionPolicies(SuiteCtx, RestCfg, RestCfg)).To(Succeed())
}

// Stop fails the suite if any status write was refused by the owner tables during it (a bug in
// a reconciler or in internal/phases, even when no spec waited on its outcome), then stops the
// API server. Call it in AfterSuite.
func Stop() {
	GinkgoHelper()
	Expect(RefusedPhaseTransitions()).To(BeEmpty(), "phase changes refused by the owner table (kind, from, to)")
	if stopSuite != nil {
		stopSuite()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
}

// StartManager runs the manager's reconcilers with cfg (defaults filled in) until the
// returned function is called, which stops the manager and waits for it to exit.
func StartManager(cfg controller.Config) (stop func()) {
	GinkgoHelper()
	return startManagerOn(RestCfg, cfg)
}

// startManagerOn runs a manager against the API server of restCfg, as StartManager does.
func startManagerOn(restCfg *rest.Config, cfg controller.Config) (stop func()) {
	GinkgoHelper()
	if cfg.Namespace == "" {
		cfg.Namespace = OperatorNamespace
	}
	if cfg.ConcurrentBackups == 0 {
		cfg.ConcurrentBackups = 1
	}
	if cfg.ItemBlockWorkerCount == 0 {
		cfg.ItemBlockWorkerCount = 2
	}
	if cfg.BackupSyncPeriod == nil {
		// Sync from storage makes Backup objects of whatever a location holds, in any
		// namespace: only the specs that set it, or a location's own spec.backupSyncPeriod,
		// turn it on.
		off := time.Duration(0)
		cfg.BackupSyncPeriod = &off
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 testenv.Scheme(),
		Cache:                  controller.CacheOptions(OperatorNamespace),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// A spec's manager stops with the leftovers of every earlier spec in the API server;
		// on a loaded machine a run it took up may take longer than the default 30 s to
		// wind down. waitStopped prints what is still running after 15 s.
		GracefulShutdownTimeout: ptr.To(90 * time.Second),
		// Specs start several managers in one process; controller names repeat.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(controller.SetupWithManager(mgr, cfg)).To(Succeed())
	ctx, cancel := context.WithCancel(SuiteCtx)
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	return func() {
		cancel()
		waitStopped(done)
	}
}

// waitStopped waits for a stopping manager to exit; one still running after stopDumpAfter
// prints every goroutine's stack to the test's standard error first (kept in the test log
// whether or not the spec fails), so that a runnable slow to stop is named.
func waitStopped(done <-chan struct{}) {
	select {
	case <-done:
		return
	case <-time.After(stopDumpAfter):
		var stacks bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 2)
		fmt.Fprintf(os.Stderr, "controllertest: the manager has not stopped %s after its context ended; goroutines:\n%s\n", stopDumpAfter, stacks.String())
	}
	<-done
}

// stopDumpAfter is how long a manager may take to stop before waitStopped prints the
// goroutines: well under its graceful shutdown timeout.
const stopDumpAfter = 15 * time.Second

// WatchClient is a direct client that can also watch.
func WatchClient() client.WithWatch {
	GinkgoHelper()
	c, err := client.NewWithWatch(RestCfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// RefusedPhaseTransitions lists the phase changes the status writers refused in this process
// (cairn_refused_phase_transitions_total), each as "kind from → to: count".
func RefusedPhaseTransitions() []string {
	GinkgoHelper()
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var refused []string
	for _, f := range families {
		if f.GetName() != "cairn_refused_phase_transitions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if n := m.GetCounter().GetValue(); n > 0 {
				refused = append(refused, fmt.Sprintf("%s %s → %s: %v", labels["kind"], labels["from"], labels["to"], n))
			}
		}
	}
	return refused
}
