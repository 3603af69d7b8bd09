package backup_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/storage"
)

// archiveItems reads a backup's committed archive (verifying its checksum) and lists its items.
func archiveItems(store storage.ObjectStore, name string) []string {
	GinkgoHelper()
	var names []string
	for _, e := range CommittedEntries(store, OperatorNamespace, name) {
		if strings.HasPrefix(e.Name, "resources/") {
			names = append(names, e.Name)
		}
	}
	sort.Strings(names)
	return names
}

var _ = Describe("Backup execution", Ordered, func() {
	var store *storage.Filesystem
	var pools *PoolRecorder
	var startExecManager func() func()
	var stopExecManager func()

	BeforeAll(func() {
		var loc *cairnv1.BackupStorageLocation
		store, loc = CreateDefaultLocation("exec-default")

		// The cluster: two app namespaces with config, a secret, labelled and excluded items,
		// a pod with a PVC bound to a PV.
		for _, ns := range []string{"app-1", "app-2", "other"} {
			EnsureNamespace(ns)
		}
		CreateObject(ConfigMap("app-1", "plain", nil))
		CreateObject(ConfigMap("app-1", "tier-web", map[string]string{"tier": "web"}))
		CreateObject(ConfigMap("app-1", "skipped", map[string]string{cairnv1.ExcludeFromBackupLabel: "true"}))
		CreateObject(ConfigMap("app-2", "tier-db", map[string]string{"tier": "db"}))
		CreateObject(ConfigMap("other", "elsewhere", nil))
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "app-1", Name: "token"}, StringData: map[string]string{"t": "x"}})
		// Labelled, so that the case of all cluster resources can leave out other suites' PVs.
		CreateObject(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-data", Labels: map[string]string{"suite": "exec"}}, Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/pv"}},
		}})
		CreateObject(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "app-2", Name: "data", Labels: map[string]string{"suite": "exec"}}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: "pv-data",
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}})
		EnsureNamespace("crs")
		CreateObject(&cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "crs", Name: "cr-1"}, Spec: cairnv1.BackupSpec{Cancel: true}})
		EnsureNamespace("orphans")
		CreateObject(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "orphans", Name: "lost"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "c"}},
			Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "gone"}}}},
		}})
		CreateObject(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app-2", Name: "db"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "db", Image: "db"}},
			Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		}})

		pools = &PoolRecorder{}
		startExecManager = func() func() {
			// Progress is written every few milliseconds, so that it lands in the middle of every
			// backup and the final write must start from the stored object.
			return StartManager(controller.Config{ConcurrentBackups: 2, ItemBlockWorkerCount: 3, OnWorkerPool: pools.Record,
				ProgressInterval: 2 * time.Millisecond, Actions: []backup.BackupItemAction{AsyncSecretAction{}},
				ItemOperationSyncFrequency: 100 * time.Millisecond})
		}
		stopExecManager = startExecManager()
		DeferCleanup(func() { stopExecManager() })
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
	})

	AfterAll(func() { DeleteAllBackups() })

	It("backs up the selected items into a committed, verified archive with its side objects", func() {
		CreateBackup(OperatorNamespace, "exec-basic", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-1"}, IncludedResources: []string{"configmaps", "secrets"}})
		b := WaitPhase("exec-basic", cairnv1.BackupPhaseCompleted)
		Expect(archiveItems(store, "exec-basic")).To(Equal([]string{
			"resources/configmaps/namespaces/app-1/plain.json",
			"resources/configmaps/namespaces/app-1/tier-web.json",
			"resources/secrets/namespaces/app-1/token.json",
		}))
		// Items are whole objects, with apiVersion and kind, as a restore needs them.
		for _, e := range CommittedEntries(store, OperatorNamespace, "exec-basic") {
			if e.Name == "resources/configmaps/namespaces/app-1/plain.json" {
				var cm corev1.ConfigMap
				Expect(json.Unmarshal(e.Data, &cm)).To(Succeed())
				Expect(cm.APIVersion).To(Equal("v1"))
				Expect(cm.Kind).To(Equal("ConfigMap"))
				Expect(cm.Name).To(Equal("plain"))
				Expect(cm.Data).To(Equal(map[string]string{"k": "v"}))
			}
		}
		Expect(b.Status.Progress).To(Equal(cairnv1.NewBackupProgress(3, 3)))
		Expect(b.Status.StartTimestamp).NotTo(BeNil())
		Expect(b.Status.CompletionTimestamp).NotTo(BeNil())
		Expect(b.Status.Expiration.Sub(b.Status.StartTimestamp.Time)).To(Equal(720 * time.Hour))
		Expect(b.Status.FormatVersion).To(Equal(archive.FormatVersion))
		keys := storage.Layout{}.Backup(OperatorNamespace, "exec-basic")
		var list map[string][]string
		GunzipJSON(store, keys.ResourceList, &list)
		Expect(list).To(Equal(map[string][]string{"configmaps": {"app-1/plain", "app-1/tier-web"}, "secrets": {"app-1/token"}}))
		GunzipJSON(store, keys.Results, nil)
		GunzipJSON(store, keys.Logs, nil)
	})

	DescribeTable("selects exactly the items the spec selects",
		func(name string, spec cairnv1.BackupSpec, want []string) {
			CreateBackup(OperatorNamespace, name, spec)
			WaitPhase(name, cairnv1.BackupPhaseCompleted)
			Expect(archiveItems(store, name)).To(Equal(want))
		},
		Entry("a label selector", "f-label", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-*"}, IncludedResources: []string{"cm"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}},
			[]string{"resources/configmaps/namespaces/app-1/tier-web.json"}),
		Entry("or-selectors", "f-or", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-*"}, IncludedResources: []string{"configmap"},
			OrLabelSelectors: []*metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "web"}}, {MatchLabels: map[string]string{"tier": "db"}}}},
			[]string{"resources/configmaps/namespaces/app-1/tier-web.json", "resources/configmaps/namespaces/app-2/tier-db.json"}),
		Entry("wildcard include with an exclusion", "f-wild", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-*", "oth*"}, ExcludedNamespaces: []string{"app-*"},
			IncludedResources: []string{"configmaps"}},
			[]string{"resources/configmaps/namespaces/other/elsewhere.json"}),
		Entry("a pod brings its PVC and, with cluster resources unset, the PV", "f-pod", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-2"},
			IncludedResources: []string{"pods", "persistentvolumeclaims", "persistentvolumes"}},
			[]string{"resources/persistentvolumeclaims/namespaces/app-2/data.json", "resources/persistentvolumes/cluster/pv-data.json", "resources/pods/namespaces/app-2/db.json"}),
		Entry("no cluster resources at all", "f-nocluster", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-2"},
			IncludedResources: []string{"pods", "persistentvolumeclaims", "persistentvolumes"}, IncludeClusterResources: ptr.To(false)},
			[]string{"resources/persistentvolumeclaims/namespaces/app-2/data.json", "resources/pods/namespaces/app-2/db.json"}),
		Entry("all cluster resources", "f-cluster", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-2"},
			IncludedResources: []string{"pv", "pvc"}, IncludeClusterResources: ptr.To(true),
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"suite": "exec"}}},
			[]string{"resources/persistentvolumeclaims/namespaces/app-2/data.json", "resources/persistentvolumes/cluster/pv-data.json"}),
		Entry("cluster resources unset: a PV alone is not listed", "f-pv-alone", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-2"},
			IncludedResources: []string{"persistentvolumes"}},
			nil),
		Entry("a custom resource brings its CRD", "f-crd", cairnv1.BackupSpec{IncludedNamespaces: []string{"crs"},
			IncludedResources: []string{"backups.cairn.dev", "customresourcedefinitions"}},
			[]string{"resources/backups.cairn.dev/namespaces/crs/cr-1.json", "resources/customresourcedefinitions.apiextensions.k8s.io/cluster/backups.cairn.dev.json"}),
		Entry("a custom resource without cluster resources: no CRD", "f-crd-none", cairnv1.BackupSpec{IncludedNamespaces: []string{"crs"},
			IncludedResources: []string{"backups.cairn.dev", "customresourcedefinitions"}, IncludeClusterResources: ptr.To(false)},
			[]string{"resources/backups.cairn.dev/namespaces/crs/cr-1.json"}),
		Entry("the exclude label on a namespaced item", "f-excluded-label", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-1"},
			IncludedResources: []string{"configmaps"}, LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}}},
			[]string{"resources/configmaps/namespaces/app-1/plain.json"}),
		Entry("several namespaces by name", "f-names", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-2", "other"}, IncludedResources: []string{"configmaps"}},
			[]string{"resources/configmaps/namespaces/app-2/tier-db.json", "resources/configmaps/namespaces/other/elsewhere.json"}),
		Entry("excluded resources", "f-exclude", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-1"}, ExcludedResources: []string{"secrets"}},
			[]string{"resources/configmaps/namespaces/app-1/plain.json", "resources/configmaps/namespaces/app-1/tier-web.json", "resources/namespaces/cluster/app-1.json"}),
	)

	It("counts an item that is gone as a warning, not a failure", func() {
		CreateBackup(OperatorNamespace, "exec-gone", cairnv1.BackupSpec{IncludedNamespaces: []string{"orphans"}, IncludedResources: []string{"pods", "pvc"}})
		b := WaitPhase("exec-gone", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.Warnings).To(Equal(int32(1)))
		Expect(b.Status.Errors).To(BeZero())
		var results struct {
			Warnings []struct{ Item, Message string }
		}
		GunzipJSON(store, storage.Layout{}.Backup(OperatorNamespace, "exec-gone").Results, &results)
		Expect(results.Warnings).To(HaveLen(1))
		Expect(results.Warnings[0].Item).To(Equal("persistentvolumeclaims/orphans/gone"))
		Expect(archiveItems(store, "exec-gone")).To(Equal([]string{"resources/pods/namespaces/orphans/lost.json"}))
	})

	It("fails validation when the storage location is Unavailable at start", func() {
		file := filepath.Join(GinkgoT().TempDir(), "file")
		Expect(os.WriteFile(file, []byte("x"), 0o600)).To(Succeed())
		bad := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "exec-broken", Namespace: OperatorNamespace}, Spec: FilesystemSpec(filepath.Join(file, "dir"))}
		Expect(K8sClient.Create(SuiteCtx, bad)).To(Succeed())
		DeferCleanup(func() { Expect(K8sClient.Delete(SuiteCtx, bad)).To(Succeed()) })
		Eventually(func() cairnv1.StorageLocationPhase {
			var l cairnv1.BackupStorageLocation
			Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(bad), &l)).To(Succeed())
			return l.Status.Phase
		}).Should(Equal(cairnv1.StorageLocationPhaseUnavailable))
		CreateBackup(OperatorNamespace, "exec-broken", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-1"}, StorageLocation: "exec-broken"})
		b := WaitPhase("exec-broken", cairnv1.BackupPhaseFailedValidation)
		Expect(b.Status.ValidationErrors).To(ConsistOf(ContainSubstring("storage location exec-broken is not Available: path")))
	})

	It("records the async operations an action starts, before leaving InProgress", func() {
		EnsureNamespace("ops")
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "snap-me"}, StringData: map[string]string{"a": "b"}})
		CreateBackup(OperatorNamespace, "exec-ops", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops"}, IncludedResources: []string{"secrets"}})
		b := WaitPhase("exec-ops", cairnv1.BackupPhaseWaitingForPluginOperations)
		Expect(b.Status.BackupItemOperationsAttempted).To(Equal(int32(1)))
		var ops []struct {
			Action, OperationID string
			Item                struct{ Namespace, Name string }
		}
		GunzipJSON(store, storage.Layout{}.Backup(OperatorNamespace, "exec-ops").ItemOperations, &ops)
		Expect(ops).To(HaveLen(1))
		Expect(ops[0].Action).To(Equal("test/async-secret"))
		Expect(ops[0].OperationID).To(Equal("op-ops-snap-me"))
		Expect(ops[0].Item.Name).To(Equal("snap-me"))
	})

	It("waits for async operations, then finalizes; a failed one makes the backup PartiallyFailed", func() {
		EnsureNamespace("ops-a")
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-a", Name: "one"}, StringData: map[string]string{"a": "b"}})
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-a", Name: "two"}, StringData: map[string]string{"a": "b"}})
		// Post-operation items pass the backup's filters like every other item: configmaps are included.
		CreateBackup(OperatorNamespace, "ops-good", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-a"}, IncludedResources: []string{"secrets", "configmaps"}})
		WaitPhase("ops-good", cairnv1.BackupPhaseWaitingForPluginOperations)
		Consistently(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "ops-good").Status.Phase }).
			WithTimeout(500 * time.Millisecond).Should(Equal(cairnv1.BackupPhaseWaitingForPluginOperations))
		// Operation one produced its result; two's result is gone by the end (a warning).
		CreateObject(ConfigMap("ops-a", "one-result", map[string]string{"made-by": "operation"}))
		SetOperation("op-ops-a-one", "done")
		SetOperation("op-ops-a-two", "done")
		b := WaitPhase("ops-good", cairnv1.BackupPhaseCompleted)
		Expect(archiveItems(store, "ops-good")).To(Equal([]string{
			"resources/configmaps/namespaces/ops-a/one-result.json",
			"resources/secrets/namespaces/ops-a/one.json",
			"resources/secrets/namespaces/ops-a/two.json",
		}))
		Expect(b.Status.Warnings).To(Equal(int32(1)))
		Expect(b.Status.BackupItemOperationsAttempted).To(Equal(int32(2)))
		Expect(b.Status.BackupItemOperationsCompleted).To(Equal(int32(2)))
		Expect(b.Status.BackupItemOperationsFailed).To(BeZero())
		var ops []backup.Operation
		GunzipJSON(store, storage.Layout{}.Backup(OperatorNamespace, "ops-good").ItemOperations, &ops)
		Expect(ops).To(HaveEach(HaveField("Phase", backup.OperationCompleted)))

		EnsureNamespace("ops-b")
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-b", Name: "bad"}, StringData: map[string]string{"a": "b"}})
		SetOperation("op-ops-b-bad", "the snapshot failed")
		CreateBackup(OperatorNamespace, "ops-bad", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-b"}, IncludedResources: []string{"secrets"}})
		b = WaitPhase("ops-bad", cairnv1.BackupPhasePartiallyFailed)
		Expect(b.Status.BackupItemOperationsFailed).To(Equal(int32(1)))
		Eventually(func() []eventsv1.Event { return BackupEvents(OperatorNamespace, "ops-bad") }).Should(
			ContainElement(And(HaveField("Reason", "OperationFailed"), HaveField("Note", ContainSubstring("the snapshot failed")))))
	})

	It("resumes waiting for operations after a manager restart", func() {
		EnsureNamespace("ops-restart")
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-restart", Name: "s"}, StringData: map[string]string{"a": "b"}})
		CreateBackup(OperatorNamespace, "ops-resume", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-restart"}, IncludedResources: []string{"secrets", "configmaps"}})
		WaitPhase("ops-resume", cairnv1.BackupPhaseWaitingForPluginOperations)
		stopExecManager()
		SetOperation("op-ops-restart-s", "done")
		CreateObject(ConfigMap("ops-restart", "s-result", nil))
		stopExecManager = startExecManager()
		WaitPhase("ops-resume", cairnv1.BackupPhaseCompleted)
		Expect(archiveItems(store, "ops-resume")).To(ContainElement("resources/configmaps/namespaces/ops-restart/s-result.json"))
	})

	It("cancels an operation past itemOperationTimeout and fails it as timed out", func() {
		EnsureNamespace("ops-slow")
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops-slow", Name: "slow"}, StringData: map[string]string{"a": "b"}})
		CreateBackup(OperatorNamespace, "ops-timeout", cairnv1.BackupSpec{IncludedNamespaces: []string{"ops-slow"}, IncludedResources: []string{"secrets"},
			ItemOperationTimeout: &metav1.Duration{Duration: time.Second}})
		b := WaitPhase("ops-timeout", cairnv1.BackupPhasePartiallyFailed)
		Expect(b.Status.BackupItemOperationsFailed).To(Equal(int32(1)))
		Expect(CancelledOperations()).To(ContainElement("op-ops-slow-slow"))
		var ops []backup.Operation
		GunzipJSON(store, storage.Layout{}.Backup(OperatorNamespace, "ops-timeout").ItemOperations, &ops)
		Expect(ops).To(ConsistOf(And(HaveField("Phase", backup.OperationFailed), HaveField("Error", "timed out after 1s"))))
	})

	It("runs two backups at once, each on its own worker pool", func() {
		CreateBackup(OperatorNamespace, "par-1", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-1"}, IncludedResources: []string{"configmaps"}})
		CreateBackup(OperatorNamespace, "par-2", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-2"}, IncludedResources: []string{"configmaps"}})
		WaitPhase("par-1", cairnv1.BackupPhaseCompleted)
		WaitPhase("par-2", cairnv1.BackupPhaseCompleted)
		Expect(archiveItems(store, "par-2")).To(Equal([]string{"resources/configmaps/namespaces/app-2/tier-db.json"}))
		started, running := pools.Snapshot()
		Expect(started).To(ContainElements("cairn-system/par-1", "cairn-system/par-2"))
		Expect(running).To(BeZero(), "every worker pool stopped")
	})

	It("fails validation when the storage location is not usable at start", func() {
		spec := FilesystemSpec(GinkgoT().TempDir())
		spec.AccessMode = cairnv1.AccessModeReadOnly
		ro := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "exec-readonly", Namespace: OperatorNamespace}, Spec: spec}
		Expect(K8sClient.Create(SuiteCtx, ro)).To(Succeed())
		DeferCleanup(func() { Expect(K8sClient.Delete(SuiteCtx, ro)).To(Succeed()) })
		CreateBackup(OperatorNamespace, "exec-ro", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-1"}, StorageLocation: "exec-readonly"})
		b := WaitPhase("exec-ro", cairnv1.BackupPhaseFailedValidation)
		Expect(b.Status.ValidationErrors).To(ConsistOf("storage location exec-readonly is ReadOnly"))
	})
})

