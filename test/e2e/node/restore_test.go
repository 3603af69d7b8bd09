//go:build e2enode

package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// restoreManifest is a Restore of backup into the operator's namespace, with namespaceMapping
// from to to when to is set.
func restoreManifest(name, backup, from, to string) string {
	m := fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Restore\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  backupName: %s\n", name, cairnNamespace, backup)
	if to != "" {
		m += fmt.Sprintf("  namespaceMapping:\n    %s: %s\n", from, to)
	}
	return m
}

// getRestore reads the restore name from c.
func getRestore(ctx context.Context, g Gomega, c client.Client, name string) cairnv1.Restore {
	var r cairnv1.Restore
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: cairnNamespace, Name: name}, &r)).To(Succeed())
	return r
}

// podVolumeRestores are the PodVolumeRestores in c of the restore whose UID is uid, by volume
// (the restores of the specs restore one pod).
func podVolumeRestores(ctx context.Context, g Gomega, c client.Client, uid types.UID) map[string]cairnv1.PodVolumeRestore {
	var list cairnv1.PodVolumeRestoreList
	g.Expect(c.List(ctx, &list, client.InNamespace(cairnNamespace), client.MatchingLabels{cairnv1.PodVolumeRestoreUIDLabel: string(uid)})).To(Succeed())
	byVolume := map[string]cairnv1.PodVolumeRestore{}
	for _, p := range list.Items {
		byVolume[p.Spec.Volume] = p
	}
	return byVolume
}

// waitRestoreEnded waits until the restore name in c is in a terminal phase, and returns it.
func waitRestoreEnded(ctx context.Context, c client.Client, name string) cairnv1.Restore {
	GinkgoHelper()
	var r cairnv1.Restore
	Eventually(func(g Gomega) cairnv1.RestorePhase {
		r = getRestore(ctx, g, c, name)
		return r.Status.Phase
	}).WithTimeout(180 * time.Second).WithPolling(500 * time.Millisecond).Should(BeElementOf(cairnv1.RestorePhaseCompleted,
		cairnv1.RestorePhasePartiallyFailed, cairnv1.RestorePhaseFailed, cairnv1.RestorePhaseFailedValidation))
	return r
}

// expectNoVolumeRestoreRunning checks that no PodVolumeRestore of the restore is left New or
// InProgress.
func expectNoVolumeRestoreRunning(ctx context.Context, c client.Client, uid types.UID) {
	GinkgoHelper()
	pvrs := podVolumeRestores(ctx, Default, c, uid)
	Expect(pvrs).NotTo(BeEmpty())
	for volume, p := range pvrs {
		Expect(p.Status.Phase.IsTerminal()).To(BeTrue(), "the restore of volume %s is %s", volume, p.Status.Phase)
	}
}

// treeDigest reports a volume's tree as voldata's Digest does (hack/image/voldata): every
// entry's path, type, permissions and content's SHA-256 or link target, in path order; so a
// tree written back on the node compares with what the app reported of the original.
func treeDigest(dir string) (voldataReport, error) {
	r := voldataReport{Dir: dir}
	tree := sha256.New()
	buf := make([]byte, 1<<20)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel == "lost+found" && d.IsDir() {
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var what string
		switch {
		case d.IsDir():
			r.Dirs++
			what = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			r.Symlinks++
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			what = "symlink " + target
		case d.Type().IsRegular():
			r.Files++
			r.Bytes += info.Size()
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.CopyBuffer(h, f, buf)
			_ = f.Close()
			if err != nil {
				return err
			}
			sum := hex.EncodeToString(h.Sum(nil))
			if rel == "large.bin" {
				r.LargeSHA256 = sum
			}
			what = "file " + sum
		default:
			return fmt.Errorf("%s: unexpected file type %v", path, d.Type())
		}
		_, err = fmt.Fprintf(tree, "%q %04o %s\n", rel, info.Mode().Perm(), what)
		return err
	})
	r.Digest = hex.EncodeToString(tree.Sum(nil))
	return r, err
}

// expectSameTree checks that what got is what the app reported of the original volume: the
// same counts and the same tree digest (every file's SHA-256, every mode, every link target).
func expectSameTree(volume string, got, want voldataReport) {
	GinkgoHelper()
	Expect(got.Files).To(Equal(want.Files), "volume %s: files", volume)
	Expect(got.Bytes).To(Equal(want.Bytes), "volume %s: bytes", volume)
	Expect(got.Dirs).To(Equal(want.Dirs), "volume %s: directories", volume)
	Expect(got.Symlinks).To(Equal(want.Symlinks), "volume %s: symlinks", volume)
	Expect(got.LargeSHA256).To(Equal(want.LargeSHA256), "volume %s: large.bin", volume)
	Expect(got.Digest).To(Equal(want.Digest), "volume %s: the tree's digest", volume)
}

