//go:build e2enode

package node

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/podvolume"
)

// voldataHook is the command line of the app image's hook command (hack/image/voldata's hook):
// `voldata hook [-require FILE] [-write FILE] [-sleep D] [-exit N]`, as a JSON array.
func voldataHook(args ...string) string {
	raw, _ := json.Marshal(append([]string{"/voldata", "hook"}, args...))
	return string(raw)
}

// hookPod is the volume-data app with a small emptyDir "scratch" (20 small files) and the
// annotations given: the container "app" runs voldata, whose binary the hooks run.
func hookPod(ns, name string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}, Annotations: annotations},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
			Containers: []corev1.Container{{
				Name: "app", Image: voldataImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Args: []string{"-seed=7", "-volume=/data/scratch:0:20", "-listen=:8080"},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1},
				SecurityContext: restrictedContainer(),
				VolumeMounts:    []corev1.VolumeMount{{Name: "scratch", MountPath: "/data/scratch"}},
			}},
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

// hookNamespace creates namespace ns, removed at the end of the spec.
func hookNamespace(ctx context.Context, ns string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	DeferCleanup(func() {
		_, _, _ = kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=180s")
	})
}

// startPods creates the pods and waits until every one is Ready.
func startPods(ctx context.Context, pods ...*corev1.Pod) {
	GinkgoHelper()
	for _, p := range pods {
		Expect(k8s.Create(ctx, p)).To(Succeed())
	}
	for _, p := range pods {
		kubectlOK("wait", "pod/"+p.Name, "-n", p.Namespace, "--for=condition=Ready", "--timeout=180s")
	}
}

// scratchDir is where the kubelet keeps the emptyDir "scratch" of the pod "app" of namespace ns
// on the node (the chart's nodeAgent.kubeletDir is the node's kubelet root).
func scratchDir(ctx context.Context, ns string) string {
	GinkgoHelper()
	var pod corev1.Pod
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &pod)).To(Succeed())
	return filepath.Join(nodeDir, "kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "scratch")
}

// markerTime reads the time a hook wrote into its marker file.
func markerTime(path string) time.Time {
	GinkgoHelper()
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(strings.TrimPrefix(string(data), "hook marker written at ")))
	Expect(err).NotTo(HaveOccurred(), "marker %q", data)
	return at
}

// createBackup creates a Backup in the operator's namespace, removed at the end of the spec.
func createBackup(ctx context.Context, name string, spec cairnv1.BackupSpec) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: cairnNamespace, Name: name}, Spec: spec})).To(Succeed())
	DeferCleanup(func() {
		_, _, _ = kubectl("delete", "backup", name, "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
	})
}

// backupResults reads a backup's results file from the filesystem location's directory.
func backupResults(storageDir, namespace, name string) backup.Results {
	GinkgoHelper()
	raw, err := os.ReadFile(filepath.Join(storageDir, "backups", namespace, name, name+"-results.json.gz"))
	Expect(err).NotTo(HaveOccurred())
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	Expect(err).NotTo(HaveOccurred())
	var results backup.Results
	Expect(json.NewDecoder(zr).Decode(&results)).To(Succeed())
	return results
}

func messages(ms []backup.ItemResult) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Message)
	}
	return out
}

// hookProcessRunning reports whether a hook process with args runs on the node (the test
// shares the machine's process table with the node's containers).
func hookProcessRunning(args ...string) bool {
	want := strings.Join(append([]string{"/voldata", "hook"}, args...), "\x00")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if cmdline, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(cmdline), want) {
			return true
		}
	}
	return false
}

