package v1alpha1_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
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
		Entry("a hook spec without a name", `{"backupName":"b","hooks":{"resources":[{"postHooks":[{"exec":{"command":["true"]}}]}]}}`, "spec.hooks.resources[0].name: Required"),
		Entry("a hook that is both init and exec", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":[{"exec":{"command":["true"]},"init":{"initContainers":[{"name":"i","image":"x"}]}}]}]}}`, "a restore hook is exactly one of init and exec"),
		Entry("a hook that is neither", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":[{}]}]}}`, "a restore hook is exactly one of init and exec"),
		Entry("an init hook without containers", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":[{"init":{"initContainers":[]}}]}]}}`, "spec.hooks.resources[0].postHooks[0].init.initContainers"),
		Entry("an init hook container without a name", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":[{"init":{"initContainers":[{"image":"x"}]}}]}]}}`, "spec.hooks.resources[0].postHooks[0].init.initContainers[0].name: Required"),
		Entry("6 init containers", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":[{"init":{"initContainers":`+jsonSelectors(6, `{"name":"i"}`)+`}}]}]}}`, "spec.hooks.resources[0].postHooks[0].init.initContainers: Too many"),
		Entry("an init container with 101 args", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":[{"init":{"initContainers":[{"name":"i","args":`+jsonStrings(101, 6)+`}]}}]}]}}`, "an init hook's container may have at most 100 command words"),
		Entry("an exec hook without a command", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":[{"exec":{"container":"c"}}]}]}}`, "spec.hooks.resources[0].postHooks[0].exec.command: Required"),
		Entry("an exec hook's unknown onError", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":[{"exec":{"command":["true"],"onError":"Ignore"}}]}]}}`, "spec.hooks.resources[0].postHooks[0].exec.onError: Unsupported value"),
		Entry("an execTimeout of a day", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":[{"exec":{"command":["true"],"execTimeout":"24h"}}]}]}}`, "execTimeout must be a duration from 1s to 1h"),
		Entry("a waitTimeout that is not a duration", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":[{"exec":{"command":["true"],"waitTimeout":"soon"}}]}]}}`, "waitTimeout must be a duration from 1s to 87600h"),
		Entry("an init hook timeout of a day", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":[{"init":{"initContainers":[{"name":"i"}],"timeout":"24h"}}]}]}}`, "timeout must be a duration from 1s to 1h"),
		Entry("11 hook specs", `{"backupName":"b","hooks":{"resources":`+jsonSelectors(11, `{"name":"h"}`)+`}}`, "spec.hooks.resources: Too many"),
		Entry("6 post hooks", `{"backupName":"b","hooks":{"resources":[{"name":"h","postHooks":`+jsonSelectors(6, `{"exec":{"command":["true"]}}`)+`}]}}`, "spec.hooks.resources[0].postHooks: Too many"),
	)

	It("accepts init and exec restore hooks, with exec defaults", func() {
		rs := newRestore(cairnv1.RestoreSpec{BackupName: "b", Hooks: &cairnv1.RestoreHooks{Resources: []cairnv1.RestoreResourceHookSpec{{
			Name: "db", IncludedNamespaces: []string{"shop"},
			PostHooks: []cairnv1.RestoreResourceHook{
				{Init: &cairnv1.InitRestoreHook{InitContainers: []corev1.Container{{Name: "migrate", Image: "db:1", Command: []string{"/migrate"}}}}},
				{Exec: &cairnv1.RestoreExecHook{Container: "db", Command: []string{"/reindex"}, WaitTimeout: &metav1.Duration{Duration: time.Minute}, WaitForReady: ptr.To(true)}},
			},
		}}}})
		Expect(k8sClient.Create(ctx, rs)).To(Succeed())
		Expect(rs.Spec.Hooks.Resources[0].PostHooks[1].Exec.OnError).To(Equal(cairnv1.HookErrorModeFail))
		Expect(rs.Spec.Hooks.Resources[0].PostHooks[0].Init.InitContainers[0].Image).To(Equal("db:1"))
	})

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
		Entry("hooks added", cairnv1.RestoreSpec{}, `{"spec":{"hooks":{"resources":[{"name":"h","postHooks":[{"exec":{"command":["true"]}}]}]}}}`),
		Entry("an init hook's image changed", cairnv1.RestoreSpec{Hooks: &cairnv1.RestoreHooks{Resources: []cairnv1.RestoreResourceHookSpec{{Name: "h",
			PostHooks: []cairnv1.RestoreResourceHook{{Init: &cairnv1.InitRestoreHook{InitContainers: []corev1.Container{{Name: "i", Image: "a"}}}}}}}}},
			`{"spec":{"hooks":{"resources":[{"name":"h","postHooks":[{"init":{"initContainers":[{"name":"i","image":"b"}]}}]}]}}}`),
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
