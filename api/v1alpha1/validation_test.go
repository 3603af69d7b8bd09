package v1alpha1_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	It("defaults itemOperationTimeout, even when spec is left out, and leaves ttl to the manager's --default-backup-ttl", func() {
		b := newBackup(cairnv1.BackupSpec{})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Expect(b.Spec.TTL).To(BeNil())
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
		func(spec string, want string) {
			err := createRaw("Backup", "", spec)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), err.Error())
			Expect(err.Error()).To(ContainSubstring(want))
		},
		Entry("an unknown field type", `{"includedNamespaces":"ns1"}`, "spec.includedNamespaces"),
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
		Entry("defaultVolumesToFsBackup added", cairnv1.BackupSpec{}, `{"spec":{"defaultVolumesToFsBackup":true}}`),
		Entry("defaultVolumesToFsBackup changed", cairnv1.BackupSpec{DefaultVolumesToFsBackup: ptr.To(true)}, `{"spec":{"defaultVolumesToFsBackup":false}}`),
		Entry("metadata.labels", cairnv1.BackupSpec{Metadata: &cairnv1.BackupMetadata{Labels: map[string]string{"tier": "gold"}}}, `{"spec":{"metadata":{"labels":{"tier":"silver"}}}}`),
		Entry("metadata added", cairnv1.BackupSpec{}, `{"spec":{"metadata":{"labels":{"tier":"silver"}}}}`),
		Entry("hooks added", cairnv1.BackupSpec{}, `{"spec":{"hooks":{"resources":[{"name":"h","pre":[{"exec":{"command":["true"]}}]}]}}}`),
		Entry("a hook's command changed", cairnv1.BackupSpec{Hooks: &cairnv1.BackupHooks{Resources: []cairnv1.BackupResourceHookSpec{{Name: "h", Pre: []cairnv1.BackupResourceHook{{Exec: &cairnv1.ExecHook{Command: []string{"true"}}}}}}}}, `{"spec":{"hooks":{"resources":[{"name":"h","pre":[{"exec":{"command":["false"]}}]}]}}}`),
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
		Expect(createRaw("Backup", "go-update", `{"includedNamespaces":["a"],"labelSelector":{"matchLabels":{"app":"x"}},"ttl":"720h"}`)).To(Succeed())
		b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "go-update"}}
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

	It("accepts complete azure and gcs locations", func() {
		Expect(k8sClient.Create(ctx, newLocation(cairnv1.BackupStorageLocationSpec{
			Provider:      cairnv1.StorageProviderAzure,
			ObjectStorage: &cairnv1.ObjectStorage{Bucket: "backups", Prefix: "cluster-a"},
			Config:        map[string]string{"storageAccount": "cairnbackups"},
			Credential:    &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "azure"}, Key: "cloud"},
		}))).To(Succeed())
		Expect(k8sClient.Create(ctx, newLocation(cairnv1.BackupStorageLocationSpec{
			Provider: cairnv1.StorageProviderGCS, ObjectStorage: &cairnv1.ObjectStorage{Bucket: "cairn-backups"},
		}))).To(Succeed())
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
		Entry("an unknown provider", cairnv1.BackupStorageLocationSpec{Provider: "swift"}, "spec.provider"),
		Entry("azure without a container", cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderAzure, Config: map[string]string{"storageAccount": "acct"}},
			"an azure location needs objectStorage.bucket: the name of its blob container"),
		Entry("azure without a storage account", cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderAzure, ObjectStorage: &cairnv1.ObjectStorage{Bucket: "backups"}},
			"an azure location needs config.storageAccount"),
		Entry("azure with a storage account Azure would refuse", cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderAzure,
			ObjectStorage: &cairnv1.ObjectStorage{Bucket: "backups"}, Config: map[string]string{"storageAccount": "Cairn-Backups"}}, "3 to 24 lowercase letters and digits"),
		Entry("gcs without a bucket", cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderGCS}, "a gcs location needs objectStorage.bucket"),
		Entry("an unknown access mode", cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": "/d"}, AccessMode: "WriteOnly"}, "spec.accessMode"),
		Entry("object lock on a filesystem location", cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": "/d"},
			ObjectLock: &cairnv1.LocationObjectLock{Mode: cairnv1.ObjectLockModeCompliance, MinRetention: metav1.Duration{Duration: time.Hour}}}, "a filesystem location cannot lock its objects"),
		Entry("an unknown object lock mode", lockedS3Spec("Legal", "1h"), "spec.objectLock.mode"),
		Entry("a minRetention under a second", lockedS3Spec(cairnv1.ObjectLockModeGovernance, "500ms"), "objectLock.minRetention must be a duration from 1s to 87600h"),
		Entry("a minRetention over ten years", lockedS3Spec(cairnv1.ObjectLockModeGovernance, "87601h"), "objectLock.minRetention must be a duration from 1s to 87600h"),
		Entry("a minRetention of zero", lockedS3Spec(cairnv1.ObjectLockModeGovernance, "0s"), "objectLock.minRetention must be a duration from 1s to 87600h"),
		Entry("a team lock limit without object lock", cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": "/d"},
			TeamLimits: &cairnv1.LocationTeamLimits{MaxLockRetention: &metav1.Duration{Duration: time.Hour}}}, "teamLimits.maxLockRetention bounds Object Lock retention: it applies only to a location with objectLock"),
		Entry("a team lock limit under minRetention", withTeamLimits(lockedS3Spec(cairnv1.ObjectLockModeCompliance, "720h"),
			cairnv1.LocationTeamLimits{MaxLockRetention: &metav1.Duration{Duration: 24 * time.Hour}}), "teamLimits.maxLockRetention must be at least objectLock.minRetention"),
		Entry("a team maxTTL of zero", withTeamLimits(lockedS3Spec(cairnv1.ObjectLockModeCompliance, "1h"),
			cairnv1.LocationTeamLimits{MaxTTL: &metav1.Duration{}}), "teamLimits.maxTTL must be a duration from 1s to 87600h"),
	)

	It("accepts limits for teams, and keeps them", func() {
		l := newLocation(withTeamLimits(lockedS3Spec(cairnv1.ObjectLockModeCompliance, "720h"), cairnv1.LocationTeamLimits{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}},
			MaxTTL:            &metav1.Duration{Duration: 720 * time.Hour},
			MaxLockRetention:  &metav1.Duration{Duration: 720 * time.Hour},
		}))
		Expect(k8sClient.Create(ctx, l)).To(Succeed())
		Expect(l.Spec.TeamLimits.NamespaceSelector.MatchLabels).To(Equal(map[string]string{"tier": "prod"}))
		Expect(l.Spec.TeamLimits.MaxLockRetention.Duration).To(Equal(720 * time.Hour))
		By("a later minRetention over the limit is refused")
		err := mergePatch(l, `{"spec":{"objectLock":{"minRetention":"721h"}}}`)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	})

	It("accepts object lock on azure and gcs locations", func() {
		lock := &cairnv1.LocationObjectLock{Mode: cairnv1.ObjectLockModeGovernance, MinRetention: metav1.Duration{Duration: time.Hour}}
		Expect(k8sClient.Create(ctx, newLocation(cairnv1.BackupStorageLocationSpec{
			Provider: cairnv1.StorageProviderAzure, ObjectStorage: &cairnv1.ObjectStorage{Bucket: "backups"},
			Config: map[string]string{"storageAccount": "cairnbackups"}, ObjectLock: lock,
		}))).To(Succeed())
		Expect(k8sClient.Create(ctx, newLocation(cairnv1.BackupStorageLocationSpec{
			Provider: cairnv1.StorageProviderGCS, ObjectStorage: &cairnv1.ObjectStorage{Bucket: "cairn-backups"}, ObjectLock: lock,
		}))).To(Succeed())
	})

	It("accepts object lock on an s3 location, and a new minRetention later", func() {
		l := newLocation(lockedS3Spec(cairnv1.ObjectLockModeCompliance, "720h"))
		Expect(k8sClient.Create(ctx, l)).To(Succeed())
		Expect(mergePatch(l, `{"spec":{"objectLock":{"minRetention":"24h"}}}`)).To(Succeed())
		Expect(l.Spec.ObjectLock.MinRetention.Duration).To(Equal(24 * time.Hour))
	})

	DescribeTable("refuses to turn object lock on or off, or to change its mode, after creation",
		func(lock *cairnv1.LocationObjectLock, patch, want string) {
			spec := lockedS3Spec(cairnv1.ObjectLockModeGovernance, "1h")
			spec.ObjectLock = lock
			l := newLocation(spec)
			Expect(k8sClient.Create(ctx, l)).To(Succeed())
			err := mergePatch(l, patch)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(want))
		},
		Entry("turned off", &cairnv1.LocationObjectLock{Mode: cairnv1.ObjectLockModeGovernance, MinRetention: metav1.Duration{Duration: time.Hour}},
			`{"spec":{"objectLock":null}}`, "objectLock is chosen when a location is created: it cannot be turned on or off later"),
		Entry("turned on", nil,
			`{"spec":{"objectLock":{"mode":"Compliance","minRetention":"1h"}}}`, "objectLock is chosen when a location is created: it cannot be turned on or off later"),
		Entry("mode changed", &cairnv1.LocationObjectLock{Mode: cairnv1.ObjectLockModeCompliance, MinRetention: metav1.Duration{Duration: time.Hour}},
			`{"spec":{"objectLock":{"mode":"Governance"}}}`, "objectLock.mode cannot change"),
	)
})

