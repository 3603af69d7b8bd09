package operations_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

var (
	volumeSnapshotGVK        = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshot"}
	volumeSnapshotContentGVK = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshotContent"}
	pvcGVK                   = schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}
	nsGVK                    = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
)

// slowRestoreAction takes 50 ms over each ConfigMap restored into a namespace whose name begins
// with "rasync-slow" (as an action calling out to a slow service would), so that a restore of a
// few hundred of them is still running when the test cancels it. It gives up at once when the
// restore's context ends.
type slowRestoreAction struct{ restore.SyncAction }

func (slowRestoreAction) Name() string { return "test/slow-configmaps" }
func (slowRestoreAction) AppliesTo() []schema.GroupResource {
	return []schema.GroupResource{{Resource: "configmaps"}}
}

func (slowRestoreAction) Execute(ctx context.Context, in restore.ActionInput) (restore.ActionOutput, error) {
	if strings.HasPrefix(in.Item.GetNamespace(), "rasync-slow") {
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return restore.ActionOutput{Item: in.Item}, nil
}

// snapshottedClaim makes the claim namespace/name bound to a CSI volume of the test driver, its
// volume's claimRef naming it, as the PV controller leaves a bound pair.
func snapshottedClaim(namespace, name string) {
	GinkgoHelper()
	pv := namespace + "-" + name
	CreateObject(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv}, Spec: corev1.PersistentVolumeSpec{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}, StorageClassName: "csi-sc",
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: testenv.TestDriver, VolumeHandle: "handle-" + name}},
		ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: namespace, Name: name},
	}})
	CreateObject(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: pv, StorageClassName: ptr.To("csi-sc"),
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}})
}

// bindClaim sets a claim's status.phase to Bound, as the PV controller would once its volume
// is provisioned from the snapshot.
func bindClaim(namespace, name string) {
	GinkgoHelper()
	var pvc corev1.PersistentVolumeClaim
	Expect(K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: namespace, Name: name}, &pvc)).To(Succeed())
	pvc.Status.Phase = corev1.ClaimBound
	Expect(K8sClient.Status().Update(SuiteCtx, &pvc)).To(Succeed())
}

