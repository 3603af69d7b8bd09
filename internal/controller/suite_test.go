package controller_test

import (
	"context"
	"fmt"
	"testing"
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

// The reconcilers run in a real manager against a real kube-apiserver; tests assert through a
// direct (uncached) client.

const operatorNamespace = "cairn-system"

var (
	env       *envtest.Environment
	restCfg   *rest.Config
	k8sClient client.Client
	suiteCtx  context.Context
	stopSuite context.CancelFunc
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller suite")
}

var _ = BeforeSuite(func() {
	suiteCtx, stopSuite = context.WithCancel(context.Background())
	SetDefaultEventuallyTimeout(10 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	var err error
	env, err = testenv.New()
	Expect(err).NotTo(HaveOccurred())
	restCfg, err = env.Start()
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(restCfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8sClient.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})).To(Succeed())
	// The requester admission policies, as the chart installs them; the manager runs as
	// envtest's administrator (restCfg), the operator's identity.
	Expect(testenv.InstallAdmissionPolicies(suiteCtx, restCfg, restCfg)).To(Succeed())
})

// startManager runs the manager's reconcilers with cfg (defaults filled in) until the
// returned function is called, which stops the manager and waits for it to exit.
func startManager(cfg controller.Config) (stop func()) {
	GinkgoHelper()
	if cfg.Namespace == "" {
		cfg.Namespace = operatorNamespace
	}
	if cfg.ConcurrentBackups == 0 {
		cfg.ConcurrentBackups = 1
	}
	if cfg.ItemBlockWorkerCount == 0 {
		cfg.ItemBlockWorkerCount = 2
	}
	if cfg.BackupSyncPeriod == nil {
		// Sync from storage makes Backup objects of whatever a location holds, in any
		// namespace: only the tests that set it (sync_test.go), or a location's own
		// spec.backupSyncPeriod, turn it on.
		off := time.Duration(0)
		cfg.BackupSyncPeriod = &off
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 testenv.Scheme(),
		Cache:                  controller.CacheOptions(operatorNamespace),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Tests start several managers in one process; controller names repeat.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(controller.SetupWithManager(mgr, cfg)).To(Succeed())
	ctx, cancel := context.WithCancel(suiteCtx)
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	return func() {
		cancel()
		<-done
	}
}

var _ = AfterSuite(func() {
	// A status write the phase-owner table refused is a bug in a reconciler or in the table
	// (internal/phases), even when no spec waited on its outcome.
	Expect(refusedPhaseTransitions()).To(BeEmpty(), "phase changes refused by the owner table (kind, from, to)")
	if stopSuite != nil {
		stopSuite()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// refusedPhaseTransitions lists the phase changes the status writers refused in this process
// (cairn_refused_phase_transitions_total), each as "kind from → to: count".
func refusedPhaseTransitions() []string {
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

// watchClient is a direct client that can also watch.
func watchClient() client.WithWatch {
	GinkgoHelper()
	c, err := client.NewWithWatch(restCfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}
