package requester_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/requester"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// The admission policies of config/admission in a real kube-apiserver, driven with a
// ServiceAccount's real token: what the API server records is what internal/requester reads.

const (
	// operatorUser is the identity the policies treat as the operator's, as the chart's
	// ServiceAccount is in a cluster.
	operatorUser = "cairn-operator"
	// legacyNamespace holds the objects created before the policies were installed.
	legacyNamespace = "legacy"
	// legacyRedefined is a second Schedule from before, whose spec a spec changes.
	legacyRedefined = "redefined"
)

var (
	env      *envtest.Environment
	adminCfg *rest.Config
	admin    client.Client
	operator client.Client
	ctx      context.Context
	cancel   context.CancelFunc
	// problemBefore is what PoliciesInstalled said before the policies were installed.
	problemBefore string
)

func TestRequester(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Requester admission suite")
}

var _ = BeforeSuite(func() {
	ctx, cancel = context.WithCancel(context.Background())
	SetDefaultEventuallyTimeout(10 * time.Second)
	var err error
	env, err = testenv.New()
	Expect(err).NotTo(HaveOccurred())
	adminCfg, err = env.Start()
	Expect(err).NotTo(HaveOccurred())
	admin, err = client.New(adminCfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	op, err := env.AddUser(envtest.User{Name: operatorUser, Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	operator, err = client.New(op.Config(), client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())

	// An object from before the upgrade that brought the policies.
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: legacyNamespace}})).To(Succeed())
	for _, name := range []string{"nightly", legacyRedefined} {
		Expect(admin.Create(ctx, &cairnv1.Schedule{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: legacyNamespace},
			Spec:       cairnv1.ScheduleSpec{Schedule: "0 3 * * *"},
		})).To(Succeed())
	}

	problemBefore, err = requester.PoliciesInstalled(ctx, admin)
	Expect(err).NotTo(HaveOccurred())

	Expect(testenv.InstallAdmissionPolicies(ctx, adminCfg, op.Config())).To(Succeed())
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