// cancelRestore sets spec.cancel as `kubectl patch --type merge` does.
func cancelRestore(name string) {
	GinkgoHelper()
	Expect(K8sClient.Patch(SuiteCtx, GetRestore(OperatorNamespace, name),
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`)), client.FieldOwner("kubectl-patch"))).To(Succeed())
}

// restoreEventsOf lists the events about a restore in the operator's namespace.
func restoreEventsOf(name string) []eventsv1.Event {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(OperatorNamespace))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Restore" && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func restoreEventReasons(name string) []string {
	GinkgoHelper()
	var reasons []string
	for _, e := range restoreEventsOf(name) {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// configMapsIn lists the names of the ConfigMaps in a namespace, sorted, as "namespace/name".
func configMapsIn(namespace string) []string {
	GinkgoHelper()
	var list corev1.ConfigMapList
	Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(namespace))).To(Succeed())
	out := make([]string, 0, len(list.Items))
	for _, cm := range list.Items {
		out = append(out, namespace+"/"+cm.Name)
	}
	sort.Strings(out)
	return out
}

// expectRestoreCancelled checks the end of a restore stopped by spec.cancel (reason
// CancelledByUser) or by its deletion (RestoreDeleted).
func expectRestoreCancelled(rs *cairnv1.Restore, failureReason, reason string) {
	GinkgoHelper()
	Expect(rs.Status.Phase).To(Equal(cairnv1.RestorePhaseFailed))
	Expect(rs.Status.FailureReason).To(Equal(failureReason))
	Expect(rs.Status.CompletionTimestamp).NotTo(BeNil())
	c := meta.FindStatusCondition(rs.Status.Conditions, cairnv1.RestoreConditionCancelled)
	Expect(c).NotTo(BeNil(), "no Cancelled condition")
	Expect(c.Status).To(Equal(metav1.ConditionTrue))
	Expect(c.Reason).To(Equal(reason))
}

// restorePhaseLog records, from a watch, every phase each restore of the operator's namespace
// passes through, and the restore as first seen in each.
type restorePhaseLog struct {
	mu     sync.Mutex
	phases map[string][]cairnv1.RestorePhase
	firsts map[string]*cairnv1.Restore
	gone   map[string]bool
}

func recordRestorePhases() *restorePhaseLog {
	GinkgoHelper()
	p := &restorePhaseLog{phases: map[string][]cairnv1.RestorePhase{}, firsts: map[string]*cairnv1.Restore{}, gone: map[string]bool{}}
	w, err := WatchClient().Watch(SuiteCtx, &cairnv1.RestoreList{}, client.InNamespace(OperatorNamespace))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			rs, ok := ev.Object.(*cairnv1.Restore)
			if !ok {
				continue
			}
			p.mu.Lock()
			if ev.Type == watch.Deleted {
				p.gone[rs.Name] = true
			}
			seen := p.phases[rs.Name]
			if len(seen) == 0 || seen[len(seen)-1] != rs.Status.Phase {
				p.phases[rs.Name] = append(seen, rs.Status.Phase)
			}
			if key := rs.Name + "/" + string(rs.Status.Phase); p.firsts[key] == nil {
				p.firsts[key] = rs
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *restorePhaseLog) of(name string) []cairnv1.RestorePhase {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.phases[name])
}

func (p *restorePhaseLog) first(name string, phase cairnv1.RestorePhase) *cairnv1.Restore {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firsts[name+"/"+string(phase)]
}

var _ = Describe("Restore operations and cancel", Ordered, func() {
	var (
		store   *storage.Filesystem
		stop    func()
		config  controller.Config
		phases  *restorePhaseLog
		handle  string // the snapshot handle of the backed-up claim
		created []string
	)
	// newRestore creates a restore of the operator's namespace, to be removed when the
	// container ends.
	newRestore := func(name string, spec cairnv1.RestoreSpec) {
		GinkgoHelper()
		CreateRestore(OperatorNamespace, name, spec)
		created = append(created, name)
	}
	// csiSpec restores the backup of the snapshotted claim into namespace target.
	csiSpec := func(target string) cairnv1.RestoreSpec {
		return cairnv1.RestoreSpec{BackupName: "rasync-csi", NamespaceMapping: map[string]cairnv1.NamespaceName{"rasync-csi": cairnv1.NamespaceName(target)}}
	}
	// bigSpec restores the 300 ConfigMaps into namespace target.
	bigSpec := func(target string) cairnv1.RestoreSpec {
		return cairnv1.RestoreSpec{BackupName: "rasync-big", IncludedResources: []string{"configmaps"},
			NamespaceMapping: map[string]cairnv1.NamespaceName{"rasync-big": cairnv1.NamespaceName(target)}}
	}
	// snapshotObjects returns the VolumeSnapshot and VolumeSnapshotContent a restore made for
	// the claim "data" in namespace target (nil for one that does not exist), and their names.
	snapshotObjects := func(restoreName, target string) (vs, vsc *unstructured.Unstructured, vsName, vscName string) {
		GinkgoHelper()
		vsName, vscName = restore.SnapshotNames(GetRestore(OperatorNamespace, restoreName), target, "data")
		return GetUnstructured(volumeSnapshotGVK, target, vsName), GetUnstructured(volumeSnapshotContentGVK, "", vscName), vsName, vscName
	}

	BeforeAll(func() {
		var loc *cairnv1.BackupStorageLocation
		store, loc = CreateDefaultLocation("rasync-default")
		CreateObject(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-sc"}, Provisioner: testenv.TestDriver})
		CreateObject(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
			"metadata":       map[string]any{"name": "csi-class", "annotations": map[string]any{backup.DefaultSnapshotClassAnnotation: "true"}},
			"driver":         testenv.TestDriver,
			"deletionPolicy": "Delete",
		}})
		ctx, cancel := context.WithCancel(SuiteCtx)
		DeferCleanup(cancel)
		go testenv.SimulateSnapshotter(ctx, K8sClient, 300*time.Millisecond)
		config = controller.Config{ItemOperationSyncFrequency: 100 * time.Millisecond, ProgressInterval: 50 * time.Millisecond,
			RestoreWorkerCount: 2, RestoreNamespaceTimeout: 5 * time.Minute, RestoreActions: []restore.Action{slowRestoreAction{}}}
		stop = StartManager(config)
		DeferCleanup(func() { stop() })
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
		phases = recordRestorePhases()

		EnsureNamespace("rasync-csi")
		snapshottedClaim("rasync-csi", "data")
		CreateBackup(OperatorNamespace, "rasync-csi", cairnv1.BackupSpec{IncludedNamespaces: []string{"rasync-csi"}})
		b := WaitPhase("rasync-csi", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.BackupItemOperationsCompleted).To(BeEquivalentTo(1))
		vss := volumeSnapshots("rasync-csi")
		Expect(vss).To(HaveLen(1))
		content, _, _ := unstructured.NestedString(vss[0].Object, "status", "boundVolumeSnapshotContentName")
		handle, _, _ = unstructured.NestedString(GetUnstructured(volumeSnapshotContentGVK, "", content).Object, "status", "snapshotHandle")
		Expect(handle).NotTo(BeEmpty())

		EnsureNamespace("rasync-big")
		for i := range 300 {
			CreateObject(ConfigMap("rasync-big", fmt.Sprintf("cm-%03d", i), nil))
		}
		CreateBackup(OperatorNamespace, "rasync-big", cairnv1.BackupSpec{IncludedNamespaces: []string{"rasync-big"}})
		WaitPhase("rasync-big", cairnv1.BackupPhaseCompleted)
	})

	AfterAll(func() {
		for _, name := range created {
			Expect(client.IgnoreNotFound(K8sClient.Delete(SuiteCtx, &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: OperatorNamespace, Name: name}}))).To(Succeed())
		}
		Eventually(func(g Gomega) {
			for _, name := range created {
				err := K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: OperatorNamespace, Name: name}, &cairnv1.Restore{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "restore %s is still there", name)
			}
		}).WithTimeout(30 * time.Second).Should(Succeed())
		DeleteAllBackups()
	})

	It("restores a claim from its CSI snapshot into a mapped namespace, and completes once the claim is Bound", func() {
		newRestore("rasync-csi-copy", csiSpec("rasync-csi-copy"))
		rs := WaitRestore(OperatorNamespace, "rasync-csi-copy", cairnv1.RestorePhaseWaitingForPluginOperations)
		Expect(rs.Status.RestoreItemOperationsAttempted).To(BeEquivalentTo(1))
		Expect(rs.Status.Errors).To(BeZero())

		vs, vsc, vsName, vscName := snapshotObjects("rasync-csi-copy", "rasync-csi-copy")
		Expect(vsc).NotTo(BeNil(), "VolumeSnapshotContent %s", vscName)
		Expect(vsc.Object["spec"]).To(And(
			HaveKeyWithValue("deletionPolicy", "Retain"),
			HaveKeyWithValue("driver", testenv.TestDriver),
			HaveKeyWithValue("source", map[string]any{"snapshotHandle": handle}),
			HaveKeyWithValue("volumeSnapshotRef", HaveKeyWithValue("namespace", "rasync-csi-copy"))))
		Expect(vs).NotTo(BeNil(), "VolumeSnapshot rasync-csi-copy/%s", vsName)
		source, _, _ := unstructured.NestedString(vs.Object, "spec", "source", "volumeSnapshotContentName")
		Expect(source).To(Equal(vscName))
		for _, u := range []*unstructured.Unstructured{vs, vsc} {
			Expect(u.GetLabels()).To(HaveKeyWithValue(cairnv1.RestoreNameLabel, "rasync-csi-copy"))
		}
		// The backup's own snapshot objects are not restored: only the one made for the claim.
		Expect(volumeSnapshots("rasync-csi-copy")).To(HaveLen(1))

		pvc := GetUnstructured(pvcGVK, "rasync-csi-copy", "data")
		Expect(pvc).NotTo(BeNil())
		Expect(pvc.Object["spec"]).To(HaveKeyWithValue("dataSource",
			map[string]any{"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": vsName}))
		Expect(pvc.Object["spec"]).NotTo(HaveKey("volumeName"))
		list := RestoredList(store, OperatorNamespace, "rasync-csi-copy")
		Expect(list[restore.Created]["persistentvolumeclaims"]).To(ConsistOf("rasync-csi-copy/data"))
		Expect(list[restore.Skipped]["persistentvolumes"]).To(ConsistOf("rasync-csi-data"))

		// It waits for the claim, and nothing else moves it on.
		Consistently(func() cairnv1.RestorePhase { return GetRestore(OperatorNamespace, "rasync-csi-copy").Status.Phase }).
			WithTimeout(time.Second).Should(Equal(cairnv1.RestorePhaseWaitingForPluginOperations))
		bindClaim("rasync-csi-copy", "data")
		rs = WaitRestore(OperatorNamespace, "rasync-csi-copy", cairnv1.RestorePhaseCompleted)
		Expect(rs.Status.RestoreItemOperationsAttempted).To(BeEquivalentTo(1))
		Expect(rs.Status.RestoreItemOperationsCompleted).To(BeEquivalentTo(1))
		Expect(rs.Status.RestoreItemOperationsFailed).To(BeZero())
		var ops []backup.Operation
		GunzipJSON(store, storage.Layout{}.Restore(OperatorNamespace, "rasync-csi-copy").ItemOperations, &ops)
		Expect(ops).To(HaveLen(1))
		Expect(ops[0].Phase).To(Equal(backup.OperationCompleted))
		Expect(ops[0].OperationID).To(Equal("rasync-csi-copy/data"))
	})

	It("fails the claim's operation past itemOperationTimeout, deleting the snapshot objects it made: PartiallyFailed", func() {
		spec := csiSpec("rasync-csi-timeout")
		spec.ItemOperationTimeout = &metav1.Duration{Duration: 2 * time.Second}
		newRestore("rasync-csi-timeout", spec)
		WaitRestore(OperatorNamespace, "rasync-csi-timeout", cairnv1.RestorePhaseWaitingForPluginOperations)
		vs, vsc, _, _ := snapshotObjects("rasync-csi-timeout", "rasync-csi-timeout")
		Expect(vs).NotTo(BeNil())
		Expect(vsc).NotTo(BeNil())

		rs := WaitRestore(OperatorNamespace, "rasync-csi-timeout", cairnv1.RestorePhasePartiallyFailed)
		Expect(rs.Status.RestoreItemOperationsFailed).To(BeEquivalentTo(1))
		Expect(rs.Status.RestoreItemOperationsCompleted).To(BeZero())
		Expect(rs.Status.Errors).To(BeNumerically(">=", 1))
		Eventually(func(g Gomega) {
			vs, vsc, _, _ := snapshotObjects("rasync-csi-timeout", "rasync-csi-timeout")
			g.Expect(vs).To(BeNil())
			g.Expect(vsc).To(BeNil())
		}).Should(Succeed())
		Expect(GetUnstructured(pvcGVK, "rasync-csi-timeout", "data")).NotTo(BeNil(), "restored objects stay")
		var ops []backup.Operation
		GunzipJSON(store, storage.Layout{}.Restore(OperatorNamespace, "rasync-csi-timeout").ItemOperations, &ops)
		Expect(ops).To(HaveLen(1))
		Expect(ops[0].Phase).To(Equal(backup.OperationFailed))
		Expect(ops[0].Error).To(ContainSubstring("timed out after 2s"))
		Eventually(func() []string { return restoreEventReasons("rasync-csi-timeout") }).Should(ContainElement("OperationFailed"))
	})

	It("makes no snapshot objects with restorePVs false: the claim is restored without a dataSource", func() {
		spec := csiSpec("rasync-csi-nopv")
		spec.RestorePVs = ptr.To(false)
		newRestore("rasync-csi-nopv", spec)
		rs := WaitRestore(OperatorNamespace, "rasync-csi-nopv", cairnv1.RestorePhaseCompleted)
		Expect(rs.Status.RestoreItemOperationsAttempted).To(BeZero())
		pvc := GetUnstructured(pvcGVK, "rasync-csi-nopv", "data")
		Expect(pvc).NotTo(BeNil())
		Expect(pvc.Object["spec"]).NotTo(HaveKey("dataSource"))
		Expect(pvc.Object["spec"]).NotTo(HaveKey("dataSourceRef"))
		Expect(volumeSnapshots("rasync-csi-nopv")).To(BeEmpty())
		_, vsc, _, _ := snapshotObjects("rasync-csi-nopv", "rasync-csi-nopv")
		Expect(vsc).To(BeNil())
	})

	It("cancels a queued restore (Failed, nothing restored) and one waiting for a terminating namespace", func() {
		// Without kube-controller-manager a deleted namespace stays Terminating: the holder
		// takes the one restore slot, waiting for it.
		EnsureNamespace("rasync-held")
		Expect(K8sClient.Delete(SuiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rasync-held"}})).To(Succeed())
		newRestore("rasync-holder", bigSpec("rasync-held"))
		Eventually(func(g Gomega) {
			rs := GetRestore(OperatorNamespace, "rasync-holder")
			g.Expect(rs.Status.Phase).To(Equal(cairnv1.RestorePhaseInProgress))
			g.Expect(meta.IsStatusConditionFalse(rs.Status.Conditions, cairnv1.RestoreConditionNamespacesReady)).To(BeTrue())
		}).Should(Succeed())

		newRestore("rasync-queued", bigSpec("rasync-queued"))
		Eventually(func(g Gomega) {
			rs := GetRestore(OperatorNamespace, "rasync-queued")
			g.Expect(rs.Status.Phase).To(Equal(cairnv1.RestorePhaseQueued))
			g.Expect(rs.Status.QueuePosition).To(BeEquivalentTo(1))
		}).Should(Succeed())
		cancelRestore("rasync-queued")
		rs := WaitRestore(OperatorNamespace, "rasync-queued", cairnv1.RestorePhaseFailed)
		expectRestoreCancelled(rs, cairnv1.FailureReasonRestoreCancelled, cairnv1.ReasonCancelledByUser)
		Expect(rs.Status.StartTimestamp).To(BeNil())
		Expect(rs.Status.QueuePosition).To(BeZero())
		Expect(meta.FindStatusCondition(rs.Status.Conditions, cairnv1.RestoreConditionQueued)).To(BeNil())
		Expect(GetUnstructured(nsGVK, "", "rasync-queued")).To(BeNil(), "nothing was restored")
		Expect(GetRestore(OperatorNamespace, "rasync-holder").Status.Phase).To(Equal(cairnv1.RestorePhaseInProgress))

		cancelRestore("rasync-holder")
		rs = WaitRestore(OperatorNamespace, "rasync-holder", cairnv1.RestorePhaseFailed)
		expectRestoreCancelled(rs, cairnv1.FailureReasonRestoreCancelled, cairnv1.ReasonCancelledByUser)
		Expect(phases.of("rasync-holder")).To(ContainElement(cairnv1.RestorePhaseFinalizingCancelled))
		Expect(RestoredList(store, OperatorNamespace, "rasync-holder")[restore.Created]).To(BeEmpty())
		Expect(configMapsIn("rasync-held")).To(BeEmpty())
	})

	It("cancels a large restore while it runs: the pool stops, and what it created stays and is listed", func() {
		newRestore("rasync-slow", bigSpec("rasync-slow"))
		Eventually(func(g Gomega) {
			g.Expect(GetRestore(OperatorNamespace, "rasync-slow").Status.Phase).To(Equal(cairnv1.RestorePhaseInProgress))
			g.Expect(len(configMapsIn("rasync-slow"))).To(BeNumerically(">=", 20))
		}).Should(Succeed())
		cancelRestore("rasync-slow")
		rs := WaitRestore(OperatorNamespace, "rasync-slow", cairnv1.RestorePhaseFailed)
		expectRestoreCancelled(rs, cairnv1.FailureReasonRestoreCancelled, cairnv1.ReasonCancelledByUser)
		Expect(phases.of("rasync-slow")).To(ContainElement(cairnv1.RestorePhaseFinalizingCancelled))
		Expect(rs.Status.Progress.ItemsRestored).To(BeNumerically("<", rs.Status.Progress.TotalItems))
		Expect(rs.Status.Progress.TotalItems).To(BeEquivalentTo(300))
		Eventually(func() []string { return restoreEventReasons("rasync-slow") }).Should(ContainElement("Cancelled"))

		// The pool has stopped: nothing more is created.
		exist := configMapsIn("rasync-slow")
		Consistently(func() []string { return configMapsIn("rasync-slow") }).WithTimeout(time.Second).Should(Equal(exist))
		Expect(len(exist)).To(BeNumerically("<", 300))
		// The resource list names what exists: each created object, and at most one object
		// per worker that was on its way when the pool stopped (listed as skipped: it may exist).
		list := RestoredList(store, OperatorNamespace, "rasync-slow")
		createdCMs := list[restore.Created]["configmaps"]
		onItsWay := list[restore.Skipped]["configmaps"]
		Expect(len(onItsWay)).To(BeNumerically("<=", 2))
		Expect(exist).To(ContainElements(createdCMs))
		for _, cm := range exist {
			Expect(slices.Contains(createdCMs, cm) || slices.Contains(onItsWay, cm)).To(BeTrue(), "%s exists and is not in the resource list", cm)
		}
		Expect(string(Gunzip(store, storage.Layout{}.Restore(OperatorNamespace, "rasync-slow").Logs))).To(ContainSubstring("Restore cancelled"))
	})

	It("cancels a restore waiting for its claim to bind: the snapshot objects it made are deleted", func() {
		newRestore("rasync-csi-cancel", csiSpec("rasync-csi-cancel"))
		WaitRestore(OperatorNamespace, "rasync-csi-cancel", cairnv1.RestorePhaseWaitingForPluginOperations)
		vs, vsc, _, _ := snapshotObjects("rasync-csi-cancel", "rasync-csi-cancel")
		Expect(vs).NotTo(BeNil())
		Expect(vsc).NotTo(BeNil())

		cancelRestore("rasync-csi-cancel")
		rs := WaitRestore(OperatorNamespace, "rasync-csi-cancel", cairnv1.RestorePhaseFailed)
		expectRestoreCancelled(rs, cairnv1.FailureReasonRestoreCancelled, cairnv1.ReasonCancelledByUser)
		Expect(phases.of("rasync-csi-cancel")).To(ContainElement(cairnv1.RestorePhaseFinalizingCancelled))
		Expect(rs.Status.RestoreItemOperationsAttempted).To(BeEquivalentTo(1))
		Expect(rs.Status.RestoreItemOperationsFailed).To(BeEquivalentTo(1))
		vs, vsc, _, _ = snapshotObjects("rasync-csi-cancel", "rasync-csi-cancel")
		Expect(vs).To(BeNil())
		Expect(vsc).To(BeNil())
		Expect(GetUnstructured(pvcGVK, "rasync-csi-cancel", "data")).NotTo(BeNil(), "restored objects stay")
		var ops []backup.Operation
		GunzipJSON(store, storage.Layout{}.Restore(OperatorNamespace, "rasync-csi-cancel").ItemOperations, &ops)
		Expect(ops).To(HaveLen(1))
		Expect(ops[0].Phase).To(Equal(backup.OperationFailed))
		Expect(ops[0].Error).To(Equal(cairnv1.FailureReasonRestoreCancelled))
		Eventually(func() []string { return restoreEventReasons("rasync-csi-cancel") }).Should(ContainElement("Cancelling"))
	})

	It("stops, ends and removes a restore deleted while it runs; what it created stays", func() {
		newRestore("rasync-deleted", bigSpec("rasync-slow-deleted"))
		Eventually(func(g Gomega) {
			g.Expect(GetRestore(OperatorNamespace, "rasync-deleted").Status.Phase).To(Equal(cairnv1.RestorePhaseInProgress))
			g.Expect(len(configMapsIn("rasync-slow-deleted"))).To(BeNumerically(">=", 20))
		}).Should(Succeed())
		Expect(K8sClient.Delete(SuiteCtx, GetRestore(OperatorNamespace, "rasync-deleted"))).To(Succeed())
		Eventually(func() bool {
			err := K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: OperatorNamespace, Name: "rasync-deleted"}, &cairnv1.Restore{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(30 * time.Second).Should(BeTrue())

		// It went through FinalizingCancelled to Failed, as deleted, before it went.
		Expect(phases.of("rasync-deleted")).To(ContainElements(cairnv1.RestorePhaseFinalizingCancelled, cairnv1.RestorePhaseFailed))
		failed := phases.first("rasync-deleted", cairnv1.RestorePhaseFailed)
		expectRestoreCancelled(failed, "Restore deleted before it finished", cairnv1.ReasonRestoreDeleted)
		left, err := store.List(SuiteCtx, storage.Layout{}.Restore(OperatorNamespace, "rasync-deleted").Dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(left).To(BeEmpty())
		exist := configMapsIn("rasync-slow-deleted")
		Expect(exist).NotTo(BeEmpty())
		Expect(len(exist)).To(BeNumerically("<", 300))
		Consistently(func() []string { return configMapsIn("rasync-slow-deleted") }).WithTimeout(time.Second).Should(Equal(exist))
	})

	It("changes nothing when a Completed restore is cancelled, and says so", func() {
		before := GetRestore(OperatorNamespace, "rasync-csi-copy")
		Expect(before.Status.Phase).To(Equal(cairnv1.RestorePhaseCompleted))
		cancelRestore("rasync-csi-copy")
		Eventually(func() []string { return restoreEventReasons("rasync-csi-copy") }).Should(ContainElement("CancelIgnored"))
		var warning *eventsv1.Event
		for _, e := range restoreEventsOf("rasync-csi-copy") {
			if e.Reason == "CancelIgnored" {
				warning = &e
			}
		}
		Expect(warning.Type).To(Equal(corev1.EventTypeWarning))
		Expect(warning.Note).To(ContainSubstring("already ended in phase Completed"))
		Consistently(func() cairnv1.RestoreStatus {
			return OwnersRestoreStatus(GetRestore(OperatorNamespace, "rasync-csi-copy").Status)
		}).
			WithTimeout(time.Second).Should(Equal(OwnersRestoreStatus(before.Status)))
		vs, vsc, _, _ := snapshotObjects("rasync-csi-copy", "rasync-csi-copy")
		Expect(vs).NotTo(BeNil(), "a finished restore's objects are not touched")
		Expect(vsc).NotTo(BeNil())
	})

	It("resumes a restore waiting for its claim after a manager restart, reading its operations back from storage", func() {
		newRestore("rasync-csi-restart", csiSpec("rasync-csi-restart"))
		WaitRestore(OperatorNamespace, "rasync-csi-restart", cairnv1.RestorePhaseWaitingForPluginOperations)
		stop()
		// The claim binds while no manager runs.
		bindClaim("rasync-csi-restart", "data")
		Expect(GetRestore(OperatorNamespace, "rasync-csi-restart").Status.Phase).To(Equal(cairnv1.RestorePhaseWaitingForPluginOperations))
		stop = StartManager(config)
		rs := WaitRestore(OperatorNamespace, "rasync-csi-restart", cairnv1.RestorePhaseCompleted)
		Expect(rs.Status.RestoreItemOperationsAttempted).To(BeEquivalentTo(1))
		Expect(rs.Status.RestoreItemOperationsCompleted).To(BeEquivalentTo(1))
		vs, vsc, _, _ := snapshotObjects("rasync-csi-restart", "rasync-csi-restart")
		Expect(vs).NotTo(BeNil())
		Expect(vsc).NotTo(BeNil())
	})
})
