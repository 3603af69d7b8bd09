package v1alpha1_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

var _ = Describe("BackupStorageLocation format", func() {
	veleroSpec := func() cairnv1.BackupStorageLocationSpec {
		return cairnv1.BackupStorageLocationSpec{
			Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": "/velero"},
			Format: cairnv1.LocationFormatVelero, AccessMode: cairnv1.AccessModeReadOnly,
		}
	}
	newLocation := func(spec cairnv1.BackupStorageLocationSpec) *cairnv1.BackupStorageLocation {
		return &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("loc"), Namespace: "default"}, Spec: spec}
	}

	It("defaults to cairn", func() {
		l := newLocation(cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": "/data"}})
		Expect(k8sClient.Create(ctx, l)).To(Succeed())
		Expect(l.Spec.Format).To(Equal(cairnv1.LocationFormatCairn))
	})

	It("accepts a ReadOnly velero location", func() {
		Expect(k8sClient.Create(ctx, newLocation(veleroSpec()))).To(Succeed())
	})

	It("accepts the Secret of Velero's repository password on a velero location, and a change of it", func() {
		spec := veleroSpec()
		spec.Velero = &cairnv1.VeleroLocation{RepositoryPasswordSecretRef: &cairnv1.SecretKeyReference{Name: "velero-repo-credentials", Key: "repository-password"}}
		l := newLocation(spec)
		Expect(k8sClient.Create(ctx, l)).To(Succeed())
		Expect(mergePatch(l, `{"spec":{"velero":{"repositoryPasswordSecretRef":{"name":"other","key":"pw"}}}}`)).To(Succeed())
	})

	DescribeTable("refuses at creation",
		func(mutate func(*cairnv1.BackupStorageLocationSpec), want string) {
			spec := veleroSpec()
			mutate(&spec)
			err := k8sClient.Create(ctx, newLocation(spec))
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(want))
		},
		Entry("a velero location left ReadWrite (the default)", func(s *cairnv1.BackupStorageLocationSpec) { s.AccessMode = "" },
			"a location with format velero must have accessMode ReadOnly"),
		Entry("a velero location with encryption", func(s *cairnv1.BackupStorageLocationSpec) {
			s.Encryption = &cairnv1.LocationEncryption{KeySecretRef: cairnv1.LocalSecretReference{Name: "k"}, WriteKey: "k1"}
		}, "a location with format velero cannot have encryption"),
		Entry("an unknown format", func(s *cairnv1.BackupStorageLocationSpec) { s.Format = "restic" }, "spec.format"),
		Entry("velero settings on a cairn location", func(s *cairnv1.BackupStorageLocationSpec) {
			s.Format, s.AccessMode = cairnv1.LocationFormatCairn, cairnv1.AccessModeReadWrite
			s.Velero = &cairnv1.VeleroLocation{RepositoryPasswordSecretRef: &cairnv1.SecretKeyReference{Name: "p", Key: "k"}}
		}, "velero settings apply only to a location with format velero"),
		Entry("a password Secret without a key", func(s *cairnv1.BackupStorageLocationSpec) {
			s.Velero = &cairnv1.VeleroLocation{RepositoryPasswordSecretRef: &cairnv1.SecretKeyReference{Name: "p"}}
		}, "spec.velero.repositoryPasswordSecretRef.key"),
	)

	DescribeTable("refuses a change of format",
		func(from, to string) {
			spec := cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": "/d"},
				AccessMode: cairnv1.AccessModeReadOnly, Format: cairnv1.LocationFormat(from)}
			l := newLocation(spec)
			Expect(k8sClient.Create(ctx, l)).To(Succeed())
			err := mergePatch(l, `{"spec":{"format":"`+to+`"}}`)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring("format is chosen when a location is created"))
		},
		Entry("cairn to velero", "cairn", "velero"),
		Entry("velero to cairn", "velero", "cairn"),
	)

	It("refuses making a velero location ReadWrite later", func() {
		l := newLocation(veleroSpec())
		Expect(k8sClient.Create(ctx, l)).To(Succeed())
		err := mergePatch(l, `{"spec":{"accessMode":"ReadWrite"}}`)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("must have accessMode ReadOnly"))
	})
})
