package requester_test

import (
	"encoding/json"
	"errors"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/requester"
)

// redefineMessage is what cairn-requester-immutable answers to a redefined Schedule whose
// annotations are not its sender's (config/admission).
const redefineMessage = "makes whoever sends it the Schedule's requester"

// specPatch is a merge patch of a Schedule's spec.
func specPatch(spec string) client.Patch {
	return client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":%s}`, spec)))
}

// A Schedule acts as whoever last defined it (DESIGN.md section 21): a junior who edits a
// lead's Schedule makes its next backups act with the junior's rights, never the lead's.
var _ = Describe("A Schedule's requester", func() {
	var lead, junior tenant
	var key types.NamespacedName
	namespaces := 0

	// storedRequester is the requester the API server stored on the Schedule.
	storedRequester := func() authenticationv1.UserInfo {
		GinkgoHelper()
		s := &cairnv1.Schedule{}
		Expect(admin.Get(ctx, key, s)).To(Succeed())
		got, err := requester.From(s)
		Expect(err).NotTo(HaveOccurred())
		return got
	}

	BeforeEach(func() {
		namespaces++
		namespace := fmt.Sprintf("team-sched-%d", namespaces)
		lead = newTenant(namespace)
		junior = newMember(namespace, "junior")
		key = types.NamespacedName{Namespace: namespace, Name: "nightly"}
		Expect(lead.client.Create(ctx, &cairnv1.Schedule{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
			Spec:       cairnv1.ScheduleSpec{Schedule: "0 3 * * *", Template: cairnv1.BackupSpec{IncludedResources: []string{"configmaps"}}},
		})).To(Succeed())
		Expect(storedRequester()).To(Equal(lead.user))
	})

	It("becomes whoever changes its spec: the template, the cron, or anything else but paused", func() {
		for _, spec := range []string{
			`{"template":{"includedResources":["secrets"]}}`,
			`{"template":{"hooks":{"resources":[{"name":"dump","pre":[{"exec":{"command":["cat","/etc/secret"]}}]}]}}}`,
			`{"schedule":"0 4 * * *"}`,
			`{"useOwnerReferencesInBackup":true}`,
		} {
			By("the junior patches " + spec)
			s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
			Expect(junior.client.Patch(ctx, s, specPatch(spec))).To(Succeed())
			Expect(storedRequester()).To(Equal(junior.user), spec)

			By("and the lead takes it back by changing it again")
			Expect(lead.client.Patch(ctx, s, specPatch(`{"schedule":"0 3 * * *","useOwnerReferencesInBackup":false,"template":{"includedResources":["configmaps"],"hooks":null}}`))).To(Succeed())
			Expect(storedRequester()).To(Equal(lead.user))
		}

		By("a field the lead's last change left out, removed by the junior, counts too")
		s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
		Expect(lead.client.Patch(ctx, s, specPatch(`{"retention":{"keepLast":3}}`))).To(Succeed())
		Expect(junior.client.Patch(ctx, s, specPatch(`{"retention":null}`))).To(Succeed())
		Expect(storedRequester()).To(Equal(junior.user))
	})

	It("stays who it was when another editor pauses or unpauses it, or changes only its metadata", func() {
		s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
		for _, spec := range []string{`{"paused":true}`, `{"paused":false,"skipImmediately":true}`, `{"skipImmediately":false}`} {
			Expect(junior.client.Patch(ctx, s, specPatch(spec))).To(Succeed(), spec)
			Expect(storedRequester()).To(Equal(lead.user), spec)
		}
		Expect(junior.client.Patch(ctx, s, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"team":"a"}}}`)))).To(Succeed())
		Expect(storedRequester()).To(Equal(lead.user))

		By("an update from a typed client, which writes the template's durations back as 4h0m0s")
		typed := &cairnv1.Schedule{}
		Expect(junior.client.Get(ctx, key, typed)).To(Succeed())
		Expect(typed.Spec.Template.ItemOperationTimeout).NotTo(BeNil(), "the CRD's default")
		typed.Labels = map[string]string{"team": "b"}
		typed.Spec.Paused = true
		Expect(junior.client.Update(ctx, typed)).To(Succeed())
		Expect(storedRequester()).To(Equal(lead.user))

		By("the operator resets skipImmediately, as after a skipped run, and the requester stays")
		Expect(junior.client.Patch(ctx, s, specPatch(`{"skipImmediately":true}`))).To(Succeed())
		Expect(operator.Patch(ctx, s, specPatch(`{"skipImmediately":false}`))).To(Succeed())
		Expect(storedRequester()).To(Equal(lead.user))
	})

	It("cannot be forged by an editor, with or without a change of the spec", func() {
		s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
		By("forged annotations beside a change of the spec are overwritten with the sender's")
		forgedPatch := map[string]any{"metadata": map[string]any{"annotations": forged()},
			"spec": map[string]any{"template": map[string]any{"includedResources": []string{"secrets"}}}}
		Expect(junior.client.Patch(ctx, s, rawMergePatch(forgedPatch))).To(Succeed())
		Expect(storedRequester()).To(Equal(junior.user))

		By("the lead's identity, written with a pause alone, is refused")
		expectRefused(junior.client.Patch(ctx, s, rawMergePatch(map[string]any{
			"metadata": map[string]any{"annotations": requester.Annotations(lead.user)},
			"spec":     map[string]any{"paused": true}})))
		Expect(storedRequester()).To(Equal(junior.user))

		By("the operator, whose creates keep the requester they carry, cannot redefine a Schedule")
		err := operator.Patch(ctx, s, specPatch(`{"template":{"includedResources":["pods"]}}`))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
		Expect(err.Error()).To(ContainSubstring(redefineMessage))
		Expect(storedRequester()).To(Equal(junior.user))
	})

	It("is recorded on a Schedule from before the policies once someone changes its spec, not its pause", func() {
		s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: legacyRedefined, Namespace: legacyNamespace}}
		Expect(admin.Patch(ctx, s, specPatch(`{"paused":true}`))).To(Succeed())
		_, err := requester.From(s)
		Expect(errors.Is(err, requester.ErrNoRequester)).To(BeTrue(), "From: %v", err)
		Expect(admin.Patch(ctx, s, specPatch(`{"schedule":"0 4 * * *"}`))).To(Succeed())
		Expect(requester.From(s)).To(HaveField("Username", "admin"))
	})
})

// rawMergePatch is a merge patch of v, marshalled.
func rawMergePatch(v map[string]any) client.Patch {
	GinkgoHelper()
	data, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return client.RawPatch(types.MergePatchType, data)
}