// withTeamLimits is spec with limits for teams.
func withTeamLimits(spec cairnv1.BackupStorageLocationSpec, limits cairnv1.LocationTeamLimits) cairnv1.BackupStorageLocationSpec {
	spec.TeamLimits = &limits
	return spec
}

// lockedS3Spec is an s3 location with object lock of mode and minRetention (unchecked strings,
// so that bad values reach the API server).
func lockedS3Spec(mode cairnv1.ObjectLockMode, minRetention string) cairnv1.BackupStorageLocationSpec {
	d, err := time.ParseDuration(minRetention)
	if err != nil {
		panic(err)
	}
	return cairnv1.BackupStorageLocationSpec{
		Provider:      cairnv1.StorageProviderS3,
		ObjectStorage: &cairnv1.ObjectStorage{Bucket: "locked"},
		ObjectLock:    &cairnv1.LocationObjectLock{Mode: mode, MinRetention: metav1.Duration{Duration: d}},
	}
}

func longName(n int) string {
	return strings.Repeat("a", n)
}

// createRaw creates an object of kind in namespace default from raw JSON (an unstructured
// object, so that it reaches the API server exactly as written). An empty name is made unique.
func createRaw(kind, name, spec string) error {
	if name == "" {
		name = uniqueName("raw")
	}
	u := &unstructured.Unstructured{}
	Expect(u.UnmarshalJSON([]byte(fmt.Sprintf(`{"apiVersion":"cairn.dev/v1alpha1","kind":%q,"metadata":{"name":%q,"namespace":"default"},"spec":%s}`,
		kind, name, spec)))).To(Succeed())
	return k8sClient.Create(ctx, u)
}

