//go:build e2enode

package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// The volume-data app (hack/image/voldata) and what it writes.
var voldataImage = envOr("VOLDATA_IMAGE", "cairn-e2e-voldata:dev")

const (
	// voldataSeed seeds every byte the app writes: its marker and its large file are known.
	voldataSeed = 7
	// The claim gets the large file of random bytes, the emptyDir the small files.
	largeBytes = 200 << 20
	smallFiles = 10000
	// largeSHA256 is the SHA-256 of the 200 MiB large.bin of seed 7 in the volume named claim.
	largeSHA256 = "c4de7f2152e642ce1c043bc0479cddfa08ae655f166c5ac48fcaea3891602c3c"
	// voldataMarker is the distinctive string of seed 7 (voldata's Marker), in plain text in
	// every volume and in no object of the app.
	voldataMarker = "cairn-plaintext-marker-e97d3c3730d2211d99025b2c"
)

// The node agent's pods (the chart's labels for the release).
const nodeAgentSelector = "app.kubernetes.io/name=cairn,app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=node-agent"

// voldataReport is what the app reports of a volume (hack/image/voldata's Report).
type voldataReport struct {
	Dir         string  `json:"dir"`
	Files       int64   `json:"files"`
	Bytes       int64   `json:"bytes"`
	Dirs        int64   `json:"dirs"`
	Symlinks    int64   `json:"symlinks"`
	LargeSHA256 string  `json:"largeSHA256"`
	Digest      string  `json:"digest"`
	Written     bool    `json:"written"`
	Seconds     float64 `json:"seconds"`
}

// voldataApp is the app deployed in a namespace: its pod, the local PersistentVolume of its
// claim and that volume's directory on the node, and what it wrote, by volume name.
type voldataApp struct {
	ns, pv, hostDir string
	pod             corev1.Pod
	reports         map[string]voldataReport
}