// describeHooks adds the specs of backup and restore hooks (DESIGN.md section 17) to the
// ordered container that installed Cairn: storageDir is the filesystem location's directory.
func describeHooks(storageDir *string) {
	Describe("hooks", func() {
		It("runs a pre hook before the volume copy and a post hook after it; a restore's init hook sees the restored data, its exec hook runs once the pod is Ready", func(ctx SpecContext) {
			ns := "node-hooks-" + rand.String(5)
			hookNamespace(ctx, ns)
			startPods(ctx, hookPod(ns, "app", map[string]string{
				"backup.cairn.dev/backup-volumes":    "scratch",
				"pre.hook.backup.cairn.dev/command":  voldataHook("-write", "/data/scratch/pre-hook-marker"),
				"post.hook.backup.cairn.dev/command": voldataHook("-require", "/data/scratch/pre-hook-marker", "-write", "/data/scratch/post-hook-marker"),
			}))
			original := scratchDir(ctx, ns)

			By("backing the namespace up: the pre hook, the copy of the emptyDir, the post hook")
			createBackup(ctx, ns, cairnv1.BackupSpec{IncludedNamespaces: []string{ns}})
			waitBackupPhase(ctx, ns, cairnv1.BackupPhaseCompleted)
			b := getBackup(ctx, Default, ns)
			Expect(b.Status.HookStatus).To(Equal(&cairnv1.HookStatus{HooksAttempted: 2}))
			pvbs := podVolumeBackups(ctx, Default, b.UID)
			Expect(pvbs).To(HaveKey("scratch"))
			copied := pvbs["scratch"].Status.CompletionTimestamp
			Expect(copied).NotTo(BeNil())
			Expect(markerTime(filepath.Join(original, "post-hook-marker"))).NotTo(BeTemporally("<", copied.Time), "the post hook ran after the copy ended")
			fmt.Fprintf(GinkgoWriter, "pre hook at %s, copy ended at %s, post hook at %s\n", markerTime(filepath.Join(original, "pre-hook-marker")).Format(time.RFC3339Nano),
				copied.Format(time.RFC3339), markerTime(filepath.Join(original, "post-hook-marker")).Format(time.RFC3339Nano))

			By("restoring it into another namespace with an init hook that needs the pre hook's marker, and an exec hook that waits for Ready")
			to := ns + "-r"
			DeferCleanup(func() {
				_, _, _ = kubectl("delete", "namespace", to, "--ignore-not-found", "--wait", "--timeout=180s")
				_, _, _ = kubectl("delete", "restore", ns, "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
			})
			check := corev1.Container{Name: "check-data", Image: voldataImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/voldata", "hook", "-require", "/data/scratch/pre-hook-marker", "-write", "/data/scratch/init-saw-data"},
				SecurityContext: restrictedContainer(), VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/data/scratch"}}}
			Expect(k8s.Create(ctx, &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: cairnNamespace, Name: ns}, Spec: cairnv1.RestoreSpec{
				BackupName: ns, NamespaceMapping: map[string]cairnv1.NamespaceName{ns: cairnv1.NamespaceName(to)},
				Hooks: &cairnv1.RestoreHooks{Resources: []cairnv1.RestoreResourceHookSpec{{Name: "app", PostHooks: []cairnv1.RestoreResourceHook{
					{Init: &cairnv1.InitRestoreHook{InitContainers: []corev1.Container{check}}},
					{Exec: &cairnv1.RestoreExecHook{Container: "app", WaitForReady: ptr.To(true),
						Command: []string{"/voldata", "hook", "-require", "/data/scratch/init-saw-data", "-write", "/data/scratch/exec-hook-marker"}}},
				}}}},
			}})).To(Succeed())
			waitRestoreCompleted(ctx, ns)
			r := getRestore(ctx, Default, k8s, ns)
			Expect(r.Status.HookStatus).To(Equal(&cairnv1.HookStatus{HooksAttempted: 1}))

			var pod corev1.Pod
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: to, Name: "app"}, &pod)).To(Succeed())
			var inits []string
			for _, c := range pod.Spec.InitContainers {
				inits = append(inits, c.Name)
			}
			Expect(inits).To(Equal([]string{podvolume.RestoreHelperContainer, "check-data"}))
			restored := scratchDir(ctx, to)
			Expect(filepath.Join(restored, "pre-hook-marker")).To(BeAnExistingFile(), "the pre hook's marker is in the backed-up data")
			Expect(filepath.Join(restored, "post-hook-marker")).NotTo(BeAnExistingFile(), "the post hook ran after the copy had read the volume")
			Expect(filepath.Join(restored, "init-saw-data")).To(BeAnExistingFile(), "the init hook found the restored data")
			var ready time.Time
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady {
					ready = c.LastTransitionTime.Time
				}
			}
			Expect(ready).NotTo(BeZero())
			Expect(markerTime(filepath.Join(restored, "exec-hook-marker"))).NotTo(BeTemporally("<", ready), "the exec hook ran once the pod was Ready")
		})

		It("ends PartiallyFailed naming a Fail hook; cuts off a hook past its timeout; fails a hook of a missing container at once", func(ctx SpecContext) {
			ns := "node-hooks-fail-" + rand.String(5)
			hookNamespace(ctx, ns)
			startPods(ctx,
				hookPod(ns, "fails", map[string]string{"pre.hook.backup.cairn.dev/command": voldataHook("-exit", "5")}),
				hookPod(ns, "slow", map[string]string{"pre.hook.backup.cairn.dev/command": voldataHook("-sleep", "1h"),
					"pre.hook.backup.cairn.dev/timeout": "2s", "pre.hook.backup.cairn.dev/on-error": "Continue"}),
				hookPod(ns, "missing", map[string]string{"pre.hook.backup.cairn.dev/command": voldataHook(),
					"pre.hook.backup.cairn.dev/container": "nope", "pre.hook.backup.cairn.dev/on-error": "Continue"}),
			)
			started := time.Now()
			createBackup(ctx, ns, cairnv1.BackupSpec{IncludedNamespaces: []string{ns}})
			waitBackupPhase(ctx, ns, cairnv1.BackupPhasePartiallyFailed)
			took := time.Since(started)
			fmt.Fprintf(GinkgoWriter, "The backup ended in %s\n", took.Round(time.Millisecond))
			Expect(took).To(BeNumerically("<", 30*time.Second), "the sleeping hook was cut off at 2 s")
			b := getBackup(ctx, Default, ns)
			Expect(b.Status.HookStatus).To(Equal(&cairnv1.HookStatus{HooksAttempted: 3, HooksFailed: 3}))
			results := backupResults(*storageDir, cairnNamespace, ns)
			Expect(messages(results.Errors)).To(ContainElement(ContainSubstring(
				fmt.Sprintf("hook annotation pre.hook.backup.cairn.dev failed in pod %s/fails: the command exited with code 5; the pod is left out of the backup", ns))))
			Expect(messages(results.Warnings)).To(ContainElement(And(ContainSubstring("timed out after 2s: the command was abandoned"), ContainSubstring(ns+"/slow"))))
			Expect(messages(results.Warnings)).To(ContainElement(And(ContainSubstring(fmt.Sprintf(`container "nope" is not in pod %s/missing`, ns)), ContainSubstring("duration 0s"))))
		})

		It("ends a backup cancelled during a long hook within two seconds", func(ctx SpecContext) {
			ns := "node-hooks-cancel-" + rand.String(5)
			hookNamespace(ctx, ns)
			startPods(ctx, hookPod(ns, "sleeper", map[string]string{"pre.hook.backup.cairn.dev/command": voldataHook("-sleep", "1h"),
				"pre.hook.backup.cairn.dev/timeout": "1h"}))
			createBackup(ctx, ns, cairnv1.BackupSpec{IncludedNamespaces: []string{ns}})
			Eventually(func() bool { return hookProcessRunning("-sleep", "1h") }).WithTimeout(60*time.Second).WithPolling(200*time.Millisecond).
				Should(BeTrue(), "the hook runs in the pod")
			kubectlOK("patch", "backup", ns, "-n", cairnNamespace, "--type=merge", "-p", `{"spec":{"cancel":true}}`)
			cancelled := time.Now()
			Eventually(func(g Gomega) cairnv1.BackupPhase { return getBackup(ctx, g, ns).Status.Phase }).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).
				Should(BeElementOf(cairnv1.BackupPhaseFinalizingCancelled, cairnv1.BackupPhaseFailed))
			fmt.Fprintf(GinkgoWriter, "The backup left InProgress %s after the cancel\n", time.Since(cancelled).Round(time.Millisecond))
			waitBackupPhase(ctx, ns, cairnv1.BackupPhaseFailed)
		})

		It("runs a tenant's hooks only when its ServiceAccount may create pods/exec, and says so when not", func(ctx SpecContext) {
			ns := "node-hooks-team-" + rand.String(5)
			hookNamespace(ctx, ns)
			startPods(ctx, hookPod(ns, "app", map[string]string{"pre.hook.backup.cairn.dev/command": voldataHook("-write", "/data/scratch/tenant-hook")}))
			Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"}})).To(Succeed())
			role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backer"}, Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"cairn.dev"}, Resources: []string{"backups"}, Verbs: []string{"create", "get"}},
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
			}}
			Expect(k8s.Create(ctx, role)).To(Succeed())
			Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "backer"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tenant", Namespace: ns}}})).To(Succeed())

			By("acting as the ServiceAccount with a token the API server issued")
			tenant := serviceAccountClient(ctx, ns, "tenant")
			teamBackup := func(name string) cairnv1.Backup {
				GinkgoHelper()
				Expect(tenant.Create(ctx, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
					Spec: cairnv1.BackupSpec{IncludedResources: []string{"pods"}}})).To(Succeed())
				DeferCleanup(func() {
					_, _, _ = kubectl("delete", "backup", name, "-n", ns, "--ignore-not-found", "--wait", "--timeout=120s")
				})
				var b cairnv1.Backup
				Eventually(func(g Gomega) cairnv1.BackupPhase {
					g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &b)).To(Succeed())
					return b.Status.Phase
				}).WithTimeout(120 * time.Second).WithPolling(500 * time.Millisecond).Should(BeElementOf(
					cairnv1.BackupPhaseCompleted, cairnv1.BackupPhasePartiallyFailed, cairnv1.BackupPhaseFailed, cairnv1.BackupPhaseFailedValidation))
				return b
			}

			b := teamBackup("denied")
			Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhasePartiallyFailed))
			Expect(b.Status.HookStatus).To(Equal(&cairnv1.HookStatus{HooksAttempted: 1, HooksFailed: 1}))
			Expect(messages(backupResults(*storageDir, ns, "denied").Errors)).To(ContainElement(ContainSubstring(
				fmt.Sprintf("Forbidden: the backup's requester system:serviceaccount:%s:tenant may not create pods/exec in namespace %s, so it may not run hooks there", ns, ns))))
			Expect(filepath.Join(scratchDir(ctx, ns), "tenant-hook")).NotTo(BeAnExistingFile())

			By("granting the ServiceAccount pods/exec")
			role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}})
			Expect(k8s.Update(ctx, role)).To(Succeed())
			b = teamBackup("allowed")
			Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
			Expect(b.Status.HookStatus).To(Equal(&cairnv1.HookStatus{HooksAttempted: 1}))
			Expect(filepath.Join(scratchDir(ctx, ns), "tenant-hook")).To(BeAnExistingFile())
		})

		// The measure of docs/benchmarks.md ('BENCHES=hooks make bench'): it runs when
		// CAIRN_NODE_MEASURE names the file its result goes to (docs/bench/hooks.txt), so that
		// the suite's own run does not start 50 pods.
		It("measures the time an empty pre and post hook pair adds to a backup of 50 pods", Label("measure"), func(ctx SpecContext) {
			out := os.Getenv("CAIRN_NODE_MEASURE")
			if out == "" {
				Skip("the measure runs with CAIRN_NODE_MEASURE=<result file> (BENCHES=hooks make bench)")
			}
			const pods = 50
			ns := "node-hooks-bench-" + rand.String(5)
			hookNamespace(ctx, ns)
			var list []*corev1.Pod
			for i := range pods {
				p := hookPod(ns, fmt.Sprintf("p%02d", i), nil)
				p.Spec.Containers[0].Args = []string{"-seed=7", "-volume=/data/scratch:0:0", "-listen=:8080"}
				p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{}
				list = append(list, p)
			}
			startPods(ctx, list...)
			hooked := &cairnv1.BackupHooks{Resources: []cairnv1.BackupResourceHookSpec{{Name: "empty",
				Pre:  []cairnv1.BackupResourceHook{{Exec: &cairnv1.ExecHook{Command: []string{"/voldata", "hook"}}}},
				Post: []cairnv1.BackupResourceHook{{Exec: &cairnv1.ExecHook{Command: []string{"/voldata", "hook"}}}}}}}
			run := func(name string, hooks *cairnv1.BackupHooks) time.Duration {
				GinkgoHelper()
				started := time.Now()
				createBackup(ctx, name, cairnv1.BackupSpec{IncludedNamespaces: []string{ns}, IncludedResources: []string{"pods"}, Hooks: hooks})
				Eventually(func(g Gomega) cairnv1.BackupPhase { return getBackup(ctx, g, name).Status.Phase }).
					WithTimeout(180 * time.Second).WithPolling(50 * time.Millisecond).Should(Equal(cairnv1.BackupPhaseCompleted))
				took := time.Since(started)
				if hooks != nil {
					Expect(getBackup(ctx, Default, name).Status.HookStatus).To(Equal(&cairnv1.HookStatus{HooksAttempted: 2 * pods}))
				}
				return took
			}
			var without, with []time.Duration
			for i := range 3 {
				without = append(without, run(fmt.Sprintf("%s-plain-%d", ns, i), nil))
				with = append(with, run(fmt.Sprintf("%s-hooks-%d", ns, i), hooked))
			}
			runs := fmt.Sprintf("without hooks %v, with hooks %v (in the order run, alternately)", without, with)
			slices.Sort(without)
			slices.Sort(with)
			added := with[1] - without[1]
			fmt.Fprintf(GinkgoWriter, "MEASURE hooks: %d pods, backups without hooks %v, with an empty pre+post pair %v; median added %s (goal < 2s)\n",
				pods, without, with, added.Round(time.Millisecond))
			AddReportEntry("empty pre+post hook pair, 50 pods", fmt.Sprintf("without %v, with %v, median added %s", without, with, added.Round(time.Millisecond)))
			// In the benchmarks' format, for hack/bench.sh's report: medians, and each run.
			result := fmt.Sprintf("BenchmarkHookPair50Pods\t1\t%.3f s-without\t%.3f s-with\t%.3f s-added\t%d hooks\n", without[1].Seconds(), with[1].Seconds(), added.Seconds(), 2*pods)
			result += "# " + runs + "\n"
			Expect(os.WriteFile(out, []byte(result), 0o644)).To(Succeed())
		})
	})
}