// The messages of the duration rules (docs/validation.md).
const (
	ttlMessage                  = "ttl must be 0s (never expire) or a duration from 1s to 87600h (10 years)"
	itemOperationTimeoutMessage = "itemOperationTimeout must be a duration from 1s to 87600h (10 years)"
	validationFrequencyMessage  = "validationFrequency must be 0s (off) or a duration from 1s to 87600h (10 years)"
	backupSyncPeriodMessage     = "backupSyncPeriod must be 0s (off) or a duration from 1s to 87600h (10 years)"
)

// worstParseableDuration is the largest sum the duration rules' pattern lets through within
// maxLength 32: CEL's duration() must parse it (not fail evaluating) so the range check can
// refuse it with its own message.
const worstParseableDuration = "99999h9999999m999999999s9999ms"

// jsonStrings is a JSON list of n distinct strings of exactly width characters.
func jsonStrings(n, width int) string {
	items := make([]string, n)
	for i := range items {
		s := fmt.Sprintf("x%d-", i)
		items[i] = fmt.Sprintf("%q", s+strings.Repeat("a", width-len(s)))
	}
	return "[" + strings.Join(items, ",") + "]"
}

// jsonSelector is a label selector with the given numbers of matchLabels and matchExpressions,
// each expression an In with values.
func jsonSelector(labels, expressions, values int) string {
	ls := make([]string, labels)
	for i := range ls {
		ls[i] = fmt.Sprintf(`"key-%d":"value"`, i)
	}
	vs := make([]string, values)
	for i := range vs {
		vs[i] = fmt.Sprintf(`"v%d"`, i)
	}
	es := make([]string, expressions)
	for i := range es {
		es[i] = fmt.Sprintf(`{"key":"expr-%d","operator":"In","values":[%s]}`, i, strings.Join(vs, ","))
	}
	return fmt.Sprintf(`{"matchLabels":{%s},"matchExpressions":[%s]}`, strings.Join(ls, ","), strings.Join(es, ","))
}

