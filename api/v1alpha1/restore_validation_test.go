package v1alpha1_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

const (
	restoreImmutableMessage = "spec is immutable after the restore is created: only spec.cancel may be changed, from false to true"
	restoreUncancelMessage  = "spec.cancel cannot be changed back to false: a cancelled restore stays cancelled"
	restoreSourceMessage    = "exactly one of spec.backupName and spec.scheduleName must be set"
)

func newRestore(spec cairnv1.RestoreSpec) *cairnv1.Restore {
	return &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("r"), Namespace: "default"}, Spec: spec}
}

var _ = Describe("Restore CRD", func() {
	It("defaults itemOperationTimeout and accepts a full spec", func() {
		rs := newRestore(cairnv1.RestoreSpec{
			BackupName: "nightly", IncludedNamespaces: []string{"shop", "team-*"}, ExcludedNamespaces: []string{"kube-*"},
			IncludedResources: []string{"configmaps"}, ExcludedResources: []string{"secrets"}, IncludeClusterResources: ptr.To(false),
			LabelSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			NamespaceMapping:       map[string]cairnv1.NamespaceName{"shop": "shop-copy"},
			ExistingResourcePolicy: cairnv1.ExistingResourcePolicyUpdate,
			RestoreStatus:          &cairnv1.RestoreStatusSpec{IncludedResources: []string{"widgets.example.com"}},
			PreserveNodePorts:      ptr.To(true), RestorePVs: ptr.To(false),
		})
		Expect(k8sClient.Create(ctx, rs)).To(Succeed())
		Expect(rs.Spec.ItemOperationTimeout).To(Equal(&metav1.Duration{Duration: 4 * time.Hour}))
	})

	DescribeTable("rejects bad specs at creation with a clear message",
		func(spec string, want string) {
			err := createRaw("Restore", "", spec)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), err.Error())
			Expect(err.Error()).To(ContainSubstring(want))
		},
		Entry("neither backupName nor scheduleName", `{}`, restoreSourceMessage),
		Entry("an empty backupName", `{"backupName":""}`, restoreSourceMessage),
		Entry("both", `{"backupName":"b","scheduleName":"s"}`, restoreSourceMessage),
		Entry("a mapping key that is not a namespace name", `{"backupName":"b","namespaceMapping":{"Shop":"x"}}`, "namespaceMapping keys must be namespace names"),
		Entry("a mapping key too long", `{"backupName":"b","namespaceMapping":{"`+longName(64)+`":"x"}}`, "namespaceMapping keys must be namespace names"),
		Entry("a mapping value that is not a namespace name", `{"backupName":"b","namespaceMapping":{"shop":"a/b"}}`, "spec.namespaceMapping.shop"),
		Entry("a mapping value too long", `{"backupName":"b","namespaceMapping":{"shop":"`+longName(64)+`"}}`, "spec.namespaceMapping.shop"),
		Entry("an empty mapping value", `{"backupName":"b","namespaceMapping":{"shop":""}}`, "spec.namespaceMapping.shop"),
		Entry("an unknown existingResourcePolicy", `{"backupName":"b","existingResourcePolicy":"replace"}`, "spec.existingResourcePolicy"),
		Entry("an unbounded itemOperationTimeout", `{"backupName":"b","itemOperationTimeout":"9999999999999h"}`, itemOperationTimeoutMessage),
		Entry("too many included namespaces", `{"backupName":"b","includedNamespaces":`+jsonStrings(101, 5)+`}`, "spec.includedNamespaces"),
	)

	It("refuses a name longer than 200 characters", func() {
		err := createRaw("Restore", longName(201), `{"backupName":"b"}`)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("a Restore's name may have at most 200 characters"))
	})

	DescribeTable("rejects every change of an immutable field",
		func(initial cairnv1.RestoreSpec, patch string) {
			if initial.BackupName == "" && initial.ScheduleName == "" {
				initial.BackupName = "b"
			}
			rs := newRestore(initial)
			Expect(k8sClient.Create(ctx, rs)).To(Succeed())
			err := mergePatch(rs, patch)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), err.Error())
			Expect(err.Error()).To(ContainSubstring(restoreImmutableMessage))
		},
		Entry("backupName", cairnv1.RestoreSpec{}, `{"spec":{"backupName":"other"}}`),
		Entry("scheduleName", cairnv1.RestoreSpec{ScheduleName: "s"}, `{"spec":{"scheduleName":"t"}}`),
		Entry("includedNamespaces added", cairnv1.RestoreSpec{}, `{"spec":{"includedNamespaces":["a"]}}`),
		Entry("excludedResources removed", cairnv1.RestoreSpec{ExcludedResources: []string{"secrets"}}, `{"spec":{"excludedResources":null}}`),
		Entry("namespaceMapping changed", cairnv1.RestoreSpec{NamespaceMapping: map[string]cairnv1.NamespaceName{"a": "b"}}, `{"spec":{"namespaceMapping":{"a":"c"}}}`),
		Entry("existingResourcePolicy", cairnv1.RestoreSpec{}, `{"spec":{"existingResourcePolicy":"update"}}`),
		Entry("restoreStatus", cairnv1.RestoreSpec{}, `{"spec":{"restoreStatus":{"includedResources":["pods"]}}}`),
		Entry("preserveNodePorts", cairnv1.RestoreSpec{}, `{"spec":{"preserveNodePorts":true}}`),
		Entry("restorePVs", cairnv1.RestoreSpec{RestorePVs: ptr.To(true)}, `{"spec":{"restorePVs":false}}`),
		Entry("labelSelector", cairnv1.RestoreSpec{}, `{"spec":{"labelSelector":{"matchLabels":{"a":"b"}}}}`),
		Entry("itemOperationTimeout", cairnv1.RestoreSpec{}, `{"spec":{"itemOperationTimeout":"1h"}}`),
	)

	It("accepts cancel going from false to true, and never back", func() {
		rs := newRestore(cairnv1.RestoreSpec{BackupName: "b"})
		Expect(k8sClient.Create(ctx, rs)).To(Succeed())
		Expect(mergePatch(rs, `{"spec":{"cancel":true}}`)).To(Succeed())
		Expect(rs.Spec.Cancel).To(BeTrue())
		err := mergePatch(rs, `{"spec":{"cancel":false}}`)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(restoreUncancelMessage))
	})

	It("accepts every phase of the owner table in status, and nothing else", func() {
		rs := newRestore(cairnv1.RestoreSpec{BackupName: "b"})
		Expect(k8sClient.Create(ctx, rs)).To(Succeed())
		for _, phase := range cairnv1.AllRestorePhases {
			rs.Status.Phase = phase
			Expect(k8sClient.Status().Update(ctx, rs)).To(Succeed(), string(phase))
		}
		rs.Status.Phase = "Deleting"
		Expect(k8sClient.Status().Update(ctx, rs)).NotTo(Succeed())
	})
})
