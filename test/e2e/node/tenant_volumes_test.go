//go:build e2enode

package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/storage"
)

// serviceAccountClient acts as the ServiceAccount ns/name, with a token the API server issued.
func serviceAccountClient(ctx context.Context, ns, name string) client.Client {
	GinkgoHelper()
	admin, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	clientset, err := kubernetes.NewForConfig(admin)
	Expect(err).NotTo(HaveOccurred())
	token, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](1800)}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	cfg := &rest.Config{Host: admin.Host, BearerToken: token.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData, CAFile: admin.CAFile, ServerName: admin.ServerName}}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// tenantOf makes the ServiceAccount "tenant" of namespace ns a team member as issue 39's tries
// had it: the namespace admin role and the chart's backup-editor role, in ns only.
func tenantOf(ctx context.Context, ns string) client.Client {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"}})).To(Succeed())
	for _, role := range []string{"admin", release + "-backup-editor"} {
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-" + role},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tenant", Namespace: ns}}})).To(Succeed())
	}
	return serviceAccountClient(ctx, ns, "tenant")
}

// scratchOnNode is where the kubelet keeps pod's emptyDir volume "scratch" on the node.
func scratchOnNode(pod corev1.Pod) string {
	return filepath.Join(nodeDir, "kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "scratch")
}

// linkToVolume is the link a tenant plants in a volume of its own to reach pod's emptyDir
// volume: relative, from a directory at the top of any pod volume under the kubelet's pods
// directory (pods/<uid>/volumes/<plugin>/<volume>/<link>).
func linkToVolume(pod corev1.Pod, volume string) string {
	return filepath.Join("..", "..", "..", "..", string(pod.UID), "volumes", "kubernetes.io~empty-dir", volume)
}

// restoreOperationErrors are the errors of the async operations of the restore ns/name, from its
// operations file in the filesystem location's directory.
func restoreOperationErrors(ctx context.Context, storageDir, ns, name string) []string {
	GinkgoHelper()
	store, err := storage.NewFilesystem(storageDir)
	Expect(err).NotTo(HaveOccurred())
	ops, err := backup.ReadOperations(ctx, store, storage.Layout{}.Restore(ns, name).ItemOperations)
	Expect(err).NotTo(HaveOccurred())
	var errs []string
	for _, op := range ops {
		if op.Error != "" {
			errs = append(errs, op.Error)
		}
	}
	return errs
}

// waitTeamRestoreEnded waits until the restore ns/name is in a terminal phase, and returns it.
func waitTeamRestoreEnded(ctx context.Context, ns, name string, timeout time.Duration) cairnv1.Restore {
	GinkgoHelper()
	var r cairnv1.Restore
	Eventually(func(g Gomega) cairnv1.RestorePhase {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &r)).To(Succeed())
		return r.Status.Phase
	}).WithTimeout(timeout).WithPolling(500 * time.Millisecond).Should(BeElementOf(cairnv1.RestorePhaseCompleted,
		cairnv1.RestorePhasePartiallyFailed, cairnv1.RestorePhaseFailed, cairnv1.RestorePhaseFailedValidation))
	return r
}

// teamBackupCompleted makes the tenant back its namespace up, and waits for it to complete.
func teamBackupCompleted(ctx context.Context, tenant client.Client, ns, name string) {
	GinkgoHelper()
	Expect(tenant.Create(ctx, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	DeferCleanup(func() {
		_, _, _ = kubectl("delete", "backup", name, "-n", ns, "--ignore-not-found", "--wait", "--timeout=120s")
	})
	Eventually(func(g Gomega) cairnv1.BackupPhase {
		var b cairnv1.Backup
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &b)).To(Succeed())
		return b.Status.Phase
	}).WithTimeout(180 * time.Second).WithPolling(500 * time.Millisecond).Should(Equal(cairnv1.BackupPhaseCompleted))
}