// jsonSelectors is a JSON list of n selectors.
func jsonSelectors(n int, selector string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(selector+",", n), ",") + "]"
}

// The bad-input table, part one: what the API server refuses. Part two, what passes admission
// and ends in FailedValidation, is internal/controller/badinput_test.go.
var _ = Describe("Bad input refused at admission", func() {
	DescribeTable("Backup",
		func(name, spec string, want ...string) {
			err := createRaw("Backup", name, spec)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), err.Error())
			for _, w := range want {
				Expect(err.Error()).To(ContainSubstring(w))
			}
			// A rule that failed to evaluate would say so; every refusal must be a plain message.
			Expect(err.Error()).NotTo(ContainSubstring("evaluating rule"))
			Expect(err.Error()).NotTo(ContainSubstring("invalid duration"))
		},
		Entry("a ttl that overflows Go's duration parser", "", `{"ttl":"9999999999999h"}`, ttlMessage),
		Entry("a ttl of the most hours Go can parse, plus one", "", `{"ttl":"2562048h"}`, ttlMessage),
		Entry("a ttl of max int64 nanoseconds", "", `{"ttl":"9223372036854775807ns"}`, ttlMessage),
		Entry("the largest ttl the pattern lets through", "", fmt.Sprintf(`{"ttl":%q}`, worstParseableDuration), ttlMessage),
		Entry("a ttl just over ten years", "", `{"ttl":"87600h1s"}`, ttlMessage),
		Entry("a ttl of zero written with two zeros and no unit", "", `{"ttl":"00"}`, ttlMessage),
		Entry("a ttl of a nanosecond", "", `{"ttl":"1ns"}`, ttlMessage),
		Entry("a tiny ttl", "", `{"ttl":"999ms"}`, ttlMessage),
		Entry("a negative ttl", "", `{"ttl":"-1h"}`, ttlMessage),
		Entry("a ttl that is not a duration", "", `{"ttl":"forever"}`, ttlMessage),
		Entry("an empty ttl", "", `{"ttl":""}`, ttlMessage),
		Entry("a ttl in days", "", `{"ttl":"30d"}`, ttlMessage),
		Entry("a ttl with a space", "", `{"ttl":"1h 30m"}`, ttlMessage),
		Entry("a ttl with a unit twice", "", `{"ttl":"1h1h"}`, ttlMessage),
		Entry("a ttl longer than 32 characters", "", fmt.Sprintf(`{"ttl":"%sh"}`, strings.Repeat("0", 32)), "spec.ttl: Too long"),
		Entry("an itemOperationTimeout that overflows", "", `{"itemOperationTimeout":"9999999999999h"}`, itemOperationTimeoutMessage),
		Entry("a zero itemOperationTimeout", "", `{"itemOperationTimeout":"0s"}`, itemOperationTimeoutMessage),
		Entry("a tiny itemOperationTimeout", "", `{"itemOperationTimeout":"1ns"}`, itemOperationTimeoutMessage),
		Entry("101 includedNamespaces", "", fmt.Sprintf(`{"includedNamespaces":%s}`, jsonStrings(101, 10)), "spec.includedNamespaces: Too many"),
		Entry("101 excludedNamespaces", "", fmt.Sprintf(`{"excludedNamespaces":%s}`, jsonStrings(101, 10)), "spec.excludedNamespaces: Too many"),
		Entry("a namespace pattern of 64 characters", "", fmt.Sprintf(`{"includedNamespaces":[%q]}`, longName(63)+"*"), "spec.includedNamespaces[0]: Too long"),
		Entry("101 includedResources", "", fmt.Sprintf(`{"includedResources":%s}`, jsonStrings(101, 10)), "spec.includedResources: Too many"),
		Entry("101 excludedResources", "", fmt.Sprintf(`{"excludedResources":%s}`, jsonStrings(101, 10)), "spec.excludedResources: Too many"),
		Entry("a resource name of 254 characters", "", fmt.Sprintf(`{"excludedResources":[%q]}`, longName(254)), "spec.excludedResources[0]: Too long"),
		Entry("21 matchLabels", "", fmt.Sprintf(`{"labelSelector":%s}`, jsonSelector(21, 0, 0)), "spec.labelSelector: Invalid value", "matchLabels may have at most 20 entries"),
		Entry("21 matchExpressions", "", fmt.Sprintf(`{"labelSelector":%s}`, jsonSelector(0, 21, 1)), "spec.labelSelector: Invalid value", "matchExpressions may have at most 20 entries"),
		Entry("21 orLabelSelectors", "", fmt.Sprintf(`{"orLabelSelectors":%s}`, jsonSelectors(21, `{}`)), "spec.orLabelSelectors: Too many"),
		Entry("21 matchLabels in an orLabelSelector", "", fmt.Sprintf(`{"orLabelSelectors":[{},%s]}`, jsonSelector(21, 0, 0)), "spec.orLabelSelectors[1]: Invalid value", "matchLabels may have at most 20 entries"),
		Entry("a storage location that climbs a directory", "", `{"storageLocation":"../other"}`, "storageLocation must be the name of a BackupStorageLocation"),
		Entry("a hook spec without a name", "", `{"hooks":{"resources":[{"pre":[{"exec":{"command":["true"]}}]}]}}`, "spec.hooks.resources[0].name: Required"),
		Entry("a hook without a command", "", `{"hooks":{"resources":[{"name":"h","pre":[{"exec":{"container":"c"}}]}]}}`, "spec.hooks.resources[0].pre[0].exec.command: Required"),
		Entry("a hook with an empty command", "", `{"hooks":{"resources":[{"name":"h","pre":[{"exec":{"command":[]}}]}]}}`, "spec.hooks.resources[0].pre[0].exec.command"),
		Entry("a hook's unknown onError", "", `{"hooks":{"resources":[{"name":"h","post":[{"exec":{"command":["true"],"onError":"Ignore"}}]}]}}`, "spec.hooks.resources[0].post[0].exec.onError: Unsupported value"),
		Entry("a hook timeout of a day", "", `{"hooks":{"resources":[{"name":"h","pre":[{"exec":{"command":["true"],"timeout":"24h"}}]}]}}`, "timeout must be a duration from 1s to 1h"),
		Entry("a hook timeout that is not a duration", "", `{"hooks":{"resources":[{"name":"h","pre":[{"exec":{"command":["true"],"timeout":"soon"}}]}]}}`, "timeout must be a duration from 1s to 1h"),
		Entry("11 hook specs", "", fmt.Sprintf(`{"hooks":{"resources":%s}}`, jsonSelectors(11, `{"name":"h"}`)), "spec.hooks.resources: Too many"),
		Entry("6 pre hooks", "", fmt.Sprintf(`{"hooks":{"resources":[{"name":"h","pre":%s}]}}`, jsonSelectors(6, `{"exec":{"command":["true"]}}`)), "spec.hooks.resources[0].pre: Too many"),
		Entry("a command of 21 words", "", fmt.Sprintf(`{"hooks":{"resources":[{"name":"h","pre":[{"exec":{"command":%s}}]}]}}`, jsonStrings(21, 4)), "spec.hooks.resources[0].pre[0].exec.command: Too many"),
		Entry("a storage location in capitals", "", `{"storageLocation":"Default"}`, "storageLocation must be the name of a BackupStorageLocation"),
		Entry("a storage location of 254 characters", "", fmt.Sprintf(`{"storageLocation":%q}`, longName(254)), "spec.storageLocation: Too long"),
		Entry("a name of 201 characters", longName(201), `{}`, "a Backup's name may have at most 200 characters"),
		Entry("a name that is not a DNS subdomain", "Nightly_Backup", `{}`, "metadata.name"),
	)

	DescribeTable("BackupStorageLocation",
		func(name, spec, want string) {
			err := createRaw("BackupStorageLocation", name, spec)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), err.Error())
			Expect(err.Error()).To(ContainSubstring(want))
			Expect(err.Error()).NotTo(ContainSubstring("evaluating rule"))
		},
		Entry("a validationFrequency that overflows", "", `{"provider":"filesystem","config":{"path":"/d"},"validationFrequency":"9999999999999h"}`, validationFrequencyMessage),
		Entry("the largest validationFrequency the pattern lets through", "", fmt.Sprintf(`{"provider":"filesystem","config":{"path":"/d"},"validationFrequency":%q}`, worstParseableDuration), validationFrequencyMessage),
		Entry("a validationFrequency under a second", "", `{"provider":"filesystem","config":{"path":"/d"},"validationFrequency":"500ms"}`, validationFrequencyMessage),
		Entry("a validationFrequency of a nanosecond", "", `{"provider":"filesystem","config":{"path":"/d"},"validationFrequency":"1ns"}`, validationFrequencyMessage),
		Entry("a negative validationFrequency", "", `{"provider":"filesystem","config":{"path":"/d"},"validationFrequency":"-1m"}`, validationFrequencyMessage),
		Entry("a backupSyncPeriod under a second", "", `{"provider":"filesystem","config":{"path":"/d"},"backupSyncPeriod":"500ms"}`, backupSyncPeriodMessage),
		Entry("a negative backupSyncPeriod", "", `{"provider":"filesystem","config":{"path":"/d"},"backupSyncPeriod":"-1m"}`, backupSyncPeriodMessage),
		Entry("a backupSyncPeriod over ten years", "", `{"provider":"filesystem","config":{"path":"/d"},"backupSyncPeriod":"87601h"}`, backupSyncPeriodMessage),
		Entry("a backupSyncPeriod in days", "", `{"provider":"filesystem","config":{"path":"/d"},"backupSyncPeriod":"1d"}`, backupSyncPeriodMessage),
		Entry("a prefix that is ..", "", `{"provider":"s3","objectStorage":{"bucket":"backups","prefix":".."}}`, "objectStorage.prefix must not have a '.' or '..' path segment"),
		Entry("a prefix that starts with ../", "", `{"provider":"s3","objectStorage":{"bucket":"backups","prefix":"../other"}}`, "objectStorage.prefix must not have a '.' or '..' path segment"),
		Entry("a prefix with a .. segment inside", "", `{"provider":"s3","objectStorage":{"bucket":"backups","prefix":"a/../b"}}`, "objectStorage.prefix must not have a '.' or '..' path segment"),
		Entry("a prefix that ends with /..", "", `{"provider":"filesystem","config":{"path":"/d"},"objectStorage":{"prefix":"a/.."}}`, "objectStorage.prefix must not have a '.' or '..' path segment"),
		Entry("a prefix with a . segment", "", `{"provider":"s3","objectStorage":{"bucket":"backups","prefix":"a/./b"}}`, "objectStorage.prefix must not have a '.' or '..' path segment"),
		Entry("an absolute prefix", "", `{"provider":"s3","objectStorage":{"bucket":"backups","prefix":"/abs"}}`, "objectStorage.prefix must be relative to the bucket"),
		Entry("a prefix with an empty segment", "", `{"provider":"s3","objectStorage":{"bucket":"backups","prefix":"a//b"}}`, "objectStorage.prefix must not have an empty path segment"),
		Entry("a prefix with a backslash", "", `{"provider":"s3","objectStorage":{"bucket":"backups","prefix":"a\\..\\b"}}`, "objectStorage.prefix may contain only letters, digits"),
		Entry("a prefix with a space", "", `{"provider":"s3","objectStorage":{"bucket":"backups","prefix":"cluster a"}}`, "objectStorage.prefix may contain only letters, digits"),
		Entry("a prefix with a NUL", "", `{"provider":"s3","objectStorage":{"bucket":"backups","prefix":"a\u0000b"}}`, "objectStorage.prefix may contain only letters, digits"),
		Entry("a prefix of 257 characters", "", fmt.Sprintf(`{"provider":"s3","objectStorage":{"bucket":"backups","prefix":%q}}`, longName(257)), "spec.objectStorage.prefix: Too long"),
		Entry("a bucket in capitals with an underscore", "", `{"provider":"s3","objectStorage":{"bucket":"My_Bucket"}}`, "objectStorage.bucket must be an S3 bucket name"),
		Entry("a bucket of two characters", "", `{"provider":"s3","objectStorage":{"bucket":"ab"}}`, "objectStorage.bucket must be an S3 bucket name"),
		Entry("a bucket that looks like an IP address", "", `{"provider":"s3","objectStorage":{"bucket":"192.168.1.1"}}`, "objectStorage.bucket must be an S3 bucket name"),
		Entry("a bucket with ..", "", `{"provider":"s3","objectStorage":{"bucket":"a..b"}}`, "objectStorage.bucket must be an S3 bucket name"),
		Entry("a bucket that starts with -", "", `{"provider":"s3","objectStorage":{"bucket":"-backups"}}`, "objectStorage.bucket must be an S3 bucket name"),
		Entry("a bucket with a slash", "", `{"provider":"s3","objectStorage":{"bucket":"backups/other"}}`, "objectStorage.bucket must be an S3 bucket name"),
		Entry("a bucket of 64 characters", "", fmt.Sprintf(`{"provider":"s3","objectStorage":{"bucket":%q}}`, longName(64)), "spec.objectStorage.bucket: Too long"),
		Entry("a name that is not a DNS subdomain", "Primary_Store", `{"provider":"filesystem","config":{"path":"/d"}}`, "metadata.name"),
		Entry("a name that climbs a directory", "..", `{"provider":"filesystem","config":{"path":"/d"}}`, "metadata.name"),
	)
})

