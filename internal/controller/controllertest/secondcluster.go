package controllertest

// A second control plane, for disaster-recovery specs.

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// SecondCluster is another kube-apiserver and etcd beside the suite's, with Cairn's CRDs, the
// operator's namespace and the admission policies: the cluster a disaster-recovery plan
// restores into. It shares nothing with the suite's cluster but what a spec gives both (a
// directory, a bucket, a Secret's value).
type SecondCluster struct {
	// Client is a direct client of the second cluster.
	Client  client.Client
	restCfg *rest.Config
}

// StartSecondCluster starts a second control plane, stopped when the spec (or container) that
// started it ends.
func StartSecondCluster() *SecondCluster {
	GinkgoHelper()
	env, err := testenv.New()
	Expect(err).NotTo(HaveOccurred())
	restCfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) })
	c, err := client.New(restCfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	Expect(c.Create(SuiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}})).To(Succeed())
	Expect(testenv.InstallAdmissionPolicies(SuiteCtx, restCfg, restCfg)).To(Succeed())
	return &SecondCluster{Client: c, restCfg: restCfg}
}

// StartManager runs a manager of the second cluster with cfg (defaults filled in as
// StartManager does) until the returned function is called.
func (c *SecondCluster) StartManager(cfg controller.Config) (stop func()) {
	GinkgoHelper()
	return startManagerOn(c.restCfg, cfg)
}
