package controllertest

// Backups: creating, reading, cancelling, deleting them, and what they stored.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/storage"
)

func ConfigMap(ns, name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"k": "v"}}
}

func CreateObject(obj client.Object) {
	GinkgoHelper()
	err := K8sClient.Create(SuiteCtx, obj)
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// WaitPhase waits until an admin backup reaches phase and returns it.
func WaitPhase(name string, phase cairnv1.BackupPhase) *cairnv1.Backup {
	GinkgoHelper()
	var b *cairnv1.Backup
	Eventually(func(g Gomega) {
		b = GetBackup(OperatorNamespace, name)
		g.Expect(b.Status.Phase).To(Equal(phase), "failureReason %q, validationErrors %v", b.Status.FailureReason, b.Status.ValidationErrors)
	}).WithTimeout(60 * time.Second).Should(Succeed())
	return b
}

// Gunzip reads a gzipped object.
func Gunzip(store storage.ObjectStore, key string) []byte {
	GinkgoHelper()
	rc, err := store.Get(context.Background(), key)
	Expect(err).NotTo(HaveOccurred())
	defer rc.Close()
	gz, err := gzip.NewReader(rc)
	Expect(err).NotTo(HaveOccurred())
	data, err := io.ReadAll(gz)
	Expect(err).NotTo(HaveOccurred())
	return data
}

// GunzipJSON decodes a gzipped JSON object into v (nil: only check that it reads).
func GunzipJSON(store storage.ObjectStore, key string, v any) {
	GinkgoHelper()
	data := Gunzip(store, key)
	if v != nil {
		Expect(json.NewDecoder(bytes.NewReader(data)).Decode(v)).To(Succeed())
	}
}

// CommittedEntries reads a backup's committed archive as a restore does, checked against its
// commit marker, and returns its entries. The marker must record the digest of every file
// beside the archive, as downloads verify them.
func CommittedEntries(store storage.ObjectStore, namespace, name string) []archive.Entry {
	GinkgoHelper()
	keys := storage.Layout{}.Backup(namespace, name)
	m, err := storage.ReadMetadata(context.Background(), store, keys)
	Expect(err).NotTo(HaveOccurred())
	for _, key := range keys.SideFiles() {
		rc, err := store.Get(context.Background(), key)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		Expect(err).NotTo(HaveOccurred())
		d, err := storage.Digest(rc)
		_ = rc.Close()
		Expect(err).NotTo(HaveOccurred())
		recorded, ok := m.DigestOf(keys, key)
		Expect(ok).To(BeTrue(), "the commit marker records no digest of %s", key)
		Expect(recorded).To(Equal(d), "the commit marker's digest of %s", key)
	}
	var entries []archive.Entry
	Expect(storage.ReadArchive(context.Background(), store, keys.Archive, storage.ArchiveDigest{SHA256: m.ArchiveSHA256, Size: m.ArchiveSize},
		func(e archive.Entry) error {
			entries = append(entries, e)
			return nil
		})).To(Succeed())
	return entries
}

func EnsureNamespace(name string) {
	GinkgoHelper()
	err := K8sClient.Create(SuiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// DeleteAllBackups removes every backup and waits until they are gone. Test clean-up does not
// wait for (or need) a deletion reconciler: the data goes with the test's temporary directories.
func DeleteAllBackups() {
	GinkgoHelper()
	deleteAll(&cairnv1.BackupList{}, cairnv1.BackupDataFinalizer)
}

// deleteAll deletes every object of list's kind, then removes finalizer from what is left until
// none is (a conflict is retried on the next poll).
func deleteAll(list client.ObjectList, finalizer string) {
	GinkgoHelper()
	items := func() []runtime.Object {
		Expect(K8sClient.List(SuiteCtx, list)).To(Succeed())
		items, err := meta.ExtractList(list)
		Expect(err).NotTo(HaveOccurred())
		return items
	}
	for _, o := range items() {
		Expect(client.IgnoreNotFound(K8sClient.Delete(SuiteCtx, o.(client.Object)))).To(Succeed())
	}
	Eventually(func() int {
		left := items()
		for _, o := range left {
			if obj := o.(client.Object); controllerutil.RemoveFinalizer(obj, finalizer) {
				_ = K8sClient.Update(SuiteCtx, obj)
			}
		}
		return len(left)
	}).WithTimeout(20 * time.Second).Should(BeZero())
}

func GetBackup(namespace, name string) *cairnv1.Backup {
	GinkgoHelper()
	var b cairnv1.Backup
	Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: namespace, Name: name}, &b)).To(Succeed())
	return &b
}

