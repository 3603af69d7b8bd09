package hooks_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller"
	. "github.com/cairn-backup/cairn/internal/controller/controllertest"
	"github.com/cairn-backup/cairn/internal/hooks"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// appPod creates a pod with an init container "own" and a container "app", Running and Ready
// on node-1 as a kubelet would report it.
func appPod(namespace, name string, annotations map[string]string, volumes ...corev1.Volume) {
	GinkgoHelper()
	EnsureNamespace(namespace)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": name}, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: "node-1", Volumes: volumes,
			InitContainers: []corev1.Container{{Name: "own", Image: "app:1"}},
			Containers:     []corev1.Container{{Name: "app", Image: "app:1"}}},
	}
	Expect(K8sClient.Create(SuiteCtx, pod)).To(Succeed())
	setPodRunning(namespace, name, true)
}

// setPodRunning makes the pod Running with its container "app" running, and Ready (or not),
// as a kubelet would report it.
func setPodRunning(namespace, name string, ready bool) {
	GinkgoHelper()
	var pod corev1.Pod
	Expect(K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: namespace, Name: name}, &pod)).To(Succeed())
	st := corev1.ContainerStatus{Name: "app", Image: "app:1", ImageID: "app@sha256:1", Ready: ready}
	st.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{st}}
	Expect(K8sClient.Status().Update(SuiteCtx, &pod)).To(Succeed())
}

func initContainerNames(namespace, name string) []string {
	GinkgoHelper()
	var pod corev1.Pod
	Expect(K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: namespace, Name: name}, &pod)).To(Succeed())
	var names []string
	for _, c := range pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	return names
}

