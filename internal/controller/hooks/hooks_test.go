package hooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	utilexec "k8s.io/utils/exec"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/controller"
	. "github.com/cairn-backup/cairn/internal/controller/controllertest"
	"github.com/cairn-backup/cairn/internal/hooks"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// execCall is one command the fake executor was asked to run, and what the API server held
// at that moment: the PodVolumeBackups of the pod, and their phases.
type execCall struct {
	pod, container, command string
	copies                  []cairnv1.PodVolumePhase
}

// recordingExecutor is the suite's pods/exec: it records each call, and runs "fail" as a
// command that exits 1.
type recordingExecutor struct {
	mu    sync.Mutex
	calls []execCall
}

func (e *recordingExecutor) Exec(ctx context.Context, namespace, pod, container string, command []string, stdout, _ io.Writer) error {
	var list cairnv1.PodVolumeBackupList
	if err := K8sClient.List(ctx, &list, client.InNamespace(OperatorNamespace)); err != nil {
		return err
	}
	call := execCall{pod: namespace + "/" + pod, container: container, command: strings.Join(command, " ")}
	for _, pvb := range list.Items {
		if pvb.Spec.Pod.Namespace == namespace && pvb.Spec.Pod.Name == pod {
			call.copies = append(call.copies, pvb.Status.Phase)
		}
	}
	e.mu.Lock()
	e.calls = append(e.calls, call)
	e.mu.Unlock()
	_, _ = io.WriteString(stdout, "ran "+call.command)
	if command[0] == "sleep" {
		<-ctx.Done()
		return ctx.Err()
	}
	if command[0] == "fail" {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code 1"), Code: 1}
	}
	return nil
}

// of returns the calls made in pod.
func (e *recordingExecutor) of(pod string) []execCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []execCall
	for _, c := range e.calls {
		if c.pod == pod {
			out = append(out, c)
		}
	}
	return out
}

func commands(calls []execCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.command)
	}
	return out
}

// runningPod creates a pod with one container "app" and makes it Running on node-1, as a
// kubelet would report it (envtest has none).
func runningPod(namespace, name string, labels, annotations map[string]string, volumes ...corev1.Volume) {
	GinkgoHelper()
	EnsureNamespace(namespace)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: "node-1", Volumes: volumes,
			Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
	}
	Expect(K8sClient.Create(SuiteCtx, pod)).To(Succeed())
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "app", Image: "app:1", ImageID: "app@sha256:1", Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}}}
	Expect(K8sClient.Status().Update(SuiteCtx, pod)).To(Succeed())
}

func execHook(onError cairnv1.HookErrorMode, command ...string) cairnv1.BackupResourceHook {
	return cairnv1.BackupResourceHook{Exec: &cairnv1.ExecHook{Command: command, OnError: onError}}
}

// waitBackup waits until the backup in namespace reaches phase.
func waitBackup(namespace, name string, phase cairnv1.BackupPhase) *cairnv1.Backup {
	GinkgoHelper()
	var b *cairnv1.Backup
	Eventually(func(g Gomega) {
		b = GetBackup(namespace, name)
		g.Expect(b.Status.Phase).To(Equal(phase), "failureReason %q, validationErrors %v", b.Status.FailureReason, b.Status.ValidationErrors)
	}).WithTimeout(60 * time.Second).Should(Succeed())
	return b
}

func hookStatus(attempted, failed int32) *cairnv1.HookStatus {
	return &cairnv1.HookStatus{HooksAttempted: attempted, HooksFailed: failed}
}

// archived reports whether the committed archive holds the pod.
func archived(store storage.ObjectStore, namespace, name, podNamespace, podName string) bool {
	GinkgoHelper()
	for _, e := range CommittedEntries(store, namespace, name) {
		if e.Name == archive.ItemPath("pods", "", podNamespace, podName) {
			return true
		}
	}
	return false
}