// localClaim is a claim "data" of namespace ns bound to a local PersistentVolume on the node's
// directory hostDir, removed at the end of the spec.
func localClaim(ns, hostDir string) {
	GinkgoHelper()
	Expect(os.MkdirAll(hostDir, 0o750)).To(Succeed())
	Expect(os.Chown(hostDir, 65532, 65532)).To(Succeed())
	pv := "tenant-" + ns
	DeferCleanup(func() {
		_, _, _ = kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=180s")
		_, _, _ = kubectl("delete", "persistentvolume", pv, "--ignore-not-found", "--wait", "--timeout=60s")
		Expect(os.RemoveAll(hostDir)).To(Succeed())
	})
	apply(fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata:
  name: %[2]s
spec:
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  local:
    path: %[3]q
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions:
            - key: kubernetes.io/hostname
              operator: In
              values: [cairn-node]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: %[1]s
spec:
  storageClassName: ""
  volumeName: %[2]s
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
`, ns, pv, hostDir))
}

// withClaim adds the claim "data" to pod at /data/claim, as voldata's second volume with a few
// small files, and opts both volumes in.
func withClaim(pod *corev1.Pod) *corev1.Pod {
	pod.Annotations = map[string]string{"backup.cairn.dev/backup-volumes": "scratch,claim"}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "claim",
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
	c := &pod.Spec.Containers[0]
	c.Args = append(c.Args, "-volume=/data/claim:65536:50")
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "claim", MountPath: "/data/claim"})
	return pod
}

// describeTenantVolumes adds issue 39's specs to the ordered container that installed Cairn: a
// tenant of one team, with a real token, aims the node agent at another team's volume on the
// same node, and the agent never writes there; the node's bounds hold whatever the tenant asks.
func describeTenantVolumes(storageDir *string) {
	Describe("a tenant's volume restores", Ordered, func() {
		var (
			victim       corev1.Pod
			victimDigest voldataReport
		)
		victimUnchanged := func() {
			GinkgoHelper()
			now, err := treeDigest(scratchOnNode(victim))
			Expect(err).NotTo(HaveOccurred())
			Expect(now).To(Equal(victimDigest), "team-b's volume changed")
		}

		BeforeAll(func(ctx SpecContext) {
			By("running a pod of team-b on the same node, its emptyDir full of its own files")
			teamB := "node-team-b-" + rand.String(5)
			hookNamespace(ctx, teamB)
			startPods(ctx, hookPod(teamB, "app", nil))
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: teamB, Name: "app"}, &victim)).To(Succeed())
			var err error
			victimDigest, err = treeDigest(scratchOnNode(victim))
			Expect(err).NotTo(HaveOccurred())
			Expect(victimDigest.Files).To(BeNumerically(">", 10))
		})

		It("never writes through the links a kept claim holds: team-b's volume is unchanged and the claim gets the backup's directories", func(ctx SpecContext) {
			ns := "node-team-a-" + rand.String(5)
			hookNamespace(ctx, ns)
			tenant := tenantOf(ctx, ns)
			hostDir := filepath.Join(nodeDir, "volumes", ns)
			localClaim(ns, hostDir)
			startPods(ctx, withClaim(hookPod(ns, "app", nil)))
			teamBackupCompleted(ctx, tenant, ns, "before")

			By("leaving links where the backup has directories in the claim, which outlives the pod")
			kubectlOK("delete", "pod", "app", "-n", ns, "--wait", "--timeout=120s")
			Expect(os.RemoveAll(filepath.Join(hostDir, "small"))).To(Succeed())
			Expect(os.Symlink(linkToVolume(victim, "scratch"), filepath.Join(hostDir, "small"))).To(Succeed())
			Expect(os.RemoveAll(filepath.Join(hostDir, "modes"))).To(Succeed())
			Expect(os.Symlink(filepath.Join("/host/pods", string(victim.UID), "volumes", "kubernetes.io~empty-dir", "scratch"),
				filepath.Join(hostDir, "modes"))).To(Succeed())

			By("restoring the pod as the tenant, into the claim as it is")
			Expect(tenant.Create(ctx, &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "in-place"},
				Spec: cairnv1.RestoreSpec{BackupName: "before", IncludedResources: []string{"pods"}}})).To(Succeed())
			r := waitTeamRestoreEnded(ctx, ns, "in-place", 180*time.Second)
			Expect(r.Status.Phase).To(Equal(cairnv1.RestorePhaseCompleted), "%s %v", r.Status.FailureReason, r.Status.ValidationErrors)
			victimUnchanged()
			for _, dir := range []string{"small", "modes"} {
				info, err := os.Lstat(filepath.Join(hostDir, dir))
				Expect(err).NotTo(HaveOccurred())
				Expect(info.IsDir()).To(BeTrue(), "%s is %v: the link was not replaced", dir, info.Mode())
			}
			kubectlOK("wait", "pod/app", "-n", ns, "--for=condition=Ready", "--timeout=120s")
		})

		It("writes nothing for a pod put in place of the one the restore made: that volume fails naming the pod, the restore is PartiallyFailed within a minute", func(ctx SpecContext) {
			ns := "node-team-a-" + rand.String(5)
			hookNamespace(ctx, ns)
			tenant := tenantOf(ctx, ns)
			localClaim(ns, filepath.Join(nodeDir, "volumes", ns))
			startPods(ctx, withClaim(hookPod(ns, "app", nil)))
			teamBackupCompleted(ctx, tenant, ns, "before")
			kubectlOK("delete", "pod", "app", "-n", ns, "--wait", "--timeout=120s")
			kubectlOK("delete", "pvc", "data", "-n", ns, "--wait", "--timeout=120s")

			By("restoring the pod alone: without its claim it stays Pending")
			Expect(tenant.Create(ctx, &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swap"},
				Spec: cairnv1.RestoreSpec{BackupName: "before", IncludedResources: []string{"pods"}}})).To(Succeed())
			var made corev1.Pod
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &made)).To(Succeed())
			}).WithTimeout(120 * time.Second).Should(Succeed())

			By("deleting it, and creating the tenant's own pod of that name, whose first init container is named as the helper")
			Expect(tenant.Delete(ctx, &made)).To(Succeed())
			Eventually(func() error {
				return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &corev1.Pod{})
			}).WithTimeout(60 * time.Second).ShouldNot(Succeed())
			own := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				InitContainers: []corev1.Container{{Name: podvolume.RestoreHelperContainer, Image: envOr("PAUSE_IMAGE", "cairn-pause:dev"),
					ImagePullPolicy: corev1.PullIfNotPresent, SecurityContext: restrictedContainer(),
					VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
				Containers: []corev1.Container{{Name: "app", Image: envOr("PAUSE_IMAGE", "cairn-pause:dev"), ImagePullPolicy: corev1.PullIfNotPresent,
					SecurityContext: restrictedContainer()}},
				Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			}}
			Expect(tenant.Create(ctx, own)).To(Succeed())
			replaced := time.Now()
			Eventually(func(g Gomega) string {
				g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, own)).To(Succeed())
				s, ok := containerStatus(*own, podvolume.RestoreHelperContainer)
				g.Expect(ok).To(BeTrue())
				g.Expect(s.State.Running).NotTo(BeNil())
				return scratchOnNode(*own)
			}).WithTimeout(120 * time.Second).Should(BeADirectory())
			Expect(os.Symlink(linkToVolume(victim, "scratch"), filepath.Join(scratchOnNode(*own), "small"))).To(Succeed())

			r := waitTeamRestoreEnded(ctx, ns, "swap", 90*time.Second)
			fmt.Fprintf(GinkgoWriter, "The restore ended %s after the pod was replaced\n", time.Since(replaced).Round(time.Millisecond))
			Expect(time.Since(replaced)).To(BeNumerically("<", time.Minute))
			Expect(r.Status.Phase).To(Equal(cairnv1.RestorePhasePartiallyFailed))
			// Refused before a node was bound, the volume's PodVolumeRestore is deleted with its
			// failed operation (no agent ever saw it); refused by the agent, it stays, not Completed.
			pvrs := podVolumeRestores(ctx, Default, k8s, r.UID)
			if pvr, ok := pvrs["scratch"]; ok {
				Expect(pvr.Status.Phase).NotTo(Equal(cairnv1.PodVolumePhaseCompleted))
			}
			// The restore may look between the tenant's delete and create: then it finds the pod
			// gone, and refuses as surely, naming it.
			Expect(append(restoreOperationErrors(ctx, *storageDir, ns, "swap"), pvrs["scratch"].Status.Message)).To(
				ContainElement(SatisfyAny(ContainSubstring(fmt.Sprintf("pod %s/app was replaced after the restore created it", ns)),
					ContainSubstring(fmt.Sprintf("pod %s/app is gone before its volumes were restored", ns)))))
			victimUnchanged()
			Expect(filepath.Join(scratchOnNode(*own), "small", "00")).NotTo(BeADirectory())
		})

		It("restores a 10 GiB sparse file with less than 1 MiB written to disk", func(ctx SpecContext) {
			ns := "node-sparse-" + rand.String(5)
			hookNamespace(ctx, ns)
			pod := hookPod(ns, "app", map[string]string{"backup.cairn.dev/backup-volumes": "scratch"})
			startPods(ctx, pod)
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, pod)).To(Succeed())
			sparse := filepath.Join(scratchOnNode(*pod), "sparse.img")
			f, err := os.Create(sparse)
			Expect(err).NotTo(HaveOccurred())
			_, err = f.WriteAt([]byte("the only data"), 5<<30)
			Expect(err).NotTo(HaveOccurred())
			Expect(f.Truncate(10 << 30)).To(Succeed())
			Expect(f.Close()).To(Succeed())

			createBackup(ctx, ns, cairnv1.BackupSpec{IncludedNamespaces: []string{ns}})
			waitBackupPhase(ctx, ns, cairnv1.BackupPhaseCompleted)
			to := ns + "-r"
			DeferCleanup(func() {
				_, _, _ = kubectl("delete", "namespace", to, "--ignore-not-found", "--wait", "--timeout=180s")
				_, _, _ = kubectl("delete", "restore", ns, "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
			})
			apply(restoreManifest(ns, ns, ns, to))
			waitRestoreCompleted(ctx, ns)
			var restored corev1.Pod
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: to, Name: "app"}, &restored)).To(Succeed())
			var st syscall.Stat_t
			Expect(syscall.Stat(filepath.Join(scratchOnNode(restored), "sparse.img"), &st)).To(Succeed())
			fmt.Fprintf(GinkgoWriter, "sparse.img: %d bytes, %d allocated\n", st.Size, st.Blocks*512)
			Expect(st.Size).To(BeEquivalentTo(10 << 30))
			Expect(st.Blocks * 512).To(BeNumerically("<", 1<<20))
		})

		It("never runs more copies at once on the node than nodeAgent.maxConcurrentCopies; the others wait, saying so", func(ctx SpecContext) {
			ns := "node-slots-" + rand.String(5)
			hookNamespace(ctx, ns)
			var pods []*corev1.Pod
			for i := range 8 {
				p := hookPod(ns, fmt.Sprintf("app-%d", i), map[string]string{"backup.cairn.dev/backup-volumes": "scratch"})
				p.Spec.Containers[0].Args = []string{fmt.Sprintf("-seed=%d", i), "-volume=/data/scratch:67108864:20", "-listen=:8080"}
				pods = append(pods, p)
			}
			startPods(ctx, pods...)

			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			Expect(err).NotTo(HaveOccurred())
			wc, err := client.NewWithWatch(cfg, client.Options{Scheme: k8s.Scheme()})
			Expect(err).NotTo(HaveOccurred())
			w, err := wc.Watch(ctx, &cairnv1.PodVolumeBackupList{}, client.InNamespace(cairnNamespace))
			Expect(err).NotTo(HaveOccurred())
			defer w.Stop()
			createBackup(ctx, ns, cairnv1.BackupSpec{IncludedNamespaces: []string{ns}})

			running, ended, peak, waited := map[string]bool{}, map[string]bool{}, 0, false
			deadline := time.After(240 * time.Second)
			for len(ended) < len(pods) {
				select {
				case <-deadline:
					Fail(fmt.Sprintf("%d of %d copies ended in time", len(ended), len(pods)))
				case ev, ok := <-w.ResultChan():
					Expect(ok).To(BeTrue(), "the watch ended")
					pvb, isPVB := ev.Object.(*cairnv1.PodVolumeBackup)
					if !isPVB || ev.Type == watch.Bookmark || pvb.Spec.Pod.Namespace != ns {
						continue
					}
					if pvb.Status.Phase == cairnv1.PodVolumePhaseInProgress {
						running[pvb.Name] = true
					} else {
						delete(running, pvb.Name)
					}
					if pvb.Status.Phase.IsTerminal() && ev.Type != watch.Deleted {
						Expect(pvb.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), pvb.Status.Message)
						ended[pvb.Name] = true
					}
					peak = max(peak, len(running))
					waited = waited || ((pvb.Status.Phase == "" || pvb.Status.Phase == cairnv1.PodVolumePhaseNew) &&
						pvb.Status.Message == "waiting for a free copy slot on node cairn-node (2 copies at once)")
				}
			}
			fmt.Fprintf(GinkgoWriter, "At most %d copies ran at once\n", peak)
			Expect(peak).To(BeNumerically("<=", 2))
			Expect(waited).To(BeTrue(), "no copy waited for a slot: the limit was never reached")
			waitBackupPhase(ctx, ns, cairnv1.BackupPhaseCompleted)
		})
	})
}
