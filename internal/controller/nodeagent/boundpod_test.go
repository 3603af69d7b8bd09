package nodeagent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/storage"
)

// volumeSpecs are the helpers of the "Volume data" container that the specs of this file use.
type volumeSpecs struct {
	store             func() *storage.Filesystem
	runningPod        func(namespace, name, node, optIn, claim string, running bool) *corev1.Pod
	fillVolume        func(dir string, size int) int64
	emptyDir          func(pod *corev1.Pod, volume string) string
	schedule          func(namespace, name, node string, volumes ...string) *corev1.Pod
	podVolumeRestores func(rs *cairnv1.Restore) []cairnv1.PodVolumeRestore
	// stopAgent and startAgent stop node-a's agent and start it again.
	stopAgent, startAgent func()
}

// promptly bounds how long a refused volume restore may take to fail the restore: far less
// than the restores' itemOperationTimeout.
const promptly = 20 * time.Second

// restoreTargetSpecs: the node agent writes a snapshot only into the pod the restore created and
// only if the snapshot is of that pod's volume (DESIGN.md section 20).
func restoreTargetSpecs(e volumeSpecs) {
	// handMade is a tenant's pod put in place of a restored one: the same name, its first init
	// container named as the restore helper (running), scheduled on node-a, its volume
	// directories made as the kubelet would.
	handMade := func(namespace, name string) *corev1.Pod {
		GinkgoHelper()
		emptyDir := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: corev1.PodSpec{NodeName: nodeA,
				Volumes:        []corev1.Volume{{Name: "data", VolumeSource: emptyDir}, {Name: podvolume.RestoreMarkerVolume, VolumeSource: emptyDir}},
				InitContainers: []corev1.Container{{Name: podvolume.RestoreHelperContainer, Image: "tenant/planter:1"}},
				Containers:     []corev1.Container{{Name: "app", Image: "app:1"}}},
		}
		Expect(K8sClient.Create(SuiteCtx, pod)).To(Succeed())
		for _, v := range []string{"data", podvolume.RestoreMarkerVolume} {
			Expect(os.MkdirAll(e.emptyDir(pod, v), 0o777)).To(Succeed())
		}
		pod.Status.Phase = corev1.PodPending
		pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: podvolume.RestoreHelperContainer,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		Expect(K8sClient.Status().Update(SuiteCtx, pod)).To(Succeed())
		return pod
	}
	// replace deletes the restored pod namespace/name at once and puts a hand-made one in its
	// place.
	replace := func(namespace, name string) *corev1.Pod {
		GinkgoHelper()
		restored := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		Expect(K8sClient.Delete(SuiteCtx, restored, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func() error {
			return K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(restored), &corev1.Pod{})
		}).Should(Satisfy(func(err error) bool { return client.IgnoreNotFound(err) == nil && err != nil }))
		return handMade(namespace, name)
	}
	// restoredPod waits until the restore has created namespace/name and recorded its UID on
	// the pod's PodVolumeRestores, and returns it.
	restoredPod := func(restoreName, namespace, name string) *corev1.Pod {
		GinkgoHelper()
		var pod corev1.Pod
		Eventually(func(g Gomega) {
			g.Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: namespace, Name: name}, &pod)).To(Succeed())
			pvrs := e.podVolumeRestores(GetRestore(OperatorNamespace, restoreName))
			g.Expect(pvrs).NotTo(BeEmpty())
			for _, p := range pvrs {
				g.Expect(p.Spec.Pod.UID).To(Equal(pod.UID), "the UID the create answered")
			}
		}).WithTimeout(30 * time.Second).Should(Succeed())
		return &pod
	}
	partiallyFailedPromptly := func(name string) *cairnv1.Restore {
		GinkgoHelper()
		var rs *cairnv1.Restore
		Eventually(func(g Gomega) {
			rs = GetRestore(OperatorNamespace, name)
			g.Expect(rs.Status.Phase).To(Equal(cairnv1.RestorePhasePartiallyFailed), "failureReason %q", rs.Status.FailureReason)
		}).WithTimeout(promptly).Should(Succeed())
		return rs
	}
	operationErrors := func(name string) []string {
		GinkgoHelper()
		var ops []backup.Operation
		GunzipJSON(e.store(), storage.Layout{}.Restore(OperatorNamespace, name).ItemOperations, &ops)
		var errs []string
		for _, op := range ops {
			errs = append(errs, op.Error)
		}
		return errs
	}
	expectUntouched := func(pod *corev1.Pod) {
		GinkgoHelper()
		for _, v := range []string{"data", podvolume.RestoreMarkerVolume} {
			entries, err := os.ReadDir(e.emptyDir(pod, v))
			Expect(err).NotTo(HaveOccurred())
			Expect(entries).To(BeEmpty(), "the agent wrote into volume %s of the hand-made pod", v)
		}
	}

	It("backs up two pods of a namespace, which the next specs restore", func() {
		for _, name := range []string{"app2", "other"} {
			pod := e.runningPod("pv-uid", name, nodeA, "data", "", true)
			patch := client.MergeFrom(pod.DeepCopy())
			pod.Labels = map[string]string{"app": name}
			Expect(K8sClient.Patch(SuiteCtx, pod, patch)).To(Succeed())
			e.fillVolume(e.emptyDir(pod, "data"), 64<<10)
			Expect(os.WriteFile(filepath.Join(e.emptyDir(pod, "data"), "whose.txt"), []byte(name), 0o644)).To(Succeed())
		}
		CreateBackup(OperatorNamespace, "pv-uid", cairnv1.BackupSpec{IncludedNamespaces: []string{"pv-uid"}})
		WaitPhase("pv-uid", cairnv1.BackupPhaseCompleted)
	})

	// restoreInto restores the pods of the backup labelled app in apps into namespace, with an
	// itemOperationTimeout of an hour: what fails, fails promptly, not when it times out.
	restoreInto := func(name, namespace string, apps ...string) {
		GinkgoHelper()
		CreateRestore(OperatorNamespace, name, cairnv1.RestoreSpec{BackupName: "pv-uid", IncludedResources: []string{"pods"},
			LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: apps}}},
			NamespaceMapping:     map[string]cairnv1.NamespaceName{"pv-uid": cairnv1.NamespaceName(namespace)},
			ItemOperationTimeout: &metav1.Duration{Duration: time.Hour}})
	}

	It("refuses a pod made by hand in place of the restored one before it was scheduled: the restore fails that pod's volumes at once, naming it, and writes nothing", func() {
		restoreInto("pv-uid-r1", "pv-uid-a", "app2")
		restoredPod("pv-uid-r1", "pv-uid-a", "app2")
		evil := replace("pv-uid-a", "app2")
		rs := partiallyFailedPromptly("pv-uid-r1")
		Expect(rs.Status.RestoreItemOperationsFailed).To(BeEquivalentTo(1))
		Expect(operationErrors("pv-uid-r1")).To(ContainElement(ContainSubstring("pod pv-uid-a/app2 was replaced after the restore created it")))
		for _, p := range e.podVolumeRestores(rs) {
			if p.Spec.Pod.Name == "app2" {
				Expect(p.Spec.Node).To(BeEmpty(), "no node agent is sent to the hand-made pod")
			}
		}
		expectUntouched(evil)
	})

	It("refuses a pod made by hand in place of the restored one once its volumes were bound: the node agent fails the volume, naming the pod, and writes nothing", func() {
		e.stopAgent()
		restoreInto("pv-uid-r2", "pv-uid-b", "app2")
		created := restoredPod("pv-uid-r2", "pv-uid-b", "app2")
		Expect(K8sClient.SubResource("binding").Create(SuiteCtx, created, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: created.Name, Namespace: created.Namespace},
			Target:     corev1.ObjectReference{Kind: "Node", Name: nodeA},
		})).To(Succeed())
		Eventually(func(g Gomega) {
			for _, p := range e.podVolumeRestores(GetRestore(OperatorNamespace, "pv-uid-r2")) {
				g.Expect(p.Spec.Node).To(Equal(nodeA), "bound to the created pod's node")
			}
		}).WithTimeout(promptly).Should(Succeed())
		evil := replace("pv-uid-b", "app2")
		e.startAgent()
		rs := partiallyFailedPromptly("pv-uid-r2")
		var failed []string
		for _, p := range e.podVolumeRestores(rs) {
			if p.Spec.Pod.Name == "app2" {
				Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseFailed))
				failed = append(failed, p.Status.Message)
			}
		}
		Expect(failed).To(ContainElement(ContainSubstring("pod pv-uid-b/app2 was replaced after the restore created it")))
		expectUntouched(evil)
	})

	It("refuses another volume's snapshot that a changed operations file names for a pod's volume: that volume fails, nothing of it is written, the rest is restored", func() {
		keys := storage.Layout{}.Backup(OperatorNamespace, "pv-uid")
		ops, err := backup.ReadOperations(SuiteCtx, e.store(), keys.ItemOperations)
		Expect(err).NotTo(HaveOccurred())
		snaps, err := podvolume.Snapshots(ops)
		Expect(err).NotTo(HaveOccurred())
		ids := map[string]string{}
		for _, s := range snaps {
			ids[s.Pod.Name] = s.SnapshotID
		}
		Expect(ids).To(HaveKey("app2"))
		Expect(ids).To(HaveKey("other"))
		By("a bucket writer gives app2's record the snapshot of other's volume")
		for i, op := range ops {
			var s podvolume.Snapshot
			if op.Action != podvolume.ActionName || json.Unmarshal(op.Result, &s) != nil || s.Pod.Name != "app2" {
				continue
			}
			s.SnapshotID = ids["other"]
			ops[i].Result, err = json.Marshal(s)
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(backup.PutOperations(SuiteCtx, e.store(), keys.ItemOperations, ops)).To(Succeed())

		restoreInto("pv-uid-r3", "pv-uid-c", "app2", "other")
		app2, other := e.schedule("pv-uid-c", "app2", nodeA), e.schedule("pv-uid-c", "other", nodeA)
		rs := partiallyFailedPromptly("pv-uid-r3")
		for _, p := range e.podVolumeRestores(rs) {
			switch p.Spec.Pod.Name {
			case "app2":
				Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseFailed))
				Expect(p.Status.Message).To(And(ContainSubstring(ids["other"]), ContainSubstring("pod=app2"), ContainSubstring("it is not restored")))
			case "other":
				Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), p.Status.Message)
			}
		}
		entries, err := os.ReadDir(e.emptyDir(app2, "data"))
		Expect(err).NotTo(HaveOccurred())
		Expect(entries).To(BeEmpty(), "another pod's data was written into app2's volume")
		Expect(os.ReadFile(filepath.Join(e.emptyDir(other, "data"), "whose.txt"))).To(BeEquivalentTo("other"))
	})
}