func CreateBackup(namespace, name string, spec cairnv1.BackupSpec) *cairnv1.Backup {
	GinkgoHelper()
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: spec}
	Expect(K8sClient.Create(SuiteCtx, b)).To(Succeed())
	return b
}

func QueuedCondition(name string) *metav1.Condition {
	GinkgoHelper()
	return meta.FindStatusCondition(GetBackup(OperatorNamespace, name).Status.Conditions, cairnv1.BackupConditionQueued)
}

// ReadLog returns a backup's log, decompressed.
func ReadLog(store storage.ObjectStore, keys storage.BackupKeys) string {
	GinkgoHelper()
	return string(Gunzip(store, keys.Logs))
}

// CancelBackup sets spec.cancel as `kubectl patch --type merge` does (same field manager).
func CancelBackup(name string) {
	GinkgoHelper()
	Expect(K8sClient.Patch(SuiteCtx, GetBackup(OperatorNamespace, name),
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`)), client.FieldOwner("kubectl-patch"))).To(Succeed())
}

// ExpectCancelled checks the end of a cancelled backup: Failed with the cancel's failureReason,
// Cancelled=True, a Cancelled event, and nothing left in the store but its log, which says
// who cancelled.
func ExpectCancelled(store storage.ObjectStore, name string) {
	GinkgoHelper()
	b := WaitPhase(name, cairnv1.BackupPhaseFailed)
	Expect(b.Status.FailureReason).To(Equal(cairnv1.FailureReasonCancelled))
	cond := meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionCancelled)
	Expect(cond).NotTo(BeNil())
	Expect(cond.Status).To(Equal(metav1.ConditionTrue))
	Expect(cond.Reason).To(Equal(cairnv1.ReasonCancelledByUser))
	Expect(b.Status.CompletionTimestamp).NotTo(BeNil())
	Eventually(func() []string { return EventReasons(name) }).Should(ContainElement("Cancelled"))
	keys := storage.Layout{}.Backup(OperatorNamespace, name)
	Expect(store.List(SuiteCtx, keys.Dir)).To(Equal([]string{keys.Logs}))
	Expect(ReadLog(store, keys)).To(And(ContainSubstring(cairnv1.FailureReasonCancelled), ContainSubstring(`field manager \"kubectl-patch\"`)))
}

func DeleteBackup(name string) {
	GinkgoHelper()
	Expect(K8sClient.Delete(SuiteCtx, GetBackup(OperatorNamespace, name))).To(Succeed())
}

// ExpectGone waits until the backup object is gone.
func ExpectGone(name string) {
	GinkgoHelper()
	Eventually(func() bool {
		err := K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: OperatorNamespace, Name: name}, &cairnv1.Backup{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(30*time.Second).Should(BeTrue(), "backup %s is still there", name)
}

// OwnersBackupStatus is a backup's status as its phase owners wrote it (OwnersConditions).
func OwnersBackupStatus(s cairnv1.BackupStatus) cairnv1.BackupStatus {
	s.Conditions = OwnersConditions(s.Conditions)
	return s
}

// OwnersConditions are conditions without the kstatus ones (Ready, Reconciling, Stalled), which
// the readiness reconciler writes after each phase change and rewrites (observedGeneration)
// when a cancel changes the spec: what the phase owners wrote.
func OwnersConditions(conditions []metav1.Condition) []metav1.Condition {
	return slices.DeleteFunc(slices.Clone(conditions), func(c metav1.Condition) bool {
		return c.Type == cairnv1.ConditionReady || c.Type == cairnv1.ConditionReconciling || c.Type == cairnv1.ConditionStalled
	})
}

// backupIn returns a backup if it exists, else nil.
func FindBackup(namespace, name string) *cairnv1.Backup {
	GinkgoHelper()
	var b cairnv1.Backup
	err := K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: namespace, Name: name}, &b)
	if apierrors.IsNotFound(err) {
		return nil
	}
	Expect(err).NotTo(HaveOccurred())
	return &b
}