// voldataManifests are the app in namespace ns: a claim bound to the local PersistentVolume pv
// on the node's directory hostDir (the node has no storage class), and a pod that fills the
// claim (volume "claim": a large file of large bytes) and an emptyDir (volume "scratch": small
// files), both opted in by annotation.
func voldataManifests(ns, pv, hostDir string, large, small int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
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
---
apiVersion: v1
kind: Pod
metadata:
  name: voldata
  namespace: %[1]s
  annotations:
    backup.cairn.dev/backup-volumes: claim,scratch
spec:
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsNonRoot: true
  containers:
    - name: voldata
      image: %[4]s
      imagePullPolicy: IfNotPresent
      args: ["-seed=%[5]d", "-volume=/data/claim:%[6]d:0", "-volume=/data/scratch:0:%[7]d", "-listen=:8080"]
      readinessProbe:
        httpGet:
          path: /ready
          port: 8080
        periodSeconds: 1
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: ["ALL"]
      volumeMounts:
        - name: claim
          mountPath: /data/claim
        - name: scratch
          mountPath: /data/scratch
  volumes:
    - name: claim
      persistentVolumeClaim:
        claimName: data
    - name: scratch
      emptyDir: {}
`, ns, pv, hostDir, voldataImage, voldataSeed, large, small)
}

// deployVoldata deploys the app in a new namespace ns, waits until it has written its volumes
// (a large file of largeBytes, smallFiles small files), and removes it all at the end of the
// current spec or container.
func deployVoldata(ns string) *voldataApp {
	GinkgoHelper()
	app := deployVoldataSized(ns, largeBytes, smallFiles)
	Expect(app.reports["claim"].LargeSHA256).To(Equal(largeSHA256))
	return app
}

// deployVoldataSized is deployVoldata with a large file of large bytes and small small files.
func deployVoldataSized(ns string, large, small int) *voldataApp {
	GinkgoHelper()
	app := &voldataApp{ns: ns, pv: "voldata-" + ns, hostDir: filepath.Join(nodeDir, "volumes", ns)}
	Expect(os.MkdirAll(app.hostDir, 0o750)).To(Succeed())
	Expect(os.Chown(app.hostDir, 65532, 65532)).To(Succeed()) // the app's user
	DeferCleanup(func() {
		_, _, _ = kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=180s")
		_, _, _ = kubectl("delete", "persistentvolume", app.pv, "--ignore-not-found", "--wait", "--timeout=60s")
		Expect(os.RemoveAll(app.hostDir)).To(Succeed())
	})
	apply(voldataManifests(ns, app.pv, app.hostDir, large, small))
	kubectlOK("wait", "pod/voldata", "-n", ns, "--for=condition=Ready", "--timeout=180s")
	Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "voldata"}, &app.pod)).To(Succeed())

	app.reports = map[string]voldataReport{}
	for _, line := range strings.Split(strings.TrimSpace(kubectlOK("logs", "voldata", "-n", ns)), "\n") {
		var r voldataReport
		Expect(json.Unmarshal([]byte(line), &r)).To(Succeed(), "the app's log line %q", line)
		Expect(r.Written).To(BeTrue())
		app.reports[filepath.Base(r.Dir)] = r
		fmt.Fprintf(GinkgoWriter, "The app wrote %s: %d files, %d bytes in %.1fs\n", r.Dir, r.Files, r.Bytes, r.Seconds)
	}
	Expect(app.reports).To(HaveKey("claim"))
	Expect(app.reports).To(HaveKey("scratch"))
	Expect(app.reports["claim"].Bytes).To(BeNumerically(">", large))
	Expect(app.reports["scratch"].Files).To(BeNumerically(">", small))
	Expect(app.reports["scratch"].Symlinks).To(BeEquivalentTo(1))
	return app
}

// volumeBackupManifest is a Backup of namespace ns into location ("": the default), with
// spec.defaultVolumesToFsBackup when all is set.
func volumeBackupManifest(name, ns, location string, all bool) string {
	m := backupManifest(name, ns, location)
	if all {
		m += "  defaultVolumesToFsBackup: true\n"
	}
	return m
}

// getBackup reads the backup name.
func getBackup(ctx context.Context, g Gomega, name string) cairnv1.Backup {
	var b cairnv1.Backup
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cairnNamespace, Name: name}, &b)).To(Succeed())
	return b
}

// podVolumeBackups are the PodVolumeBackups of the backup whose UID is uid, by volume name.
func podVolumeBackups(ctx context.Context, g Gomega, uid types.UID) map[string]cairnv1.PodVolumeBackup {
	var list cairnv1.PodVolumeBackupList
	g.Expect(k8s.List(ctx, &list, client.InNamespace(cairnNamespace), client.MatchingLabels{cairnv1.PodVolumeBackupUIDLabel: string(uid)})).To(Succeed())
	byVolume := map[string]cairnv1.PodVolumeBackup{}
	for _, p := range list.Items {
		byVolume[p.Spec.Volume] = p
	}
	return byVolume
}

// waitBackupEnded waits until the backup is in a terminal phase, and returns it.
func waitBackupEnded(ctx context.Context, name string) cairnv1.Backup {
	GinkgoHelper()
	var b cairnv1.Backup
	Eventually(func(g Gomega) cairnv1.BackupPhase {
		b = getBackup(ctx, g, name)
		return b.Status.Phase
	}).WithTimeout(180 * time.Second).WithPolling(time.Second).Should(BeElementOf(cairnv1.BackupPhaseCompleted,
		cairnv1.BackupPhasePartiallyFailed, cairnv1.BackupPhaseFailed, cairnv1.BackupPhaseFailedValidation))
	return b
}

// expectNoCopyRunning checks that no PodVolumeBackup of the backup is left New or InProgress.
func expectNoCopyRunning(ctx context.Context, uid types.UID) {
	GinkgoHelper()
	for volume, p := range podVolumeBackups(ctx, Default, uid) {
		Expect(p.Status.Phase.IsTerminal()).To(BeTrue(), "the copy of volume %s is %s", volume, p.Status.Phase)
	}
}

// stallWhileCopying waits for the backup's copy of the claim to be InProgress with bytes read
// (and, with waiting, for the backup to wait on its copies), then stalls the S3 location's
// writes and waits until one hangs: the copy can go no further. It fails if the copy ended
// first (the claim's 200 MiB take seconds; the agent reports bytes every second).
func stallWhileCopying(ctx context.Context, proxy *testenv.StallingProxy, name string, waiting bool) cairnv1.Backup {
	GinkgoHelper()
	var b cairnv1.Backup
	Eventually(func(g Gomega) {
		b = getBackup(ctx, g, name)
		claim, ok := podVolumeBackups(ctx, g, b.UID)["claim"]
		if ok && claim.Status.Phase.IsTerminal() {
			StopTrying(fmt.Sprintf("the copy of the claim ended %s before the storage could be stalled: %s", claim.Status.Phase, claim.Status.Message)).Now()
		}
		g.Expect(ok).To(BeTrue(), "the backup has a copy of the claim")
		g.Expect(claim.Status.Phase).To(Equal(cairnv1.PodVolumePhaseInProgress))
		g.Expect(claim.Status.BytesDone).To(BeNumerically(">", 0))
		if waiting {
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseWaitingForPluginOperations))
		}
	}).WithTimeout(120 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	held := proxy.Held()
	proxy.Stall()
	Eventually(proxy.Held).WithTimeout(60*time.Second).Should(BeNumerically(">", held), "a write of the copy reaches the proxy and hangs")
	claim := podVolumeBackups(ctx, Default, b.UID)["claim"]
	Expect(claim.Status.Phase).To(Equal(cairnv1.PodVolumePhaseInProgress), "the copy of the claim is still running: %s", claim.Status.Message)
	fmt.Fprintf(GinkgoWriter, "Stalled the copy of the claim at %s\n", claim.Status.Progress)
	return b
}

// dirSize is the sum of the sizes of the regular files under dir.
func dirSize(dir string) int64 {
	GinkgoHelper()
	var total int64
	Expect(filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})).To(Succeed())
	return total
}

// filesContaining are the regular files under dir that contain s.
func filesContaining(dir, s string) []string {
	GinkgoHelper()
	var found []string
	Expect(filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte(s)) || strings.Contains(path, s) {
			found = append(found, path)
		}
		return nil
	})).To(Succeed())
	return found
}

// describeVolumeData adds the specs of volume data (DESIGN.md section 16) to the ordered
// container that installed Cairn: storageDir is the filesystem location's directory on the
// node, and proxy stands before the S3 location's server.
func describeVolumeData(storageDir *string, proxy **testenv.StallingProxy) {
	Describe("copying pod volume data", func() {
		// A failed spec shows the logs of the backups in the filesystem location (their errors
		// are there), before the clean-up removes them.
		AfterEach(func() {
			if !CurrentSpecReport().Failed() {
				return
			}
			logs, _ := filepath.Glob(filepath.Join(*storageDir, "backups", cairnNamespace, "*", "*-logs.gz"))
			for _, file := range logs {
				out, _ := exec.Command("zcat", file).CombinedOutput()
				fmt.Fprintf(GinkgoWriter, "%s:\n%s\n", file, out)
			}
		})

		It("runs one node agent, Ready, as root with no capability but CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER", func(ctx SpecContext) {
			var agent corev1.Pod
			Eventually(func(g Gomega) {
				pods := runningPods(ctx, g, cairnNamespace, nodeAgentSelector)
				g.Expect(pods).To(HaveLen(1))
				agent = pods[0]
			}).WithTimeout(120 * time.Second).WithPolling(time.Second).Should(Succeed())
			Expect(agent.Spec.NodeName).To(Equal("cairn-node"))
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", containerPID(agent.Status.ContainerStatuses[0].ContainerID)))
			Expect(err).NotTo(HaveOccurred())
			Expect(string(status)).To(MatchRegexp(`(?m)^Uid:\s+0\s+0\s+0\s+0$`))
			// CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER are capabilities 0, 1 and 3.
			for _, set := range []string{"CapEff", "CapPrm", "CapBnd"} {
				Expect(string(status)).To(MatchRegexp(`(?m)^%s:\s+000000000000000b$`, set))
			}
			Expect(string(status)).To(MatchRegexp(`(?m)^CapAmb:\s+0000000000000000$`))
		})

		Describe("backups of a pod's claim on a local volume and its emptyDir", func() {
			var (
				app              *voldataApp
				first, second    cairnv1.Backup
				firstCopies      map[string]cairnv1.PodVolumeBackup
				repositoryDir    string
				repositoryPeakSz int64
			)
			BeforeAll(func() {
				app = deployVoldata("node-volumes-" + rand.String(5))
				repositoryDir = filepath.Join(*storageDir, "kopia", app.ns)
				DeferCleanup(func() {
					_, _, _ = kubectl("delete", "backups", "-n", cairnNamespace, app.ns+"-first", app.ns+"-second", "--ignore-not-found", "--wait", "--timeout=120s")
				})
			})

			It("copies both volumes: each PodVolumeBackup Completed with the bytes and files written, the backup Completed with its volume bytes", func(ctx SpecContext) {
				started := time.Now()
				apply(volumeBackupManifest(app.ns+"-first", app.ns, "", false))
				waitBackupPhase(ctx, app.ns+"-first", cairnv1.BackupPhaseCompleted)
				fmt.Fprintf(GinkgoWriter, "The first backup took %s\n", time.Since(started).Round(time.Millisecond))
				first = getBackup(ctx, Default, app.ns+"-first")
				firstCopies = podVolumeBackups(ctx, Default, first.UID)
				Expect(firstCopies).To(HaveLen(2))
				var total int64
				for volume, p := range firstCopies {
					written := app.reports[volume]
					Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), "volume %s: %s", volume, p.Status.Message)
					Expect(p.Spec.Node).To(Equal("cairn-node"))
					Expect(p.Spec.Pod.UID).To(Equal(app.pod.UID))
					Expect(p.Spec.Repository).To(Equal(cairnv1.RepositoryReference{StorageLocation: "default", Namespace: app.ns}))
					Expect(p.Status.BytesTotal).To(Equal(written.Bytes), "volume %s", volume)
					Expect(p.Status.BytesDone).To(Equal(written.Bytes), "volume %s", volume)
					Expect(p.Status.Files).To(Equal(written.Files), "volume %s", volume)
					Expect(p.Status.SnapshotID).NotTo(BeEmpty())
					Expect(p.Status.ParentSnapshotID).To(BeEmpty())
					// Random bytes do not compress: about as much is uploaded as was read.
					Expect(p.Status.UploadedBytes).To(BeNumerically(">=", written.Bytes*9/10), "volume %s", volume)
					fmt.Fprintf(GinkgoWriter, "Volume %s: %d bytes, %d files, %d uploaded, in %s\n", volume, p.Status.BytesTotal, p.Status.Files,
						p.Status.UploadedBytes, p.Status.CompletionTimestamp.Sub(p.Status.StartTimestamp.Time))
					total += written.Bytes
				}
				Expect(firstCopies["claim"].Spec.PersistentVolumeClaim).To(Equal("data"))
				Expect(first.Status.Progress).NotTo(BeNil())
				Expect(first.Status.Progress.VolumeBytesTotal).To(Equal(total))
				Expect(first.Status.Progress.VolumeBytesDone).To(Equal(total))

				By("listing the copies with kubectl, as a user would")
				out := kubectlOK("get", "podvolumebackups", "-n", cairnNamespace, "-l", cairnv1.PodVolumeBackupUIDLabel+"="+string(first.UID))
				Expect(strings.Count(out, "Completed")).To(Equal(2), out)
				Expect(out).To(ContainSubstring("claim"))
				Expect(out).To(ContainSubstring("scratch"))
			})

			It("writes the data encrypted: the marker the app wrote in plain text is nowhere in the storage location", func() {
				Expect(repositoryDir).To(BeADirectory())
				Expect(dirSize(repositoryDir)).To(BeNumerically(">", int64(largeBytes)))
				Expect(filesContaining(app.hostDir, voldataMarker)).NotTo(BeEmpty(), "the marker is in plain text in the claim's own directory")
				Expect(filesContaining(*storageDir, voldataMarker)).To(BeEmpty())
			})

			It("uploads almost nothing for an unchanged pod: the second backup's copies have the first's as parents", func(ctx SpecContext) {
				started := time.Now()
				apply(volumeBackupManifest(app.ns+"-second", app.ns, "", false))
				waitBackupPhase(ctx, app.ns+"-second", cairnv1.BackupPhaseCompleted)
				fmt.Fprintf(GinkgoWriter, "The second backup took %s\n", time.Since(started).Round(time.Millisecond))
				second = getBackup(ctx, Default, app.ns+"-second")
				copies := podVolumeBackups(ctx, Default, second.UID)
				Expect(copies).To(HaveLen(2))
				for volume, p := range copies {
					Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), "volume %s: %s", volume, p.Status.Message)
					Expect(p.Status.BytesTotal).To(Equal(firstCopies[volume].Status.BytesTotal), "volume %s", volume)
					Expect(p.Status.UploadedBytes).To(BeNumerically("<", firstCopies[volume].Status.BytesTotal/100), "volume %s", volume)
					Expect(p.Status.ParentSnapshotID).To(Equal(firstCopies[volume].Status.SnapshotID), "volume %s", volume)
					Expect(p.Status.SnapshotID).NotTo(Equal(firstCopies[volume].Status.SnapshotID))
					fmt.Fprintf(GinkgoWriter, "Volume %s again: %d uploaded, in %s\n", volume, p.Status.UploadedBytes,
						p.Status.CompletionTimestamp.Sub(p.Status.StartTimestamp.Time))
				}
				repositoryPeakSz = dirSize(repositoryDir)
			})

			It("gives the repository's space back once both backups are deleted and maintenance ran", func(ctx SpecContext) {
				Expect(repositoryPeakSz).To(BeNumerically(">", int64(largeBytes)))
				started := time.Now()
				kubectlOK("delete", "backups", "-n", cairnNamespace, first.Name, second.Name, "--wait", "--timeout=120s")
				Eventually(func() int64 { return dirSize(repositoryDir) }).WithTimeout(120*time.Second).WithPolling(2*time.Second).
					Should(BeNumerically("<", repositoryPeakSz/10), "the repository of %d bytes at its peak", repositoryPeakSz)
				fmt.Fprintf(GinkgoWriter, "The repository went from %d to %d bytes in %s\n", repositoryPeakSz, dirSize(repositoryDir), time.Since(started).Round(time.Millisecond))
			})
		})

		It("cancels a backup while its volumes are copied: the copy stops within 2 s, Cancelled, and the backup ends Failed", func(ctx SpecContext) {
			app := deployVoldata("node-volcancel-" + rand.String(5))
			name := app.ns
			DeferCleanup(func() {
				(*proxy).Unstall()
				_, _, _ = kubectl("delete", "backup", name, "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
			})
			apply(volumeBackupManifest(name, app.ns, s3Location, true))
			By("stalling the S3 location's writes once the backup waits on its copies, the claim's copy running")
			b := stallWhileCopying(ctx, *proxy, name, true)

			By("cancelling the backup")
			cancelled := time.Now()
			kubectlOK("patch", "backup", name, "-n", cairnNamespace, "--type=merge", "-p", `{"spec":{"cancel":true}}`)
			Eventually(func(g Gomega) cairnv1.PodVolumePhase {
				return podVolumeBackups(ctx, g, b.UID)["claim"].Status.Phase
			}).WithTimeout(2 * time.Second).WithPolling(50 * time.Millisecond).Should(Equal(cairnv1.PodVolumePhaseCancelled))
			fmt.Fprintf(GinkgoWriter, "The copy of the claim was Cancelled %s after the cancel\n", time.Since(cancelled).Round(time.Millisecond))

			By("finding the backup Failed, cancelled, once the storage answers again, and no copy running")
			(*proxy).Unstall()
			waitBackupPhase(ctx, name, cairnv1.BackupPhaseFailed)
			Expect(getBackup(ctx, Default, name).Status.FailureReason).To(Equal(cairnv1.FailureReasonCancelled))
			expectNoCopyRunning(ctx, b.UID)
		})

		It("ends the copy its node agent was running when the agent's pod is killed, and the backup ends", func(ctx SpecContext) {
			app := deployVoldata("node-volkill-" + rand.String(5))
			name := app.ns
			DeferCleanup(func() {
				(*proxy).Unstall()
				_, _, _ = kubectl("delete", "backup", name, "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
			})
			apply(volumeBackupManifest(name, app.ns, s3Location, true))
			By("stalling the S3 location's writes while the claim is copied")
			b := stallWhileCopying(ctx, *proxy, name, false)

			killNodeAgent(ctx)
			(*proxy).Unstall()

			By("finding the copy ended by the new agent (failed) or completed, and the backup ended")
			Eventually(func(g Gomega) {
				claim := podVolumeBackups(ctx, g, b.UID)["claim"]
				g.Expect(claim.Status.Phase).To(BeElementOf(cairnv1.PodVolumePhaseFailed, cairnv1.PodVolumePhaseCompleted))
				if claim.Status.Phase == cairnv1.PodVolumePhaseFailed {
					g.Expect(claim.Status.Message).To(ContainSubstring("node agent"))
				}
			}).WithTimeout(60 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
			ended := waitBackupEnded(ctx, name)
			fmt.Fprintf(GinkgoWriter, "The backup ended %s: %s\n", ended.Status.Phase, ended.Status.FailureReason)
			expectNoCopyRunning(ctx, b.UID)
			Expect(slices.Contains([]cairnv1.BackupPhase{cairnv1.BackupPhasePartiallyFailed, cairnv1.BackupPhaseFailed, cairnv1.BackupPhaseCompleted}, ended.Status.Phase)).To(BeTrue())
		})
	})
}

// killNodeAgent force-deletes the node agent's pod and waits for its DaemonSet's new one to run.
func killNodeAgent(ctx context.Context) {
	GinkgoHelper()
	By("killing the node agent's pod")
	agents := runningPods(ctx, Default, cairnNamespace, nodeAgentSelector)
	Expect(agents).To(HaveLen(1))
	kubectlOK("delete", "pod", agents[0].Name, "-n", cairnNamespace, "--grace-period=0", "--force")
	Eventually(func(g Gomega) {
		pods := runningPods(ctx, g, cairnNamespace, nodeAgentSelector)
		g.Expect(pods).To(HaveLen(1))
		g.Expect(pods[0].Name).NotTo(Equal(agents[0].Name))
	}).WithTimeout(120 * time.Second).WithPolling(time.Second).Should(Succeed())
}
