package v1alpha1_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

const (
	immutableMessage = "spec is immutable after the backup is created: only spec.cancel may be changed, from false to true"
	uncancelMessage  = "spec.cancel cannot be changed back to false: a cancelled backup stays cancelled"
)

var nameCounter int

func uniqueName(prefix string) string {
	nameCounter++
	return fmt.Sprintf("%s-%d", prefix, nameCounter)
}

func newBackup(spec cairnv1.BackupSpec) *cairnv1.Backup {
	return &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("b"), Namespace: "default"},
		Spec:       spec,
	}
}

// mergePatch sends a raw JSON merge patch, as `kubectl patch --type merge` does.
func mergePatch(obj client.Object, patch string) error {
	return k8sClient.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
}

var _ = Describe("Backup CRD", func() {
	It("defaults ttl and itemOperationTimeout, even when spec is left out", func() {
		b := newBackup(cairnv1.BackupSpec{})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Expect(b.Spec.TTL).To(Equal(&metav1.Duration{Duration: 720 * time.Hour}))
		Expect(b.Spec.ItemOperationTimeout).To(Equal(&metav1.Duration{Duration: 4 * time.Hour}))
		Expect(b.Spec.Cancel).To(BeFalse())
	})

	It("keeps explicit durations", func() {
		b := newBackup(cairnv1.BackupSpec{TTL: &metav1.Duration{Duration: time.Hour}, ItemOperationTimeout: &metav1.Duration{Duration: 90 * time.Second}})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Expect(b.Spec.TTL.Duration).To(Equal(time.Hour))
		Expect(b.Spec.ItemOperationTimeout.Duration).To(Equal(90 * time.Second))
	})

	DescribeTable("rejects bad specs at creation",
		func(patch string, want string) {
			// An unstructured object, so that the raw JSON reaches the API server as written.
			u := &unstructured.Unstructured{}
			Expect(u.UnmarshalJSON([]byte(fmt.Sprintf(`{"apiVersion":"cairn.dev/v1alpha1","kind":"Backup","metadata":{"name":%q,"namespace":"default"},"spec":%s}`, uniqueName("bad"), patch)))).To(Succeed())
			err := k8sClient.Create(ctx, u)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), err.Error())
			Expect(err.Error()).To(ContainSubstring(want))
		},
		Entry("a ttl that is not a duration", `{"ttl":"forever"}`, "spec.ttl"),
		Entry("a negative ttl", `{"ttl":"-1h"}`, "spec.ttl"),
		Entry("a zero itemOperationTimeout", `{"itemOperationTimeout":"0s"}`, "itemOperationTimeout must be greater than zero"),
		Entry("an unknown field type", `{"includedNamespaces":"ns1"}`, "spec.includedNamespaces"),
		Entry("a too long location name", fmt.Sprintf(`{"storageLocation":%q}`, longName(254)), "spec.storageLocation"),
	)

	DescribeTable("rejects every change of an immutable field with a plain message",
		func(initial cairnv1.BackupSpec, patch string) {
			b := newBackup(initial)
			Expect(k8sClient.Create(ctx, b)).To(Succeed())
			err := mergePatch(b, patch)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), err.Error())
			Expect(err.Error()).To(ContainSubstring(immutableMessage))
		},
		Entry("includedNamespaces changed", cairnv1.BackupSpec{IncludedNamespaces: []string{"a"}}, `{"spec":{"includedNamespaces":["b"]}}`),
		Entry("includedNamespaces added", cairnv1.BackupSpec{}, `{"spec":{"includedNamespaces":["b"]}}`),
		Entry("includedNamespaces removed", cairnv1.BackupSpec{IncludedNamespaces: []string{"a"}}, `{"spec":{"includedNamespaces":null}}`),
		Entry("excludedNamespaces", cairnv1.BackupSpec{}, `{"spec":{"excludedNamespaces":["b"]}}`),
		Entry("includedResources", cairnv1.BackupSpec{}, `{"spec":{"includedResources":["configmaps"]}}`),
		Entry("excludedResources", cairnv1.BackupSpec{}, `{"spec":{"excludedResources":["secrets"]}}`),
		Entry("includeClusterResources", cairnv1.BackupSpec{IncludeClusterResources: ptr.To(false)}, `{"spec":{"includeClusterResources":true}}`),
		Entry("labelSelector", cairnv1.BackupSpec{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}}, `{"spec":{"labelSelector":{"matchLabels":{"app":"b"}}}}`),
		Entry("orLabelSelectors", cairnv1.BackupSpec{}, `{"spec":{"orLabelSelectors":[{"matchLabels":{"app":"b"}}]}}`),
		Entry("storageLocation", cairnv1.BackupSpec{StorageLocation: "one"}, `{"spec":{"storageLocation":"two"}}`),
		Entry("ttl", cairnv1.BackupSpec{}, `{"spec":{"ttl":"1h"}}`),
		Entry("itemOperationTimeout", cairnv1.BackupSpec{}, `{"spec":{"itemOperationTimeout":"1h"}}`),
		Entry("snapshotVolumes", cairnv1.BackupSpec{}, `{"spec":{"snapshotVolumes":false}}`),
		Entry("a spec change together with cancel", cairnv1.BackupSpec{}, `{"spec":{"cancel":true,"storageLocation":"other"}}`),
	)

	It("accepts cancel going from false to true, and keeps it", func() {
		b := newBackup(cairnv1.BackupSpec{IncludedNamespaces: []string{"a"}})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Expect(mergePatch(b, `{"spec":{"cancel":true}}`)).To(Succeed())
		Expect(b.Spec.Cancel).To(BeTrue())
		// Setting it to true again is not a change.
		Expect(mergePatch(b, `{"spec":{"cancel":true}}`)).To(Succeed())
	})

	DescribeTable("refuses to take cancel back",
		func(patch string) {
			b := newBackup(cairnv1.BackupSpec{})
			Expect(k8sClient.Create(ctx, b)).To(Succeed())
			Expect(mergePatch(b, `{"spec":{"cancel":true}}`)).To(Succeed())
			err := mergePatch(b, patch)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(uncancelMessage))
		},
		Entry("set to false", `{"spec":{"cancel":false}}`),
		Entry("removed", `{"spec":{"cancel":null}}`),
	)

	It("accepts a Go client's full update that keeps spec (durations written as 720h0m0s)", func() {
		b := newBackup(cairnv1.BackupSpec{IncludedNamespaces: []string{"a"}, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
		b.Finalizers = []string{cairnv1.BackupDataFinalizer}
		b.Labels = map[string]string{"team": "x"}
		Expect(k8sClient.Update(ctx, b)).To(Succeed())
		b.Spec.TTL = &metav1.Duration{Duration: 30 * 24 * time.Hour} // the same duration, written another way
		Expect(k8sClient.Update(ctx, b)).To(Succeed())
		b.Spec.TTL = &metav1.Duration{Duration: time.Hour}
		Expect(k8sClient.Update(ctx, b)).To(MatchError(ContainSubstring(immutableMessage)))
	})

	It("allows metadata changes, which leave spec alone", func() {
		b := newBackup(cairnv1.BackupSpec{IncludedNamespaces: []string{"a"}})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Expect(mergePatch(b, `{"metadata":{"labels":{"team":"x"}}}`)).To(Succeed())
	})

	It("accepts every phase of the owner table in status, and nothing else", func() {
		b := newBackup(cairnv1.BackupSpec{})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		for _, phase := range cairnv1.AllBackupPhases {
			err := k8sClient.Status().Patch(ctx, b, client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"status":{"phase":%q}}`, phase))))
			Expect(err).NotTo(HaveOccurred(), string(phase))
			Expect(b.Status.Phase).To(Equal(phase))
		}
		err := k8sClient.Status().Patch(ctx, b, client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`)))
		Expect(apierrors.IsInvalid(err)).To(BeTrue())
		Expect(err.Error()).To(ContainSubstring("status.phase"))
	})

	It("keeps status out of the main resource and spec out of the status subresource", func() {
		b := newBackup(cairnv1.BackupSpec{})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Expect(mergePatch(b, `{"status":{"phase":"Completed"}}`)).To(Succeed())
		Expect(b.Status.Phase).To(BeEmpty())
		Expect(k8sClient.Status().Patch(ctx, b, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"storageLocation":"x"},"status":{"queuePosition":3}}`)))).To(Succeed())
		Expect(b.Spec.StorageLocation).To(BeEmpty())
		Expect(b.Status.QueuePosition).To(Equal(int32(3)))
	})
})

var _ = Describe("BackupStorageLocation CRD", func() {
	newLocation := func(spec cairnv1.BackupStorageLocationSpec) *cairnv1.BackupStorageLocation {
		return &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("loc"), Namespace: "default"}, Spec: spec}
	}

	It("defaults accessMode and validationFrequency", func() {
		l := newLocation(cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": "/data"}})
		Expect(k8sClient.Create(ctx, l)).To(Succeed())
		Expect(l.Spec.AccessMode).To(Equal(cairnv1.AccessModeReadWrite))
		Expect(l.Spec.ValidationFrequency.Duration).To(Equal(time.Minute))
	})

	It("accepts a complete s3 location", func() {
		l := newLocation(cairnv1.BackupStorageLocationSpec{
			Provider:      cairnv1.StorageProviderS3,
			ObjectStorage: &cairnv1.ObjectStorage{Bucket: "backups", Prefix: "cluster-a"},
			Config:        map[string]string{"region": "us-east-1", "endpoint": "http://127.0.0.1:9000", "forcePathStyle": "true"},
			Credential:    &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s3"}, Key: "cloud"},
			AccessMode:    cairnv1.AccessModeReadOnly,
		})
		Expect(k8sClient.Create(ctx, l)).To(Succeed())
	})

	DescribeTable("rejects incomplete locations",
		func(spec cairnv1.BackupStorageLocationSpec, want string) {
			err := k8sClient.Create(ctx, newLocation(spec))
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), err.Error())
			Expect(err.Error()).To(ContainSubstring(want))
		},
		Entry("s3 without a bucket", cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderS3}, "an s3 location needs objectStorage.bucket"),
		Entry("s3 with an empty bucket", cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderS3, ObjectStorage: &cairnv1.ObjectStorage{Prefix: "p"}}, "an s3 location needs objectStorage.bucket"),
		Entry("filesystem without a path", cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem}, "a filesystem location needs config.path"),
		Entry("an unknown provider", cairnv1.BackupStorageLocationSpec{Provider: "gcs"}, "spec.provider"),
		Entry("an unknown access mode", cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": "/d"}, AccessMode: "WriteOnly"}, "spec.accessMode"),
	)
})

func longName(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
	}
	return string(b)
}
