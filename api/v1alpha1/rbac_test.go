package v1alpha1_test

import (
	"bytes"
	"errors"
	"io"
	"os"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// clientAs is a client that impersonates user.
func clientAs(user string) client.Client {
	GinkgoHelper()
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// bindClusterRole lets user use role in namespace.
func bindClusterRole(namespace, role, user string) {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: role + "-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	})).To(Succeed())
}

var cancelPatch = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))

var _ = Describe("Cancel permissions", Ordered, func() {
	BeforeAll(func() {
		// The roles users are given, from the file the docs point to.
		data, err := os.ReadFile("../../config/rbac/backup_user_roles.yaml")
		Expect(err).NotTo(HaveOccurred())
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var role rbacv1.ClusterRole
			if err := dec.Decode(&role); errors.Is(err, io.EOF) {
				break
			} else {
				Expect(err).NotTo(HaveOccurred())
			}
			Expect(k8sClient.Create(ctx, &role)).To(Succeed())
		}
		// The least a user needs to cancel: get and patch.
		Expect(k8sClient.Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "backup-canceller"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{cairnv1.GroupVersion.Group}, Resources: []string{"backups"}, Verbs: []string{"get", "patch"}}},
		})).To(Succeed())
		bindClusterRole("default", "backup-canceller", "alice")
		bindClusterRole("default", "cairn-backup-viewer", "bob")
		bindClusterRole("default", "cairn-backup-editor", "carol")
	})

	It("lets a user with only get and patch on backups cancel", func() {
		b := newBackup(cairnv1.BackupSpec{})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Expect(clientAs("alice").Patch(ctx, b, cancelPatch)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
		Expect(b.Spec.Cancel).To(BeTrue())
	})

	It("lets a cairn-backup-editor cancel", func() {
		b := newBackup(cairnv1.BackupSpec{})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Expect(clientAs("carol").Patch(ctx, b, cancelPatch)).To(Succeed())
	})

	It("refuses a cancel from a user without patch", func() {
		b := newBackup(cairnv1.BackupSpec{})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		err := clientAs("bob").Patch(ctx, b, cancelPatch)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
		Expect(b.Spec.Cancel).To(BeFalse())
	})

	It("refuses a cancel in a namespace where the user has no role", func() {
		b := newBackup(cairnv1.BackupSpec{})
		b.Namespace = "kube-public"
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		err := clientAs("alice").Patch(ctx, b, cancelPatch)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})

	It("does not let a cancelling user write the status (a phase cannot be faked)", func() {
		b := newBackup(cairnv1.BackupSpec{})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		err := clientAs("alice").Status().Patch(ctx, b, client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Completed"}}`)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})
})
