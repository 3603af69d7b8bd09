package controllertest

import (
	. "github.com/onsi/ginkgo/v2" //nolint:revive // the suites' DSL
	. "github.com/onsi/gomega"    //nolint:revive // the suites' DSL
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cairn-backup/cairn/internal/testenv"
)

// Member is a ServiceAccount of a team namespace acting as a person would: its own token, and
// a client that authenticates with it alone (no client certificate), so the API server records
// it as the requester of what it creates.
type Member struct {
	Username string
	Token    string
	Client   client.Client
}

// NewMember makes ServiceAccount name in namespace, bound to a Role of rules, and returns it
// with a token (for the API server's own audience) and a client using that token.
func NewMember(namespace, name string, rules []rbacv1.PolicyRule) Member {
	GinkgoHelper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	Expect(K8sClient.Create(SuiteCtx, sa)).To(Succeed())
	Expect(K8sClient.Create(SuiteCtx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Rules: rules})).To(Succeed())
	Expect(K8sClient.Create(SuiteCtx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: namespace}}})).To(Succeed())
	clientset, err := kubernetes.NewForConfig(RestCfg)
	Expect(err).NotTo(HaveOccurred())
	tr, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(SuiteCtx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	cfg := rest.AnonymousClientConfig(RestCfg)
	cfg.BearerToken = tr.Status.Token
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return Member{Username: "system:serviceaccount:" + namespace + ":" + name, Token: tr.Status.Token, Client: c}
}