// fixturePV is a PersistentVolume on a new, empty directory of the node, bound ahead to the
// claim data of namespace ns: the restored claim of a mapped namespace binds to it (the
// original's volume is still its claim's, and the node has no provisioner). Both go when the
// spec ends.
func fixturePV(ns string) string {
	GinkgoHelper()
	name, dir := "voldata-"+ns, filepath.Join(nodeDir, "volumes", ns)
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed()) // root's, as a new disk's root is: the restore gives it its owner
	DeferCleanup(func() {
		_, _, _ = kubectl("delete", "persistentvolume", name, "--ignore-not-found", "--wait", "--timeout=60s")
		Expect(os.RemoveAll(dir)).To(Succeed())
	})
	apply(fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata:
  name: %[1]s
spec:
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  claimRef:
    namespace: %[2]s
    name: data
  local:
    path: %[3]q
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions:
            - key: kubernetes.io/hostname
              operator: In
              values: [cairn-node]
`, name, ns, dir))
	return dir
}

// getPod reads pod voldata of namespace ns.
func getPod(ctx context.Context, g Gomega, ns string) corev1.Pod {
	var pod corev1.Pod
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "voldata"}, &pod)).To(Succeed())
	return pod
}

// containerStatus is the status of the container (or init container) name of pod.
func containerStatus(pod corev1.Pod, name string) (corev1.ContainerStatus, bool) {
	for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if s.Name == name {
			return s, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// expectRestoredApp waits until the restored app of namespace ns is Ready, and checks that it
// started on its data: its first init container is the restore helper, which exited 0 once
// every PodVolumeRestore had completed, before the app's container started; and the app found
// every volume already written (it writes a volume only when it is empty) and reports the
// same trees as the original.
func expectRestoredApp(ctx context.Context, ns string, pvrs map[string]cairnv1.PodVolumeRestore, original map[string]voldataReport) corev1.Pod {
	GinkgoHelper()
	kubectlOK("wait", "pod/voldata", "-n", ns, "--for=condition=Ready", "--timeout=120s")
	pod := getPod(ctx, Default, ns)
	Expect(pod.Spec.InitContainers).NotTo(BeEmpty())
	Expect(pod.Spec.InitContainers[0].Name).To(Equal(podvolume.RestoreHelperContainer))
	helper, ok := containerStatus(pod, podvolume.RestoreHelperContainer)
	Expect(ok).To(BeTrue())
	Expect(helper.State.Terminated).NotTo(BeNil())
	Expect(helper.State.Terminated.ExitCode).To(BeZero())
	Expect(helper.RestartCount).To(BeZero())
	app, ok := containerStatus(pod, "voldata")
	Expect(ok).To(BeTrue())
	Expect(app.State.Running).NotTo(BeNil())
	Expect(app.RestartCount).To(BeZero(), "the app started once")
	started := app.State.Running.StartedAt.Time
	Expect(started).NotTo(BeTemporally("<", helper.State.Terminated.FinishedAt.Time), "the app started after the restore helper exited")
	for volume, p := range pvrs {
		Expect(p.Status.CompletionTimestamp).NotTo(BeNil(), "volume %s", volume)
		Expect(started).NotTo(BeTemporally("<", p.Status.CompletionTimestamp.Time), "the app started after volume %s was restored", volume)
	}
	fmt.Fprintf(GinkgoWriter, "The restore helper exited 0 at %s; the app started at %s\n", helper.State.Terminated.FinishedAt.Format(time.RFC3339), started.Format(time.RFC3339))

	By("finding, in the restored app's report, every volume written before it started, and the same trees as the original's")
	reports := map[string]voldataReport{}
	for _, line := range strings.Split(strings.TrimSpace(kubectlOK("logs", "voldata", "-n", ns, "-c", "voldata")), "\n") {
		var r voldataReport
		Expect(json.Unmarshal([]byte(line), &r)).To(Succeed(), "the app's log line %q", line)
		reports[filepath.Base(r.Dir)] = r
	}
	Expect(reports).To(HaveLen(len(original)))
	for volume, want := range original {
		got := reports[volume]
		Expect(got.Written).To(BeFalse(), "volume %s was empty when the app started: it wrote the data itself", volume)
		expectSameTree(volume, got, want)
	}
	return pod
}

// expectAppNeverStarted checks that the restored app of namespace ns never started, and that
// its restore helper failed saying why (reason).
func expectAppNeverStarted(ctx context.Context, ns, reason string) {
	GinkgoHelper()
	var helper corev1.ContainerStatus
	Eventually(func(g Gomega) {
		pod := getPod(ctx, g, ns)
		var ok bool
		helper, ok = containerStatus(pod, podvolume.RestoreHelperContainer)
		g.Expect(ok).To(BeTrue())
		terminated := helper.State.Terminated
		if terminated == nil {
			terminated = helper.LastTerminationState.Terminated
		}
		g.Expect(terminated).NotTo(BeNil(), "the restore helper has exited")
		g.Expect(terminated.ExitCode).To(BeEquivalentTo(1))
		g.Expect(terminated.Message).To(ContainSubstring(reason))
	}).WithTimeout(30 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
	pod := getPod(ctx, Default, ns)
	app, ok := containerStatus(pod, "voldata")
	Expect(ok).To(BeTrue())
	Expect(app.State.Running).To(BeNil(), "the app is not running")
	Expect(app.State.Terminated).To(BeNil(), "the app never ran")
	Expect(app.LastTerminationState.Terminated).To(BeNil(), "the app never ran")
	Expect(app.RestartCount).To(BeZero())
	Expect(ptrTrue(app.Started)).To(BeFalse())
	fmt.Fprintf(GinkgoWriter, "The app never started; its restore helper: %s\n", firstNonEmpty(helper))
}

func ptrTrue(b *bool) bool { return b != nil && *b }

func firstNonEmpty(s corev1.ContainerStatus) string {
	for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
		if t != nil {
			return fmt.Sprintf("exit code %d: %s", t.ExitCode, t.Message)
		}
	}
	return "running"
}

// stallWhileRestoring waits for the restore's PodVolumeRestore of volume to be InProgress with
// bytes written, then stalls the S3 location, reads too, and waits until a read hangs: the
// restore can go no further. It fails if that volume's restore ended first. The specs stall
// the emptyDir's: its 10,000 small files take several seconds, the claim's 200 MiB a moment.
func stallWhileRestoring(ctx context.Context, proxy *testenv.StallingProxy, name, volume string) cairnv1.Restore {
	GinkgoHelper()
	var r cairnv1.Restore
	Eventually(func(g Gomega) {
		r = getRestore(ctx, g, k8s, name)
		p, ok := podVolumeRestores(ctx, g, k8s, r.UID)[volume]
		if ok && p.Status.Phase.IsTerminal() {
			StopTrying(fmt.Sprintf("the restore of volume %s ended %s before the storage could be stalled: %s", volume, p.Status.Phase, p.Status.Message)).Now()
		}
		g.Expect(ok).To(BeTrue(), "the restore has a PodVolumeRestore of volume %s", volume)
		g.Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseInProgress))
		g.Expect(p.Status.BytesDone).To(BeNumerically(">", 0))
	}).WithTimeout(120 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	held := proxy.Held()
	proxy.StallReads()
	Eventually(proxy.Held).WithTimeout(60*time.Second).Should(BeNumerically(">", held), "a read of the restore reaches the proxy and hangs")
	p := podVolumeRestores(ctx, Default, k8s, r.UID)[volume]
	Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseInProgress), "the restore of volume %s is still running: %s", volume, p.Status.Message)
	fmt.Fprintf(GinkgoWriter, "Stalled the restore of volume %s at %s\n", volume, p.Status.Progress)
	return r
}

// describeVolumeRestore adds the specs of restoring volume data (DESIGN.md section 16, issue
// 29) to the ordered container that installed Cairn: one app is backed up once into the S3
// location, whose server (*server) stands behind *proxy; each spec restores that backup into
// a namespace of its own.
func describeVolumeRestore(proxy **testenv.StallingProxy, server **testenv.S3Server) {
	Describe("restoring pod volume data", Ordered, func() {
		var (
			app    *voldataApp
			backup cairnv1.Backup
		)
		BeforeAll(func(ctx SpecContext) {
			app = deployVoldata("node-volrestore-" + rand.String(5))
			DeferCleanup(func() {
				_, _, _ = kubectl("delete", "backup", app.ns, "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
			})
			By("backing the app up into the S3 location: both volumes, opted in by the pod's annotation")
			started := time.Now()
			apply(volumeBackupManifest(app.ns, app.ns, s3Location, false))
			waitBackupPhase(ctx, app.ns, cairnv1.BackupPhaseCompleted)
			backup = getBackup(ctx, Default, app.ns)
			Expect(podVolumeBackups(ctx, Default, backup.UID)).To(HaveLen(2))
			fmt.Fprintf(GinkgoWriter, "The backup took %s\n", time.Since(started).Round(time.Millisecond))
		})

		// restoreInto restores the backup into namespace ns (mapped from the app's unless ns is
		// the app's). At the end of the spec, the namespace goes (a mapped one), then the
		// restore, before the volume of a fixturePV made earlier.
		restoreInto := func(ns string) string {
			GinkgoHelper()
			name := ns
			to := ns
			if ns == app.ns {
				to = ""
			}
			DeferCleanup(func() {
				if to != "" {
					_, _, _ = kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=180s")
				}
				_, _, _ = kubectl("delete", "restore", name, "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
			})
			apply(restoreManifest(name, app.ns, app.ns, to))
			return name
		}

		It("restores into a new namespace while the original runs: the pod starts once its data is back, every file's SHA-256, mode and link target the original's", func(ctx SpecContext) {
			ns := app.ns + "-mapped"
			dir := fixturePV(ns)
			started := time.Now()
			name := restoreInto(ns)
			waitRestoreCompleted(ctx, name)
			fmt.Fprintf(GinkgoWriter, "The restore took %s\n", time.Since(started).Round(time.Millisecond))
			r := getRestore(ctx, Default, k8s, name)
			pvrs := podVolumeRestores(ctx, Default, k8s, r.UID)
			Expect(pvrs).To(HaveLen(2))
			restored := getPod(ctx, Default, ns)
			var total int64
			for volume, p := range pvrs {
				Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), "volume %s: %s", volume, p.Status.Message)
				Expect(p.Spec.Node).To(Equal("cairn-node"))
				Expect(p.Spec.Pod).To(Equal(cairnv1.PodReference{Namespace: ns, Name: "voldata", UID: restored.UID}))
				Expect(p.Spec.SourcePod).NotTo(BeNil())
				Expect(p.Spec.SourcePod.Namespace).To(Equal(app.ns))
				Expect(p.Spec.Repository).To(Equal(cairnv1.RepositoryReference{StorageLocation: s3Location, Namespace: app.ns}))
				Expect(p.Status.BytesDone).To(Equal(app.reports[volume].Bytes), "volume %s", volume)
				Expect(p.Status.Files).To(Equal(app.reports[volume].Files), "volume %s", volume)
				total += p.Status.BytesDone
				fmt.Fprintf(GinkgoWriter, "Volume %s: %d bytes, %d files restored in %s\n", volume, p.Status.BytesDone, p.Status.Files,
					p.Status.CompletionTimestamp.Sub(p.Status.StartTimestamp.Time))
			}
			Expect(r.Status.Progress).NotTo(BeNil())
			Expect(r.Status.Progress.VolumeBytesDone).To(Equal(total))
			expectRestoredApp(ctx, ns, pvrs, app.reports)

			By("finding the files owned by the app's user on the node, and the original still running its own data")
			var st syscall.Stat_t
			for _, path := range []string{dir, filepath.Join(dir, "large.bin"), filepath.Join(dir, "modes", "private")} {
				Expect(syscall.Lstat(path, &st)).To(Succeed())
				Expect(st.Uid).To(BeEquivalentTo(65532), path)
				Expect(st.Gid).To(BeEquivalentTo(65532), path)
			}
			Expect(runningPods(ctx, Default, app.ns, "")).To(HaveLen(1))
			Expect(getPod(ctx, Default, app.ns).UID).To(Equal(app.pod.UID))
		})

		It("restores into a second cluster that shares only the storage, given the repository password as docs/volumes.md says", func(ctx SpecContext) {
			restoreIntoSecondCluster(ctx, *server, app, backup)
		})

		It("cancels a restore while its volumes are written: the app never starts, its helper fails saying why, the restore ends Failed, cancelled", func(ctx SpecContext) {
			ns := app.ns + "-cancel"
			fixturePV(ns)
			name := restoreInto(ns)
			DeferCleanup((*proxy).Unstall) // first: the clean-up needs the storage
			By("stalling the S3 location, reads too, while the emptyDir is written")
			r := stallWhileRestoring(ctx, *proxy, name, "scratch")

			By("cancelling the restore")
			cancelled := time.Now()
			kubectlOK("patch", "restore", name, "-n", cairnNamespace, "--type=merge", "-p", `{"spec":{"cancel":true}}`)
			Eventually(func(g Gomega) cairnv1.PodVolumePhase {
				return podVolumeRestores(ctx, g, k8s, r.UID)["scratch"].Status.Phase
			}).WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(Equal(cairnv1.PodVolumePhaseCancelled))
			fmt.Fprintf(GinkgoWriter, "The restore of the emptyDir was Cancelled %s after the cancel\n", time.Since(cancelled).Round(time.Millisecond))
			expectAppNeverStarted(ctx, ns, "was not restored: Cancelled")

			By("finding the restore Failed, cancelled, once the storage answers again, and no volume restore running")
			(*proxy).Unstall()
			ended := waitRestoreEnded(ctx, k8s, name)
			Expect(ended.Status.Phase).To(Equal(cairnv1.RestorePhaseFailed))
			Expect(ended.Status.FailureReason).To(Equal(cairnv1.FailureReasonRestoreCancelled))
			expectNoVolumeRestoreRunning(ctx, k8s, r.UID)
			expectAppNeverStarted(ctx, ns, "was not restored: Cancelled")
		})

		It("ends the restore its node agent was writing when the agent's pod is killed, and the app does not start on the part written", func(ctx SpecContext) {
			ns := app.ns + "-kill"
			fixturePV(ns)
			name := restoreInto(ns)
			DeferCleanup((*proxy).Unstall) // first: the clean-up needs the storage
			By("stalling the S3 location, reads too, while the emptyDir is written")
			r := stallWhileRestoring(ctx, *proxy, name, "scratch")

			killNodeAgent(ctx)
			(*proxy).Unstall()

			By("finding the emptyDir's restore ended by the agents (failed), the restore ended, and the app not started")
			Eventually(func(g Gomega) {
				scratch := podVolumeRestores(ctx, g, k8s, r.UID)["scratch"]
				g.Expect(scratch.Status.Phase).To(Equal(cairnv1.PodVolumePhaseFailed))
				g.Expect(scratch.Status.Message).To(ContainSubstring("node agent"))
				fmt.Fprintf(GinkgoWriter, "The restore of the emptyDir ended: %s\n", scratch.Status.Message)
			}).WithTimeout(60 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
			ended := waitRestoreEnded(ctx, k8s, name)
			fmt.Fprintf(GinkgoWriter, "The restore ended %s: %s\n", ended.Status.Phase, ended.Status.FailureReason)
			Expect(ended.Status.Phase).To(Equal(cairnv1.RestorePhasePartiallyFailed))
			expectNoVolumeRestoreRunning(ctx, k8s, r.UID)
			expectAppNeverStarted(ctx, ns, "was not restored: Failed")
		})

		It("restores the app after its namespace is deleted: the claim binds again to its Released volume, emptied, and the pod starts once its data is back", func(ctx SpecContext) {
			By("deleting the namespace, as a user who lost it, and the data of its volume, as a disk that was replaced")
			kubectlOK("delete", "namespace", app.ns, "--wait", "--timeout=180s")
			Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: app.ns}, &corev1.Namespace{}))).To(BeTrue())
			var pv corev1.PersistentVolume
			Eventually(func(g Gomega) corev1.PersistentVolumePhase {
				g.Expect(k8s.Get(ctx, client.ObjectKey{Name: app.pv}, &pv)).To(Succeed())
				return pv.Status.Phase
			}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Equal(corev1.VolumeReleased))
			entries, err := os.ReadDir(app.hostDir)
			Expect(err).NotTo(HaveOccurred())
			Expect(entries).NotTo(BeEmpty())
			for _, e := range entries {
				Expect(os.RemoveAll(filepath.Join(app.hostDir, e.Name()))).To(Succeed())
			}

			By("restoring it")
			started := time.Now()
			name := restoreInto(app.ns)
			waitRestoreCompleted(ctx, name)
			fmt.Fprintf(GinkgoWriter, "The restore took %s\n", time.Since(started).Round(time.Millisecond))
			r := getRestore(ctx, Default, k8s, name)
			pvrs := podVolumeRestores(ctx, Default, k8s, r.UID)
			Expect(pvrs).To(HaveLen(2))
			for volume, p := range pvrs {
				Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), "volume %s: %s", volume, p.Status.Message)
			}
			Expect(k8s.Get(ctx, client.ObjectKey{Name: app.pv}, &pv)).To(Succeed())
			Expect(pv.Spec.ClaimRef).NotTo(BeNil())
			Expect(pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name).To(Equal(app.ns + "/data"))
			Expect(pv.Status.Phase).To(Equal(corev1.VolumeBound))
			restored := expectRestoredApp(ctx, app.ns, pvrs, app.reports)
			Expect(restored.UID).NotTo(Equal(app.pod.UID))

			By("finding the claim's tree on the node the original's")
			got, err := treeDigest(app.hostDir)
			Expect(err).NotTo(HaveOccurred())
			expectSameTree("claim", got, app.reports["claim"])
		})
	})
}