var _ = Describe("Limits accepted at admission", func() {
	DescribeTable("Backup",
		func(name, spec string) {
			Expect(createRaw("Backup", name, spec)).To(Succeed())
		},
		Entry("a ttl of exactly ten years", "", `{"ttl":"87600h"}`),
		Entry("a ttl of ten years as Go writes it", "", `{"ttl":"87600h0m0s"}`),
		Entry("the longest ttl Go writes", "", `{"ttl":"87599h59m59.999999999s"}`),
		Entry("a ttl of ten years in minutes", "", `{"ttl":"5256000m"}`),
		Entry("a ttl of ten years in seconds", "", `{"ttl":"315360000s"}`),
		Entry("a ttl of ten years in nanoseconds", "", `{"ttl":"315360000000000000ns"}`),
		Entry("a ttl of one second", "", `{"ttl":"1s"}`),
		Entry("a ttl of 0s: never expire", "", `{"ttl":"0s"}`),
		Entry("a ttl of 0: never expire", "", `{"ttl":"0"}`),
		Entry("a ttl of zero in other units", "", `{"ttl":"0h0m0s"}`),
		Entry("a fractional ttl", "", `{"ttl":"1.5h"}`),
		Entry("a ttl with every unit", "", `{"ttl":"1h1m1s1ms1us1ns"}`),
		Entry("an itemOperationTimeout of a second and a half", "", `{"itemOperationTimeout":"1s500ms"}`),
		Entry("a max-size spec", "", fmt.Sprintf(`{"includedNamespaces":%s,"excludedNamespaces":%s,"includedResources":%s,"excludedResources":%s,"orLabelSelectors":%s}`,
			jsonStrings(100, 63), jsonStrings(100, 63), jsonStrings(100, 253), jsonStrings(100, 253), jsonSelectors(20, jsonSelector(20, 20, 5)))),
		Entry("a name of 200 characters", longName(200), `{}`),
		Entry("a storage location with dots", "", `{"storageLocation":"primary.eu-west-1"}`),
	)

	DescribeTable("BackupStorageLocation",
		func(spec string) {
			Expect(createRaw("BackupStorageLocation", "", spec)).To(Succeed())
		},
		Entry("validationFrequency 0s (off)", `{"provider":"filesystem","config":{"path":"/d"},"validationFrequency":"0s"}`),
		Entry("validationFrequency 1s", `{"provider":"filesystem","config":{"path":"/d"},"validationFrequency":"1s"}`),
		Entry("validationFrequency of ten years", `{"provider":"filesystem","config":{"path":"/d"},"validationFrequency":"87600h"}`),
		Entry("backupSyncPeriod 0s (off)", `{"provider":"filesystem","config":{"path":"/d"},"backupSyncPeriod":"0s"}`),
		Entry("backupSyncPeriod 1s", `{"provider":"filesystem","config":{"path":"/d"},"backupSyncPeriod":"1s"}`),
		Entry("backupSyncPeriod of ten years", `{"provider":"filesystem","config":{"path":"/d"},"backupSyncPeriod":"87600h"}`),
		Entry("a nested prefix with a trailing slash", `{"provider":"s3","objectStorage":{"bucket":"backups","prefix":"clusters/eu-1/"}}`),
		Entry("a prefix whose segments only contain dots", `{"provider":"s3","objectStorage":{"bucket":"backups","prefix":"v1..2/.hidden/a.b_c"}}`),
		Entry("a prefix of 256 characters", fmt.Sprintf(`{"provider":"s3","objectStorage":{"bucket":"backups","prefix":%q}}`, longName(256))),
		Entry("a bucket with dots and dashes", `{"provider":"s3","objectStorage":{"bucket":"my.backups-1"}}`),
		Entry("a bucket of three characters", `{"provider":"s3","objectStorage":{"bucket":"abc"}}`),
		Entry("a bucket of 63 characters", fmt.Sprintf(`{"provider":"s3","objectStorage":{"bucket":%q}}`, longName(63))),
	)

	It("accepts every duration a Go client writes up to ten years, and keeps it unchanged on update", func() {
		longest := 87600*time.Hour - time.Nanosecond
		b := newBackup(cairnv1.BackupSpec{TTL: &metav1.Duration{Duration: longest}, ItemOperationTimeout: &metav1.Duration{Duration: time.Second}})
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Expect(b.Spec.TTL.Duration).To(Equal(longest))
		b.Labels = map[string]string{"touched": "yes"}
		Expect(k8sClient.Update(ctx, b)).To(Succeed())
	})
})

