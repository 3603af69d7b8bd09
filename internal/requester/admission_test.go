package requester_test

import (
	"errors"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/requester"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// immutableMessage is what cairn-requester-immutable answers (config/admission).
const immutableMessage = "cannot be added, changed or removed"

// forged are requester annotations a client makes up: a cluster administrator's identity.
func forged() map[string]string {
	return requester.Annotations(authenticationv1.UserInfo{
		Username: "system:admin", UID: "forged-uid", Groups: []string{"system:masters"},
		Extra: map[string]authenticationv1.ExtraValue{"forged": {"yes"}},
	})
}

// tenant is a ServiceAccount in its own namespace, bound to a Role that may get, create,
// update and patch Cairn's four kinds there and nothing else, with a client that authenticates
// with nothing but a token from the TokenRequest API (kubectl create token).
type tenant struct {
	namespace string
	client    client.Client
	// user is who the API server says the token is (a SelfSubjectReview with it).
	user authenticationv1.UserInfo
}

func newTenant(namespace string) tenant {
	GinkgoHelper()
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
	Expect(admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "cairn-editor", Namespace: namespace},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{cairnv1.GroupVersion.Group},
			Resources: []string{"backups", "restores", "schedules", "downloadrequests"},
			Verbs:     []string{"get", "create", "update", "patch"},
		}},
	})).To(Succeed())
	return newMember(namespace, "dev")
}

// newMember is another ServiceAccount, name, of newTenant's namespace, bound to the same Role.
func newMember(namespace, name string) tenant {
	GinkgoHelper()
	Expect(admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}})).To(Succeed())
	Expect(admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-cairn-editor", Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cairn-editor"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
	})).To(Succeed())

	cs, err := kubernetes.NewForConfig(adminCfg)
	Expect(err).NotTo(HaveOccurred())
	token, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	cfg := &rest.Config{
		Host:            adminCfg.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: adminCfg.CAData},
		BearerToken:     token.Status.Token,
	}
	t := tenant{namespace: namespace}
	t.client, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	tcs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	review, err := tcs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	t.user = review.Status.UserInfo
	Expect(t.user.Username).To(Equal("system:serviceaccount:" + namespace + ":" + name))
	Expect(t.user.Groups).To(ContainElement("system:serviceaccounts:" + namespace))
	// A bound token's extra names its credential: the policy must carry extra, not only groups.
	Expect(t.user.Extra).To(HaveKey("authentication.kubernetes.io/credential-id"))
	return t
}

// objectsOfEveryKind are a valid object of each kind the policies match, in namespace, with
// annotations.
func objectsOfEveryKind(namespace string, annotations map[string]string) []client.Object {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: annotations}
	}
	return []client.Object{
		&cairnv1.Backup{ObjectMeta: meta("b")},
		&cairnv1.Restore{ObjectMeta: meta("r"), Spec: cairnv1.RestoreSpec{BackupName: "b"}},
		&cairnv1.Schedule{ObjectMeta: meta("s"), Spec: cairnv1.ScheduleSpec{Schedule: "0 3 * * *", Paused: true}},
		&cairnv1.DownloadRequest{ObjectMeta: meta("d"), Spec: cairnv1.DownloadRequestSpec{
			Target: cairnv1.DownloadTarget{Kind: cairnv1.DownloadTargetBackupLog, Name: "b"}}},
	}
}

// expectRefused expects err to be cairn-requester-immutable's refusal.
func expectRefused(err error) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred())
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
	Expect(err.Error()).To(And(ContainSubstring(cairnv1.RequesterImmutablePolicyName), ContainSubstring(immutableMessage)))
}

// annotationPatch is a merge patch that sets key to value (nil: removes it).
func annotationPatch(key string, value *string) client.Patch {
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	return client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)))
}