// CancelRestore sets spec.cancel on a restore.
func CancelRestore(namespace, name string) {
	GinkgoHelper()
	Expect(K8sClient.Patch(SuiteCtx, GetRestore(namespace, name), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`)))).To(Succeed())
}

// restoreOperations reads a restore's operations file.
func restoreOperations(store storage.ObjectStore, namespace, name string) []backup.Operation {
	GinkgoHelper()
	var ops []backup.Operation
	GunzipJSON(store, storage.Layout{}.Restore(namespace, name).ItemOperations, &ops)
	return ops
}

func restoreExec(onError cairnv1.HookErrorMode, command ...string) cairnv1.RestoreResourceHook {
	return cairnv1.RestoreResourceHook{Exec: &cairnv1.RestoreExecHook{Command: command, OnError: onError}}
}

var _ = Describe("Restore hooks", Ordered, func() {
	var (
		exec  *recordingExecutor
		store *storage.Filesystem
	)
	BeforeAll(func() {
		exec = &recordingExecutor{}
		store, _ = CreateDefaultLocation("default")
		stop := StartManager(controller.Config{Hooks: controller.HooksConfig{Executor: exec}, ItemOperationSyncFrequency: time.Second,
			VolumeData: controller.VolumeDataConfig{RestoreHelperImage: "cairn/manager:test"}})
		DeferCleanup(func() { stop() })
	})

	// backUp backs up namespace (pods only) and waits until it is Completed, ending the
	// pods' volume copies as their node agent would.
	backUp := func(namespace, name string) {
		GinkgoHelper()
		CreateBackup(OperatorNamespace, name, cairnv1.BackupSpec{IncludedNamespaces: []string{namespace}, IncludedResources: []string{"pods"}})
		Eventually(func(g Gomega) {
			b := GetBackup(OperatorNamespace, name)
			if b.Status.Phase == cairnv1.BackupPhaseWaitingForPluginOperations {
				var list cairnv1.PodVolumeBackupList
				g.Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(OperatorNamespace), client.MatchingLabels{cairnv1.PodVolumeBackupUIDLabel: string(b.UID)})).To(Succeed())
				for _, pvb := range list.Items {
					if pvb.Status.Phase == "" {
						pvb.Status.Phase, pvb.Status.SnapshotID = cairnv1.PodVolumePhaseCompleted, "snap-"+pvb.Name
						g.Expect(K8sClient.Status().Update(SuiteCtx, &pvb)).To(Succeed())
					}
				}
			}
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
		}).WithTimeout(60 * time.Second).Should(Succeed())
	}

	It("adds init hooks after the restore helper and before the pod's own init containers, to pods with and without volume data", func() {
		appPod("rh-init", "db", map[string]string{"backup.cairn.dev/backup-volumes": "data"}, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		appPod("rh-init", "web", map[string]string{
			"init.hook.restore.velero.io/container-image": "busybox:1", "init.hook.restore.velero.io/container-name": "from-annotation",
			"init.hook.restore.velero.io/command": `["/bin/sh","-c","ls /data"]`,
		})
		backUp("rh-init", "rh-init")
		CreateRestore(OperatorNamespace, "rh-init", cairnv1.RestoreSpec{BackupName: "rh-init",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"rh-init": "rh-init-copy"},
			Hooks: &cairnv1.RestoreHooks{Resources: []cairnv1.RestoreResourceHookSpec{{Name: "check", PostHooks: []cairnv1.RestoreResourceHook{
				{Init: &cairnv1.InitRestoreHook{InitContainers: []corev1.Container{{Name: "check-data", Image: "busybox:1", Command: []string{"ls", "/data"}}}}},
			}}}}})
		WaitRestore(OperatorNamespace, "rh-init", cairnv1.RestorePhaseWaitingForPluginOperations)
		Expect(initContainerNames("rh-init-copy", "db")).To(Equal([]string{podvolume.RestoreHelperContainer, "check-data", "own"}))
		// The pod's annotation takes the place of the spec's init hooks.
		Expect(initContainerNames("rh-init-copy", "web")).To(Equal([]string{"from-annotation", "own"}))
		CancelRestore(OperatorNamespace, "rh-init")
		WaitRestore(OperatorNamespace, "rh-init", cairnv1.RestorePhaseFailed)
	})

	It("runs an exec hook once the restored pod's container is Ready, not before; counts it; the restore completes", func() {
		appPod("rh-exec", "app", map[string]string{
			"post.hook.restore.cairn.dev/command": `["/reindex","--all"]`, "post.hook.restore.cairn.dev/wait-for-ready": "true",
		})
		backUp("rh-exec", "rh-exec")
		CreateRestore(OperatorNamespace, "rh-exec", cairnv1.RestoreSpec{BackupName: "rh-exec",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"rh-exec": "rh-exec-copy"}})
		WaitRestore(OperatorNamespace, "rh-exec", cairnv1.RestorePhaseWaitingForPluginOperations)
		// Created, not started: no exec.
		Consistently(func() []execCall { return exec.of("rh-exec-copy/app") }).WithTimeout(2 * time.Second).Should(BeEmpty())
		setPodRunning("rh-exec-copy", "app", false)
		Consistently(func() []execCall { return exec.of("rh-exec-copy/app") }).WithTimeout(2*time.Second).Should(BeEmpty(), "running but not Ready")
		setPodRunning("rh-exec-copy", "app", true)
		rs := WaitRestore(OperatorNamespace, "rh-exec", cairnv1.RestorePhaseCompleted)
		Expect(commands(exec.of("rh-exec-copy/app"))).To(Equal([]string{"/reindex --all"}))
		Expect(exec.of("rh-exec-copy/app")[0].container).To(Equal("app"))
		Expect(rs.Status.HookStatus).To(Equal(hookStatus(1, 0)))
		Expect(rs.Status.RestoreItemOperationsCompleted).To(Equal(int32(1)))
		ops := restoreOperations(store, OperatorNamespace, "rh-exec")
		Expect(ops).To(ContainElement(And(HaveField("Action", hooks.RestoreExecActionName), HaveField("Phase", backup.OperationCompleted),
			HaveField("OperationID", HavePrefix("rh-exec-copy/app#")),
			// Each hook's run is recorded: source, pod, container, command, exit code, output.
			HaveField("Description", And(ContainSubstring(`Hook annotation post.hook.restore.cairn.dev succeeded (pod rh-exec-copy/app, container app, command ["/reindex" "--all"]`),
				ContainSubstring(`exit code 0); stdout: "ran /reindex --all"`))))))
	})

	It("fails a hook whose container did not run within its waitTimeout, and one that exits non-zero: Fail makes the restore PartiallyFailed naming the hook, Continue a warning", func() {
		appPod("rh-fail", "slow", map[string]string{
			"post.hook.restore.cairn.dev/command": "/never", "post.hook.restore.cairn.dev/wait-timeout": "2s",
		})
		appPod("rh-fail", "failing", nil)
		appPod("rh-fail", "flaky", nil)
		backUp("rh-fail", "rh-fail")
		CreateRestore(OperatorNamespace, "rh-fail", cairnv1.RestoreSpec{BackupName: "rh-fail",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"rh-fail": "rh-fail-copy"},
			Hooks: &cairnv1.RestoreHooks{Resources: []cairnv1.RestoreResourceHookSpec{
				{Name: "migrate", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "failing"}},
					PostHooks: []cairnv1.RestoreResourceHook{restoreExec(cairnv1.HookErrorModeFail, "fail"), restoreExec("", "/not-after-a-failure")}},
				{Name: "warm", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "flaky"}},
					PostHooks: []cairnv1.RestoreResourceHook{restoreExec(cairnv1.HookErrorModeContinue, "fail", "--warm")}},
			}}})
		WaitRestore(OperatorNamespace, "rh-fail", cairnv1.RestorePhaseWaitingForPluginOperations)
		setPodRunning("rh-fail-copy", "failing", true)
		setPodRunning("rh-fail-copy", "flaky", true)
		// "slow" never runs.
		rs := WaitRestore(OperatorNamespace, "rh-fail", cairnv1.RestorePhasePartiallyFailed)
		Expect(exec.of("rh-fail-copy/slow")).To(BeEmpty())
		Expect(commands(exec.of("rh-fail-copy/failing"))).To(Equal([]string{"fail"}))
		Expect(commands(exec.of("rh-fail-copy/flaky"))).To(Equal([]string{"fail --warm"}))
		Expect(rs.Status.HookStatus).To(Equal(hookStatus(3, 3)))
		Expect(rs.Status.RestoreItemOperationsFailed).To(Equal(int32(2)))
		Expect(rs.Status.Warnings).To(BeNumerically(">=", 1))
		ops := restoreOperations(store, OperatorNamespace, "rh-fail")
		Expect(ops).To(ContainElement(And(HaveField("Phase", backup.OperationFailed),
			HaveField("Error", ContainSubstring(`hook annotation post.hook.restore.cairn.dev failed in pod rh-fail-copy/slow: waited 2s (its waitTimeout) for container "app" to run`)))))
		Expect(ops).To(ContainElement(And(HaveField("Phase", backup.OperationFailed),
			HaveField("Error", ContainSubstring("hook spec migrate postHooks[0] failed in pod rh-fail-copy/failing: the command exited with code 1")))))
		Expect(ops).To(ContainElement(And(HaveField("Phase", backup.OperationCompleted), HaveField("OperationID", HavePrefix("rh-fail-copy/flaky#")),
			HaveField("Description", ContainSubstring("failed and continued")))))
	})

	It("fails at once a hook whose container the pod does not have, and stops a running hook within two seconds of a cancel", func() {
		appPod("rh-cancel", "missing", map[string]string{"post.hook.restore.cairn.dev/command": "/x", "post.hook.restore.cairn.dev/container": "sidecar"})
		appPod("rh-cancel", "sleeper", map[string]string{"post.hook.restore.cairn.dev/command": "sleep", "post.hook.restore.cairn.dev/exec-timeout": "1h"})
		backUp("rh-cancel", "rh-cancel")
		CreateRestore(OperatorNamespace, "rh-cancel", cairnv1.RestoreSpec{BackupName: "rh-cancel",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"rh-cancel": "rh-cancel-copy"}})
		// The missing container fails while the pod has not even started.
		Eventually(func(g Gomega) {
			rs := GetRestore(OperatorNamespace, "rh-cancel")
			g.Expect(rs.Status.Phase).To(Equal(cairnv1.RestorePhaseWaitingForPluginOperationsPartiallyFailed))
			g.Expect(rs.Status.RestoreItemOperationsFailed).To(Equal(int32(1)))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		setPodRunning("rh-cancel-copy", "sleeper", true)
		Eventually(func() []string { return commands(exec.of("rh-cancel-copy/sleeper")) }).WithTimeout(10 * time.Second).Should(Equal([]string{"sleep"}))
		CancelRestore(OperatorNamespace, "rh-cancel")
		cancelled := time.Now()
		Eventually(func() cairnv1.RestorePhase { return GetRestore(OperatorNamespace, "rh-cancel").Status.Phase }).
			WithTimeout(2 * time.Second).Should(BeElementOf(cairnv1.RestorePhaseFinalizingCancelled, cairnv1.RestorePhaseFailed))
		GinkgoWriter.Printf("cancelled after %s\n", time.Since(cancelled))
		rs := WaitRestore(OperatorNamespace, "rh-cancel", cairnv1.RestorePhaseFailed)
		Expect(rs.Status.FailureReason).To(Equal(cairnv1.FailureReasonRestoreCancelled))
	})

	It("runs a team restore's exec hooks only where its requester may create pods/exec", func() {
		const ns = "team-rhooks"
		EnsureNamespace(ns)
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "restorer"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"cairn.dev"}, Resources: []string{"backups", "restores"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "create", "patch", "update"}},
		}}
		Expect(K8sClient.Create(SuiteCtx, role)).To(Succeed())
		Expect(K8sClient.Create(SuiteCtx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "restorer"},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: "alice", APIGroup: "rbac.authorization.k8s.io"}}})).To(Succeed())
		aliceCfg := rest.CopyConfig(RestCfg)
		aliceCfg.Impersonate = rest.ImpersonationConfig{UserName: "alice"}
		alice, err := client.New(aliceCfg, client.Options{Scheme: testenv.Scheme()})
		Expect(err).NotTo(HaveOccurred())

		appPod(ns, "app", map[string]string{"post.hook.restore.cairn.dev/command": "/reindex"})
		Expect(alice.Create(SuiteCtx, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"},
			Spec: cairnv1.BackupSpec{IncludedResources: []string{"pods"}}})).To(Succeed())
		waitBackup(ns, "b", cairnv1.BackupPhaseCompleted)
		var pod corev1.Pod
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: ns, Name: "app"}, &pod)).To(Succeed())
		Expect(K8sClient.Delete(SuiteCtx, &pod, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func() error {
			return K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: ns, Name: "app"}, &corev1.Pod{})
		}).
			Should(Satisfy(apierrors.IsNotFound))

		Expect(alice.Create(SuiteCtx, &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "denied"},
			Spec: cairnv1.RestoreSpec{BackupName: "b", IncludedResources: []string{"pods"}}})).To(Succeed())
		rs := WaitRestore(ns, "denied", cairnv1.RestorePhasePartiallyFailed)
		Expect(exec.of(ns + "/app")).To(BeEmpty())
		Expect(rs.Status.HookStatus).To(Equal(hookStatus(1, 1)))
		Expect(RestoredList(store, ns, "denied")[restore.Created]).To(HaveKeyWithValue("pods", []string{ns + "/app"}))
		Expect(restoreOperations(store, ns, "denied")).To(ContainElement(HaveField("Error",
			ContainSubstring("Forbidden: the restore's requester alice may not create pods/exec in namespace team-rhooks, so it may not run hooks there"))))
	})
})