var _ = Describe("Backup hooks", Ordered, func() {
	var (
		exec  *recordingExecutor
		store *storage.Filesystem
		stop  func()
	)
	BeforeAll(func() {
		exec = &recordingExecutor{}
		store, _ = CreateDefaultLocation("default")
		stop = StartManager(controller.Config{Hooks: controller.HooksConfig{Executor: exec}, ItemOperationSyncFrequency: time.Second})
		DeferCleanup(func() { stop() })
	})

	It("runs a pod's pre hooks, then writes it, then its post hooks; counts them in status and logs each", func() {
		runningPod("shop", "web", map[string]string{"app": "web"}, map[string]string{
			"post.hook.backup.velero.io/command": `["/thaw","--all"]`,
		})
		CreateBackup(OperatorNamespace, "plain", cairnv1.BackupSpec{IncludedNamespaces: []string{"shop"}, Hooks: &cairnv1.BackupHooks{
			Resources: []cairnv1.BackupResourceHookSpec{
				{Name: "quiesce", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					Pre: []cairnv1.BackupResourceHook{execHook("", "/freeze"), execHook("", "/flush")}, Post: []cairnv1.BackupResourceHook{execHook("", "/never")}},
				{Name: "others", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
					Pre: []cairnv1.BackupResourceHook{execHook("", "/not-me")}},
			},
		}})
		b := waitBackup(OperatorNamespace, "plain", cairnv1.BackupPhaseCompleted)
		// The spec's pre hooks in order; the pod's post annotation (Velero's) takes the place
		// of the spec's post hooks (Velero's rule); the other spec selects another app.
		Expect(commands(exec.of("shop/web"))).To(Equal([]string{"/freeze", "/flush", "/thaw --all"}))
		Expect(exec.of("shop/web")[0].container).To(Equal("app"))
		Expect(b.Status.HookStatus).To(Equal(hookStatus(3, 0)))
		Expect(b.Status.Errors).To(BeZero())
		Expect(archived(store, OperatorNamespace, "plain", "shop", "web")).To(BeTrue())
		log := ReadLog(store, storage.Layout{}.Backup(OperatorNamespace, "plain"))
		Expect(log).To(ContainSubstring(`Hook spec quiesce pre[0] succeeded (pod shop/web, container app, command [\"/freeze\"]`))
		Expect(log).To(ContainSubstring(`Hook annotation post.hook.backup.velero.io succeeded`))
		Expect(log).To(ContainSubstring(`exit code 0); stdout: \"ran /thaw --all\"`))
	})

	It("starts a pod's volume copies after its pre hooks and runs its post hooks once the copies have been read", func() {
		runningPod("files", "store", nil, map[string]string{
			"backup.cairn.dev/backup-volumes":    "data",
			"pre.hook.backup.cairn.dev/command":  "/freeze",
			"post.hook.backup.cairn.dev/command": "/thaw",
		}, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		CreateBackup(OperatorNamespace, "copies", cairnv1.BackupSpec{IncludedNamespaces: []string{"files"}})
		b := waitBackup(OperatorNamespace, "copies", cairnv1.BackupPhaseWaitingForPluginOperations)
		// Pre ran before the copy existed; post waits for it.
		Expect(exec.of("files/store")).To(HaveLen(1))
		Expect(exec.of("files/store")[0].command).To(Equal("/freeze"))
		Expect(exec.of("files/store")[0].copies).To(BeEmpty())
		Expect(b.Status.HookStatus).To(Equal(hookStatus(1, 0)))
		Expect(b.Status.BackupItemOperationsAttempted).To(Equal(int32(2)), "the copy and the post hooks")
		Consistently(func() int { return len(exec.of("files/store")) }).WithTimeout(2 * time.Second).Should(Equal(1))

		// The node agent's part: the copy ends.
		var list cairnv1.PodVolumeBackupList
		Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(OperatorNamespace), client.MatchingLabels{cairnv1.PodVolumeBackupUIDLabel: string(b.UID)})).To(Succeed())
		Expect(list.Items).To(HaveLen(1))
		pvb := list.Items[0]
		pvb.Status.Phase, pvb.Status.SnapshotID, pvb.Status.BytesDone, pvb.Status.BytesTotal = cairnv1.PodVolumePhaseCompleted, "snap-1", 10, 10
		Expect(K8sClient.Status().Update(SuiteCtx, &pvb)).To(Succeed())

		b = waitBackup(OperatorNamespace, "copies", cairnv1.BackupPhaseCompleted)
		calls := exec.of("files/store")
		Expect(commands(calls)).To(Equal([]string{"/freeze", "/thaw"}))
		Expect(calls[1].copies).To(Equal([]cairnv1.PodVolumePhase{cairnv1.PodVolumePhaseCompleted}))
		Expect(b.Status.HookStatus).To(Equal(hookStatus(2, 0)))
		Expect(b.Status.BackupItemOperationsCompleted).To(Equal(int32(2)))
		var ops []backup.Operation
		GunzipJSON(store, storage.Layout{}.Backup(OperatorNamespace, "copies").ItemOperations, &ops)
		var post []backup.Operation
		for _, op := range ops {
			if op.Action == hooks.PostActionName {
				post = append(post, op)
			}
		}
		Expect(post).To(HaveLen(1))
		Expect(post[0].OperationID).To(Equal("files/store"))
		var result backup.OperationHooks
		Expect(json.Unmarshal(post[0].Result, &result)).To(Succeed())
		Expect(result.Hooks).To(Equal(&backup.HookCounts{Attempted: 1}))
	})

	// completeCopies ends the pod's volume copies of backup b, as its node agent would.
	completeCopies := func(b *cairnv1.Backup) {
		GinkgoHelper()
		var list cairnv1.PodVolumeBackupList
		Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(OperatorNamespace), client.MatchingLabels{cairnv1.PodVolumeBackupUIDLabel: string(b.UID)})).To(Succeed())
		Expect(list.Items).NotTo(BeEmpty())
		for _, pvb := range list.Items {
			pvb.Status.Phase, pvb.Status.SnapshotID = cairnv1.PodVolumePhaseCompleted, "snap-"+pvb.Name
			Expect(K8sClient.Status().Update(SuiteCtx, &pvb)).To(Succeed())
		}
	}
	emptyDir := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}

	It("fails the post hooks' operation naming a hook that failed with onError Fail, after the copy", func() {
		runningPod("post-fail", "store", nil, map[string]string{
			"backup.cairn.dev/backup-volumes":     "data",
			"post.hook.backup.cairn.dev/command":  `["fail","--thaw"]`,
			"post.hook.backup.cairn.dev/on-error": "Fail",
		}, emptyDir)
		CreateBackup(OperatorNamespace, "post-fails", cairnv1.BackupSpec{IncludedNamespaces: []string{"post-fail"}})
		completeCopies(waitBackup(OperatorNamespace, "post-fails", cairnv1.BackupPhaseWaitingForPluginOperations))
		b := waitBackup(OperatorNamespace, "post-fails", cairnv1.BackupPhasePartiallyFailed)
		Expect(commands(exec.of("post-fail/store"))).To(Equal([]string{"fail --thaw"}))
		Expect(b.Status.HookStatus).To(Equal(hookStatus(1, 1)))
		Expect(b.Status.BackupItemOperationsFailed).To(Equal(int32(1)))
		var ops []backup.Operation
		GunzipJSON(store, storage.Layout{}.Backup(OperatorNamespace, "post-fails").ItemOperations, &ops)
		Expect(ops).To(ContainElement(And(HaveField("Action", hooks.PostActionName), HaveField("Phase", backup.OperationFailed),
			HaveField("Error", ContainSubstring("hook annotation post.hook.backup.cairn.dev failed in pod post-fail/store: the command exited with code 1")))))
	})

	It("stops waiting on a running post hook within two seconds of a cancel", func() {
		runningPod("post-sleep", "store", nil, map[string]string{
			"backup.cairn.dev/backup-volumes":    "data",
			"post.hook.backup.cairn.dev/command": "sleep",
			"post.hook.backup.cairn.dev/timeout": "1h",
		}, emptyDir)
		CreateBackup(OperatorNamespace, "post-cancel", cairnv1.BackupSpec{IncludedNamespaces: []string{"post-sleep"}})
		completeCopies(waitBackup(OperatorNamespace, "post-cancel", cairnv1.BackupPhaseWaitingForPluginOperations))
		Eventually(func() []string { return commands(exec.of("post-sleep/store")) }).Should(Equal([]string{"sleep"}))
		CancelBackup("post-cancel")
		cancelled := time.Now()
		Eventually(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "post-cancel").Status.Phase }).
			WithTimeout(2 * time.Second).Should(BeElementOf(cairnv1.BackupPhaseFinalizingCancelled, cairnv1.BackupPhaseFailed))
		GinkgoWriter.Printf("cancelled after %s\n", time.Since(cancelled))
		b := waitBackup(OperatorNamespace, "post-cancel", cairnv1.BackupPhaseFailed)
		Expect(b.Status.FailureReason).To(Equal(cairnv1.FailureReasonCancelled))
		// The poll that saw the copy end is the one that ran the hook; the cancel stopped it
		// before it recorded anything, so both operations are cancelled, and fail.
		Expect(b.Status.BackupItemOperationsAttempted).To(Equal(int32(2)))
		Expect(b.Status.BackupItemOperationsFailed).To(Equal(int32(2)))
	})

	It("ends PartiallyFailed naming a hook that failed with onError Fail, leaving its pod out; Continue is a warning", func() {
		runningPod("failing", "db", map[string]string{"app": "db"}, nil)
		runningPod("failing", "cache", map[string]string{"app": "cache"}, nil)
		CreateBackup(OperatorNamespace, "fails", cairnv1.BackupSpec{IncludedNamespaces: []string{"failing"}, Hooks: &cairnv1.BackupHooks{
			Resources: []cairnv1.BackupResourceHookSpec{
				{Name: "db-quiesce", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
					Pre: []cairnv1.BackupResourceHook{execHook(cairnv1.HookErrorModeFail, "fail"), execHook("", "/not-after-a-failure")}},
				{Name: "cache-flush", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}},
					Pre: []cairnv1.BackupResourceHook{execHook(cairnv1.HookErrorModeContinue, "fail")}},
			},
		}})
		b := waitBackup(OperatorNamespace, "fails", cairnv1.BackupPhasePartiallyFailed)
		Expect(commands(exec.of("failing/db"))).To(Equal([]string{"fail"}))
		Expect(commands(exec.of("failing/cache"))).To(Equal([]string{"fail"}))
		Expect(b.Status.HookStatus).To(Equal(hookStatus(2, 2)))
		Expect(b.Status.Errors).To(Equal(int32(1)))
		Expect(b.Status.Warnings).To(BeNumerically(">=", 1))
		var results backup.Results
		GunzipJSON(store, storage.Layout{}.Backup(OperatorNamespace, "fails").Results, &results)
		Expect(results.Errors).To(ContainElement(And(
			HaveField("Item", "pods/failing/db"),
			HaveField("Message", ContainSubstring("hook spec db-quiesce pre[0] failed in pod failing/db: the command exited with code 1; the pod is left out of the backup")))))
		Expect(results.Warnings).To(ContainElement(HaveField("Message", ContainSubstring("Hook spec cache-flush pre[0] failed: the command exited with code 1"))))
		Expect(archived(store, OperatorNamespace, "fails", "failing", "db")).To(BeFalse())
		Expect(archived(store, OperatorNamespace, "fails", "failing", "cache")).To(BeTrue())
	})

	It("runs a team's hooks only where its requester may create pods/exec, and says so where not", func() {
		EnsureNamespace("team-hooks")
		runningPod("team-hooks", "app", nil, map[string]string{"pre.hook.backup.cairn.dev/command": "/freeze"})
		// alice may back up her namespace and read its pods, not exec into them.
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-hooks", Name: "backer"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"cairn.dev"}, Resources: []string{"backups"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		}}
		Expect(K8sClient.Create(SuiteCtx, role)).To(Succeed())
		Expect(K8sClient.Create(SuiteCtx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-hooks", Name: "alice"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "backer"},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: "alice", APIGroup: "rbac.authorization.k8s.io"}}})).To(Succeed())
		aliceCfg := rest.CopyConfig(RestCfg)
		aliceCfg.Impersonate = rest.ImpersonationConfig{UserName: "alice"}
		alice, err := client.New(aliceCfg, client.Options{Scheme: testenv.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		create := func(name string) {
			Expect(alice.Create(SuiteCtx, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-hooks", Name: name}})).To(Succeed())
		}

		create("denied")
		b := waitBackup("team-hooks", "denied", cairnv1.BackupPhasePartiallyFailed)
		Expect(exec.of("team-hooks/app")).To(BeEmpty())
		Expect(b.Status.HookStatus).To(Equal(hookStatus(1, 1)))
		var results backup.Results
		GunzipJSON(store, storage.Layout{}.Backup("team-hooks", "denied").Results, &results)
		Expect(results.Errors).To(ContainElement(HaveField("Message",
			ContainSubstring("Forbidden: the backup's requester alice may not create pods/exec in namespace team-hooks, so it may not run hooks there"))))

		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}})
		Expect(K8sClient.Update(SuiteCtx, role)).To(Succeed())
		create("allowed")
		b = waitBackup("team-hooks", "allowed", cairnv1.BackupPhaseCompleted)
		Expect(commands(exec.of("team-hooks/app"))).To(Equal([]string{"/freeze"}))
		Expect(b.Status.HookStatus).To(Equal(hookStatus(1, 0)))
	})
})

var _ = Describe("Backup hooks without pods/exec", Ordered, func() {
	It("fail, each saying that the installation disabled them, and nothing is run", func() {
		exec := &recordingExecutor{}
		store, _ := CreateDefaultLocation("default")
		stop := StartManager(controller.Config{Hooks: controller.HooksConfig{Executor: exec, Disabled: true}})
		DeferCleanup(stop)
		runningPod("disabled", "web", nil, map[string]string{"pre.hook.backup.cairn.dev/command": "/freeze", "pre.hook.backup.cairn.dev/on-error": "Continue"})
		CreateBackup(OperatorNamespace, "no-exec", cairnv1.BackupSpec{IncludedNamespaces: []string{"disabled"}})
		b := waitBackup(OperatorNamespace, "no-exec", cairnv1.BackupPhaseCompleted)
		Expect(exec.of("disabled/web")).To(BeEmpty())
		Expect(b.Status.HookStatus).To(Equal(hookStatus(1, 1)))
		Expect(b.Status.Warnings).To(BeNumerically(">=", 1))
		log := ReadLog(store, storage.Layout{}.Backup(OperatorNamespace, "no-exec"))
		Expect(log).To(ContainSubstring("hooks are disabled in this installation: the manager was started with --hooks-enabled=false"))
	})
})