var _ = Describe("Backup restart recovery", Ordered, func() {
	It("fails a backup that was InProgress when the operator stopped", func() {
		dir := GinkgoT().TempDir()
		spec := FilesystemSpec(dir)
		spec.Default = true
		loc := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "restart-default", Namespace: OperatorNamespace}, Spec: spec}
		Expect(K8sClient.Create(SuiteCtx, loc)).To(Succeed())
		DeferCleanup(func() { Expect(K8sClient.Delete(SuiteCtx, loc)).To(Succeed()) })
		DeferCleanup(DeleteAllBackups)

		b := CreateBackup(OperatorNamespace, "was-running", cairnv1.BackupSpec{IncludedNamespaces: []string{"app-1"}})
		b.Status.Phase = cairnv1.BackupPhaseInProgress
		b.Status.StorageLocation = "restart-default"
		Expect(K8sClient.Status().Update(SuiteCtx, b)).To(Succeed())
		// What the stopped operator had uploaded: an archive without metadata, and its log.
		fs, _ := storage.NewFilesystem(dir)
		keys := storage.Layout{}.Backup(OperatorNamespace, "was-running")
		Expect(fs.Put(SuiteCtx, keys.Archive, bytes.NewReader([]byte("partial")))).To(Succeed())
		Expect(fs.Put(SuiteCtx, keys.Logs, bytes.NewReader([]byte("log")))).To(Succeed())

		// The restart recovery fails it without a storage call; the finalizer removes the
		// partial upload.
		DeferCleanup(StartManager(controller.Config{Controllers: []string{"storagelocation", "finalizer"}}))
		got := WaitPhase("was-running", cairnv1.BackupPhaseFailed)
		Expect(got.Status.FailureReason).To(Equal(lifecycle.FailureReasonRestarted))
		Expect(meta.IsStatusConditionTrue(got.Status.Conditions, cairnv1.BackupConditionCleanedUp)).To(BeTrue())
		Expect(fs.List(SuiteCtx, keys.Dir)).To(Equal([]string{keys.Logs}))
	})
})