// Objects stored before the duration rules existed are not validated again; one with an
// overflowing duration still breaks every client that decodes Backups. An administrator must
// be able to remove it: a metadata change on it must not trip over its unparseable spec.
var _ = Describe("A Backup stored before the duration rules", Ordered, func() {
	const legacyTTL = "9999999999999h"
	crdKey := client.ObjectKey{Name: "backups.cairn.dev"}
	crdGVK := schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

	// ttlSchema returns the schema of spec.ttl inside a CRD.
	ttlSchema := func(crd *unstructured.Unstructured) map[string]any {
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		Expect(versions).To(HaveLen(1))
		s, ok, err := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "ttl")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		return s
	}
	// setTTLSchema replaces the schema of spec.ttl in the stored CRD.
	setTTLSchema := func(s map[string]any) {
		Eventually(func() error {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(crdGVK)
			if err := k8sClient.Get(ctx, crdKey, crd); err != nil {
				return err
			}
			versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
			if err := unstructured.SetNestedMap(versions[0].(map[string]any), s, "schema", "openAPIV3Schema", "properties", "spec", "properties", "ttl"); err != nil {
				return err
			}
			if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
				return err
			}
			return k8sClient.Update(ctx, crd)
		}).Should(Succeed())
	}
	legacy := func(name string) error {
		u := &unstructured.Unstructured{}
		Expect(u.UnmarshalJSON([]byte(fmt.Sprintf(`{"apiVersion":"cairn.dev/v1alpha1","kind":"Backup","metadata":{"name":%q,"namespace":"legacy","finalizers":[%q]},"spec":{"ttl":%q}}`,
			name, cairnv1.BackupDataFinalizer, legacyTTL)))).To(Succeed())
		return k8sClient.Create(ctx, u)
	}

	BeforeAll(func() {
		Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}})).To(Succeed())
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(crdGVK)
		Expect(k8sClient.Get(ctx, crdKey, crd)).To(Succeed())
		current := ttlSchema(crd)
		// The schema of before issue 12: a pattern that 9999999999999h matches.
		setTTLSchema(map[string]any{"type": "string", "default": "720h", "pattern": `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`})
		Eventually(func() error { return legacy("legacy") }).Should(Succeed())
		setTTLSchema(current)
		Eventually(func() error { return legacy("probe") }).Should(MatchError(ContainSubstring(ttlMessage)))
	})

	It("breaks listing Backups, as issue 12 found", func() {
		err := k8sClient.List(ctx, &cairnv1.BackupList{}, client.InNamespace("legacy"))
		Expect(err).To(MatchError(ContainSubstring("invalid duration")))
	})

	It("can still be cancelled, deleted and have its finalizer removed", func() {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(cairnv1.GroupVersion.WithKind("Backup"))
		u.SetNamespace("legacy")
		u.SetName("legacy")
		Expect(mergePatch(u, `{"spec":{"cancel":true}}`)).To(Succeed())
		Expect(k8sClient.Delete(ctx, u)).To(Succeed())
		Expect(mergePatch(u, `{"metadata":{"finalizers":null}}`)).To(Succeed())
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(u), u))).To(BeTrue())
	})
})
