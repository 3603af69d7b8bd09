package controller_test

import (
	"context"
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
	if stopSuite != nil {
		stopSuite()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// watchClient is a direct client that can also watch.
func watchClient() client.WithWatch {
	GinkgoHelper()
	c, err := client.NewWithWatch(restCfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}