var _ = Describe("The requester admission policies", func() {
	It("are reported missing before they are installed, and installed after", func() {
		Expect(problemBefore).To(HavePrefix("MutatingAdmissionPolicy cairn-requester is missing; install Cairn's admission policies"))
		Expect(requester.PoliciesInstalled(ctx, admin)).To(BeEmpty())
	})

	It("record a ServiceAccount's real identity over a forged one, on every kind", func() {
		t := newTenant("team-forge")
		for _, obj := range objectsOfEveryKind(t.namespace, forged()) {
			kind := fmt.Sprintf("%T", obj)
			Expect(t.client.Create(ctx, obj)).To(Succeed(), kind)
			// The object the API server stored, not only the one it answered with.
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			got, err := requester.From(obj)
			Expect(err).NotTo(HaveOccurred(), kind)
			Expect(got).To(Equal(t.user), kind)
			Expect(got.Groups).NotTo(ContainElement("system:masters"), kind)
		}
	})

	It("refuse an update that changes, removes or adds a requester annotation, whoever sends it", func() {
		t := newTenant("team-change")
		backup := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: t.namespace}}
		Expect(t.client.Create(ctx, backup)).To(Succeed())
		before := backup.DeepCopy()

		for _, key := range cairnv1.RequesterAnnotations {
			By("changing " + key)
			expectRefused(t.client.Patch(ctx, backup.DeepCopy(), annotationPatch(key, ptr.To(`["system:masters"]`))))
			By("removing " + key)
			expectRefused(t.client.Patch(ctx, backup.DeepCopy(), annotationPatch(key, nil)))
		}
		By("an update that sends the object without its annotations (kubectl replace)")
		replaced := backup.DeepCopy()
		replaced.Annotations = nil
		expectRefused(t.client.Update(ctx, replaced))
		By("the operator and a cluster administrator cannot change it either")
		expectRefused(operator.Patch(ctx, backup.DeepCopy(), annotationPatch(cairnv1.RequesterAnnotation, ptr.To("someone-else"))))
		expectRefused(admin.Patch(ctx, backup.DeepCopy(), annotationPatch(cairnv1.RequesterGroupsAnnotation, ptr.To(`[]`))))

		Expect(admin.Get(ctx, client.ObjectKeyFromObject(backup), backup)).To(Succeed())
		Expect(backup.Annotations).To(Equal(before.Annotations))
		Expect(requester.From(backup)).To(Equal(t.user))
	})

	It("let updates through that leave the requester as it is, server-side apply included", func() {
		t := newTenant("team-update")
		By("another annotation and a label")
		backup := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: t.namespace}}
		Expect(t.client.Create(ctx, backup)).To(Succeed())
		Expect(t.client.Patch(ctx, backup, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"app":"web"},"annotations":{"note":"kept"}}}`)))).To(Succeed())
		Expect(requester.From(backup)).To(Equal(t.user))

		By("applying the same manifest again, as kubectl apply --server-side and GitOps tools do")
		schedule := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": cairnv1.GroupVersion.String(), "kind": "Schedule",
			"metadata": map[string]any{"name": "nightly", "namespace": t.namespace},
			"spec":     map[string]any{"schedule": "0 3 * * *"},
		}}
		for range 2 {
			Expect(t.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(schedule.DeepCopy()),
				client.FieldOwner("gitops"), client.ForceOwnership)).To(Succeed())
		}
		stored := &cairnv1.Schedule{}
		Expect(admin.Get(ctx, types.NamespacedName{Namespace: t.namespace, Name: "nightly"}, stored)).To(Succeed())
		Expect(requester.From(stored)).To(Equal(t.user))
	})

	It("keep the requester the operator's identity sets on create, as for a Schedule's backups", func() {
		t := newTenant("team-schedule")
		backup := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{
			Name: "nightly-1", Namespace: t.namespace, Annotations: requester.Annotations(t.user),
		}}
		Expect(operator.Create(ctx, backup)).To(Succeed())
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(backup), backup)).To(Succeed())
		Expect(requester.From(backup)).To(Equal(t.user))

		By("a create of the operator's without a requester records the operator's own identity")
		own := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: t.namespace}}
		Expect(operator.Create(ctx, own)).To(Succeed())
		got, err := requester.From(own)
		Expect(err).NotTo(HaveOccurred())
		Expect(got.Username).To(Equal(operatorUser))
		Expect(got.Groups).To(ContainElement("system:masters"))
	})

	It("record a cluster administrator who is not the operator like anyone else", func() {
		t := newTenant("team-admin")
		backup := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{
			Name: "b", Namespace: t.namespace, Annotations: requester.Annotations(t.user),
		}}
		Expect(admin.Create(ctx, backup)).To(Succeed())
		got, err := requester.From(backup)
		Expect(err).NotTo(HaveOccurred())
		Expect(got.Username).To(Equal("admin"), "envtest's administrator, who may not speak for the tenant")
	})

	It("leave an object from before they were installed without a requester, which nobody can add", func() {
		schedule := &cairnv1.Schedule{}
		Expect(admin.Get(ctx, types.NamespacedName{Namespace: legacyNamespace, Name: "nightly"}, schedule)).To(Succeed())
		_, err := requester.From(schedule)
		Expect(errors.Is(err, requester.ErrNoRequester)).To(BeTrue(), "From: %v", err)

		for _, c := range []client.Client{admin, operator} {
			expectRefused(c.Patch(ctx, schedule.DeepCopy(), annotationPatch(cairnv1.RequesterAnnotation, ptr.To("system:serviceaccount:legacy:dev"))))
		}
		By("its owner re-creates it, and the policy records them")
		fresh := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: "nightly-again", Namespace: legacyNamespace}, Spec: schedule.Spec}
		Expect(admin.Create(ctx, fresh)).To(Succeed())
		Expect(requester.From(fresh)).To(HaveField("Username", "admin"))
	})

	It("name the operator once in config/admission, the name every installer replaces", func() {
		objs, err := testenv.AdmissionPolicies("replaced-operator")
		Expect(err).NotTo(HaveOccurred())
		var text strings.Builder
		for _, obj := range objs {
			data, err := obj.MarshalJSON()
			Expect(err).NotTo(HaveOccurred())
			text.Write(data)
		}
		Expect(text.String()).To(ContainSubstring("replaced-operator"))
		Expect(text.String()).NotTo(ContainSubstring(testenv.ConfigOperatorUsername))
	})
})
