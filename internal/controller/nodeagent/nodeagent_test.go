package nodeagent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/blobproxy"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/controller/nodeagent"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/repository"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

const (
	nodeA          = "node-a"
	passwordSecret = "pv-passwords"
	agentAccount   = "agent"
	marker         = "cairn-volume-marker-7f3a9c"
)

// stallingRepository is a copy that never ends by itself: it reports some bytes and waits for
// its context, as a copy slowed down by its storage does.
type stallingRepository struct{}

func (stallingRepository) Snapshot(ctx context.Context, _ string, _ map[string]string, progress func(repository.Progress)) (repository.Result, error) {
	progress(repository.Progress{HashedBytes: 1 << 20})
	<-ctx.Done()
	return repository.Result{}, ctx.Err()
}

func (stallingRepository) Restore(ctx context.Context, _, _ string, opt repository.RestoreOptions) (repository.RestoreResult, error) {
	opt.Progress(1<<20, 2<<20)
	<-ctx.Done()
	return repository.RestoreResult{}, ctx.Err()
}

func (stallingRepository) Close() error { return nil }

var _ = Describe("Volume data", Ordered, func() {
	var (
		store     *storage.Filesystem
		bsl       *cairnv1.BackupStorageLocation
		locDir    string
		podsDir   string
		serverURL string
		stall     atomic.Bool
		stopAgent func()
		clientset *kubernetes.Clientset
		// keepDir lasts as long as the container: tokens and agents' config directories.
		keepDir string
	)

	// tokenFor writes a token of ServiceAccount name in the operator's namespace, for the
	// repository server's audience, to a file.
	tokenFor := func(name string) string {
		GinkgoHelper()
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: OperatorNamespace}}
		Expect(client.IgnoreAlreadyExists(K8sClient.Create(SuiteCtx, sa))).To(Succeed())
		tr, err := clientset.CoreV1().ServiceAccounts(OperatorNamespace).CreateToken(SuiteCtx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{blobproxy.Audience}, ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		// In the container's directory: an agent started in one spec outlives it.
		file := filepath.Join(keepDir, name+"-token")
		Expect(os.WriteFile(file, []byte(tr.Status.Token), 0o600)).To(Succeed())
		return file
	}

	// startAgent runs a node agent of node with its own cache, as cmd/manager's node-agent
	// command does; the returned func stops it.
	startAgent := func(node, tokenFile string) func() {
		GinkgoHelper()
		mine := labels.SelectorFromSet(labels.Set{cairnv1.PodVolumeNodeLabel: node})
		mgr, err := ctrl.NewManager(RestCfg, ctrl.Options{
			Scheme: testenv.Scheme(),
			Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
				&cairnv1.PodVolumeBackup{}:  {Namespaces: map[string]cache.Config{OperatorNamespace: {}}, Label: mine},
				&cairnv1.PodVolumeRestore{}: {Namespaces: map[string]cache.Config{OperatorNamespace: {}}, Label: mine},
			}},
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		})
		Expect(err).NotTo(HaveOccurred())
		configDir, err := os.MkdirTemp(keepDir, "config-")
		Expect(err).NotTo(HaveOccurred())
		proxied := nodeagent.ProxyRepositories(serverURL, "", tokenFile, configDir)
		agent := &nodeagent.Agent{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: OperatorNamespace, Node: node, PodsDir: podsDir,
			Passwords:        &podvolume.Passwords{Reader: mgr.GetAPIReader(), Namespace: OperatorNamespace, Secret: passwordSecret},
			ProgressInterval: 100 * time.Millisecond,
			Open: func(ctx context.Context, ref cairnv1.RepositoryReference, password string, readOnly bool) (nodeagent.Repository, error) {
				if stall.Load() {
					return stallingRepository{}, nil
				}
				return proxied(ctx, ref, password, readOnly)
			},
		}
		Expect(agent.SetupWithManager(mgr)).To(Succeed())
		ctx, cancel := context.WithCancel(SuiteCtx)
		done := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			Expect(mgr.Start(ctx)).To(Succeed())
		}()
		return func() { cancel(); <-done }
	}

	BeforeAll(func() {
		var err error
		clientset, err = kubernetes.NewForConfig(RestCfg)
		Expect(err).NotTo(HaveOccurred())
		keepDir = GinkgoT().TempDir()
		store, bsl = CreateDefaultLocation("pv")
		locDir = bsl.Spec.Config["path"]
		podsDir = GinkgoT().TempDir()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		addr := l.Addr().String()
		Expect(l.Close()).To(Succeed())
		serverURL = "http://" + addr
		stop := StartManager(controller.Config{
			ItemOperationSyncFrequency: 200 * time.Millisecond,
			VolumeData: controller.VolumeDataConfig{PasswordSecret: passwordSecret, ServerBindAddress: addr,
				NodeAgentServiceAccount: agentAccount, MaintenanceInterval: 3 * time.Second, RestoreHelperImage: "cairn-manager:test"},
		})
		DeferCleanup(stop)
		DeferCleanup(DeleteAllBackups)
		EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")
		stopAgent = startAgent(nodeA, tokenFor(agentAccount))
		DeferCleanup(func() { stopAgent() })
	})
	AfterEach(func() {
		stall.Store(false)
		if CurrentSpecReport().Failed() {
			var list cairnv1.PodVolumeBackupList
			_ = K8sClient.List(SuiteCtx, &list, client.InNamespace(OperatorNamespace))
			for _, p := range list.Items {
				GinkgoWriter.Printf("PodVolumeBackup %s: %s/%s %s: %s: %s\n", p.Name, p.Spec.Pod.Namespace, p.Spec.Pod.Name, p.Spec.Volume, p.Status.Phase, p.Status.Message)
			}
		}
	})

	// volumeDir fills a volume's directory on the "node" with size random bytes, a few small
	// files, a symlink, an empty directory and the marker, and returns how many bytes of file
	// content it holds.
	fillVolume := func(dir string, size int) int64 {
		GinkgoHelper()
		Expect(os.MkdirAll(filepath.Join(dir, "empty"), 0o755)).To(Succeed())
		data := make([]byte, size)
		_, _ = rand.Read(data)
		Expect(os.WriteFile(filepath.Join(dir, "random.bin"), data, 0o640)).To(Succeed())
		for i, mode := range []os.FileMode{0o600, 0o644, 0o755} {
			Expect(os.WriteFile(filepath.Join(dir, "small-"+string(rune('a'+i))), []byte("small file\n"), mode)).To(Succeed())
		}
		Expect(os.WriteFile(filepath.Join(dir, "marker.txt"), []byte(marker), 0o600)).To(Succeed())
		Expect(os.Symlink("random.bin", filepath.Join(dir, "link"))).To(Succeed())
		return int64(size) + 3*int64(len("small file\n")) + int64(len(marker))
	}

	// runningPod creates a Running pod on node whose annotation opts in volumes, with an
	// emptyDir "data", a claim volume "db" when claim is set, and a configMap volume "settings".
	runningPod := func(namespace, name, node, optIn, claim string, running bool) *corev1.Pod {
		GinkgoHelper()
		EnsureNamespace(namespace)
		volumes := []corev1.Volume{
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}},
		}
		if claim != "" {
			volumes = append(volumes, corev1.Volume{Name: "db", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: map[string]string{"backup.cairn.dev/backup-volumes": optIn}},
			Spec: corev1.PodSpec{NodeName: node, Volumes: volumes, Containers: []corev1.Container{{Name: "app", Image: "app:1",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}},
		}
		Expect(K8sClient.Create(SuiteCtx, pod)).To(Succeed())
		if running {
			pod.Status.Phase = corev1.PodRunning
			Expect(K8sClient.Status().Update(SuiteCtx, pod)).To(Succeed())
		}
		return pod
	}

	// localClaim creates a claim bound (by name: no controller binds in this cluster) to a
	// local PersistentVolume, and returns the volume's name.
	localClaim := func(namespace, name string) string {
		GinkgoHelper()
		EnsureNamespace(namespace)
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "pv-local-"},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/" + name}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeA}}},
				}}}},
			},
		}
		Expect(K8sClient.Create(SuiteCtx, pv)).To(Succeed())
		DeferCleanup(func() { _ = K8sClient.Delete(SuiteCtx, pv) })
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: pv.Name,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		Expect(K8sClient.Create(SuiteCtx, pvc)).To(Succeed())
		return pv.Name
	}

	emptyDir := func(pod *corev1.Pod, volume string) string {
		return filepath.Join(podsDir, string(pod.UID), "volumes", "kubernetes.io~empty-dir", volume)
	}
	localVolume := func(pod *corev1.Pod, pv string) string {
		return filepath.Join(podsDir, string(pod.UID), "volumes", "kubernetes.io~local-volume", pv)
	}

	podVolumeBackups := func(b *cairnv1.Backup) []cairnv1.PodVolumeBackup {
		GinkgoHelper()
		var list cairnv1.PodVolumeBackupList
		Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(OperatorNamespace),
			client.MatchingLabels{cairnv1.PodVolumeBackupUIDLabel: string(b.UID)})).To(Succeed())
		return list.Items
	}

	byVolume := func(pvbs []cairnv1.PodVolumeBackup) map[string]cairnv1.PodVolumeBackup {
		out := map[string]cairnv1.PodVolumeBackup{}
		for _, p := range pvbs {
			out[p.Spec.Volume] = p
		}
		return out
	}

	// repositorySnapshots lists the snapshots of the repository of namespace in the location,
	// opened as the manager does.
	repositorySnapshots := func(namespace string) []string {
		GinkgoHelper()
		ref := cairnv1.RepositoryReference{StorageLocation: bsl.Name, Namespace: namespace}
		st, _, err := location.KopiaStorage(SuiteCtx, K8sClient, bsl, namespace)
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = st.Close(SuiteCtx) }()
		pw, err := (&podvolume.Passwords{Reader: K8sClient, Namespace: OperatorNamespace, Secret: passwordSecret}).Get(SuiteCtx, ref)
		Expect(err).NotTo(HaveOccurred())
		r, err := repository.Open(SuiteCtx, repository.Options{Storage: st, Password: pw, Hostname: "cairn", Username: "test", ConfigDir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = r.Close() }()
		ids, err := r.Snapshots(SuiteCtx, nil)
		Expect(err).NotTo(HaveOccurred())
		return ids
	}

	dirSize := func(dir string) int64 {
		GinkgoHelper()
		var total int64
		Expect(filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if os.IsNotExist(err) && path == dir {
				return nil
			}
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

	var first *cairnv1.Backup
	var firstCopies map[string]cairnv1.PodVolumeBackup
	var dataBytes, dbBytes, peak int64

	It("copies a running pod's opted-in emptyDir and claim volumes, encrypted, and names the volumes it skips", func() {
		pv := localClaim("pv-copy", "db-claim")
		pod := runningPod("pv-copy", "app", nodeA, "data,db,settings,typo", "db-claim", true)
		dataBytes = fillVolume(emptyDir(pod, "data"), 3<<20)
		dbBytes = fillVolume(localVolume(pod, pv), 1<<20)

		CreateBackup(OperatorNamespace, "pv-b1", cairnv1.BackupSpec{IncludedNamespaces: []string{"pv-copy"}})
		first = WaitPhase("pv-b1", cairnv1.BackupPhaseCompleted)
		firstCopies = byVolume(podVolumeBackups(first))
		Expect(firstCopies).To(HaveLen(2))
		for volume, want := range map[string]int64{"data": dataBytes, "db": dbBytes} {
			p := firstCopies[volume]
			Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), "%s: %s", volume, p.Status.Message)
			Expect(p.Status.BytesTotal).To(Equal(want), volume)
			Expect(p.Status.BytesDone).To(Equal(want), volume)
			Expect(p.Status.SnapshotID).NotTo(BeEmpty())
			Expect(p.Status.ParentSnapshotID).To(BeEmpty())
			Expect(p.Spec.Node).To(Equal(nodeA))
			Expect(p.Spec.Pod.UID).To(Equal(pod.UID))
			Expect(p.Spec.Repository).To(Equal(cairnv1.RepositoryReference{StorageLocation: "pv", Namespace: "pv-copy"}))
		}
		Expect(firstCopies["db"].Spec.PersistentVolumeClaim).To(Equal("db-claim"))

		By("the backup counts the copies and their bytes")
		Expect(first.Status.BackupItemOperationsAttempted).To(BeEquivalentTo(2))
		Expect(first.Status.BackupItemOperationsCompleted).To(BeEquivalentTo(2))
		Expect(first.Status.Progress.VolumeBytesDone).To(Equal(dataBytes + dbBytes))
		Expect(first.Status.Progress.Summary).To(ContainSubstring("volumes"))

		By("its operations file in storage records the snapshots, for a second cluster")
		keys := storage.Layout{}.Backup(OperatorNamespace, "pv-b1")
		ops, err := backup.ReadOperations(SuiteCtx, store, keys.ItemOperations)
		Expect(err).NotTo(HaveOccurred())
		snaps, err := podvolume.Snapshots(ops)
		Expect(err).NotTo(HaveOccurred())
		var ids []string
		for _, s := range snaps {
			ids = append(ids, s.SnapshotID)
		}
		Expect(ids).To(ConsistOf(firstCopies["data"].Status.SnapshotID, firstCopies["db"].Status.SnapshotID))
		Expect(repositorySnapshots("pv-copy")).To(ContainElements(ids))

		By("the log names the volumes not copied")
		log := ReadLog(store, keys)
		Expect(log).To(ContainSubstring("volume settings is not copied"))
		Expect(log).To(ContainSubstring(`the pod has no volume named \"typo\"`))

		By("nothing under the location holds the data in plain text")
		Expect(filepath.WalkDir(locDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			Expect(bytes.Contains(b, []byte(marker))).To(BeFalse(), "%s holds the marker in plain text", path)
			return nil
		})).To(Succeed())
		peak = dirSize(filepath.Join(locDir, "kopia", "pv-copy"))
	})

	It("uploads almost nothing for unchanged volumes: each copy's parent is the previous one", func() {
		CreateBackup(OperatorNamespace, "pv-b2", cairnv1.BackupSpec{IncludedNamespaces: []string{"pv-copy"}})
		b := WaitPhase("pv-b2", cairnv1.BackupPhaseCompleted)
		for volume, p := range byVolume(podVolumeBackups(b)) {
			Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted))
			Expect(p.Status.ParentSnapshotID).To(Equal(firstCopies[volume].Status.SnapshotID), volume)
			Expect(p.Status.UploadedBytes).To(BeNumerically("<", p.Status.BytesTotal/20), volume)
		}
		peak = max(peak, dirSize(filepath.Join(locDir, "kopia", "pv-copy")))
	})

	It("copies a claim that two pods mount once", func() {
		localClaim("pv-shared", "shared")
		for _, name := range []string{"one", "two"} {
			runningPod("pv-shared", name, nodeA, "db", "shared", true)
		}
		var pvs corev1.PersistentVolumeClaim
		Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: "pv-shared", Name: "shared"}, &pvs)).To(Succeed())
		for _, name := range []string{"one", "two"} {
			var pod corev1.Pod
			Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: "pv-shared", Name: name}, &pod)).To(Succeed())
			fillVolume(localVolume(&pod, pvs.Spec.VolumeName), 4096)
		}
		CreateBackup(OperatorNamespace, "pv-shared", cairnv1.BackupSpec{IncludedNamespaces: []string{"pv-shared"}})
		b := WaitPhase("pv-shared", cairnv1.BackupPhaseCompleted)
		Expect(podVolumeBackups(b)).To(HaveLen(1))
		Expect(ReadLog(store, storage.Layout{}.Backup(OperatorNamespace, "pv-shared"))).To(ContainSubstring("is copied from another pod"))
	})

	It("copies the volumes of a team's own backup, its PodVolumeBackups out of the team's reach", func() {
		pod := runningPod("pv-team", "app", nodeA, "data", "", true)
		size := fillVolume(emptyDir(pod, "data"), 64<<10)
		CreateBackup("pv-team", "team-b", cairnv1.BackupSpec{})
		var b *cairnv1.Backup
		Eventually(func(g Gomega) {
			b = GetBackup("pv-team", "team-b")
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted), "failureReason %q", b.Status.FailureReason)
		}).WithTimeout(60 * time.Second).Should(Succeed())
		pvbs := podVolumeBackups(b)
		Expect(pvbs).To(HaveLen(1))
		Expect(pvbs[0].Namespace).To(Equal(OperatorNamespace))
		Expect(pvbs[0].Annotations[podvolume.BackupAnnotation]).To(Equal("pv-team/team-b"))
		Expect(pvbs[0].Status.BytesTotal).To(Equal(size))
		Expect(pvbs[0].Spec.Repository).To(Equal(cairnv1.RepositoryReference{StorageLocation: "pv", Namespace: "pv-team"}))
	})

	It("warns about a pod that is not running and copies nothing of it, without waiting", func() {
		runningPod("pv-pending", "waiting", nodeA, "data", "", false)
		CreateBackup(OperatorNamespace, "pv-pending", cairnv1.BackupSpec{IncludedNamespaces: []string{"pv-pending"}})
		b := WaitPhase("pv-pending", cairnv1.BackupPhaseCompleted)
		Expect(b.Status.Warnings).To(BeNumerically(">=", 1))
		Expect(podVolumeBackups(b)).To(BeEmpty())
		Expect(ReadLog(store, storage.Layout{}.Backup(OperatorNamespace, "pv-pending"))).To(ContainSubstring("not Running"))
	})

	// waitInProgress waits until the backup's one copy runs, and returns it.
	waitInProgress := func(name string) cairnv1.PodVolumeBackup {
		GinkgoHelper()
		var p cairnv1.PodVolumeBackup
		Eventually(func(g Gomega) {
			pvbs := podVolumeBackups(GetBackup(OperatorNamespace, name))
			g.Expect(pvbs).NotTo(BeEmpty())
			p = pvbs[0]
			g.Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseInProgress))
			g.Expect(p.Status.BytesDone).To(BeNumerically(">", 0))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		return p
	}
	pvbPhase := func(p cairnv1.PodVolumeBackup) func() cairnv1.PodVolumePhase {
		return func() cairnv1.PodVolumePhase {
			var got cairnv1.PodVolumeBackup
			Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(&p), &got)).To(Succeed())
			return got.Status.Phase
		}
	}

	It("stops a running copy within seconds when the backup is cancelled", func() {
		stall.Store(true)
		EnsureNamespace("pv-cancel")
		pod := runningPod("pv-cancel", "app", nodeA, "data", "", true)
		fillVolume(emptyDir(pod, "data"), 4096)
		CreateBackup(OperatorNamespace, "pv-cancel", cairnv1.BackupSpec{IncludedNamespaces: []string{"pv-cancel"}})
		p := waitInProgress("pv-cancel")
		Eventually(func() int64 {
			return ptr.Deref(GetBackup(OperatorNamespace, "pv-cancel").Status.Progress, cairnv1.BackupProgress{}).VolumeBytesDone
		}).
			Should(BeNumerically(">", 0), "the backup shows the bytes its copies read")
		CancelBackup("pv-cancel")
		Eventually(pvbPhase(p)).WithTimeout(5 * time.Second).Should(Equal(cairnv1.PodVolumePhaseCancelled))
		ExpectCancelled(store, "pv-cancel")
	})

	It("cancels a copy that outlasts itemOperationTimeout, and the backup is PartiallyFailed", func() {
		stall.Store(true)
		pod := runningPod("pv-timeout", "app", nodeA, "data", "", true)
		fillVolume(emptyDir(pod, "data"), 4096)
		CreateBackup(OperatorNamespace, "pv-timeout", cairnv1.BackupSpec{IncludedNamespaces: []string{"pv-timeout"},
			ItemOperationTimeout: &metav1.Duration{Duration: 2 * time.Second}})
		p := waitInProgress("pv-timeout")
		b := WaitPhase("pv-timeout", cairnv1.BackupPhasePartiallyFailed)
		Expect(b.Status.BackupItemOperationsFailed).To(BeEquivalentTo(1))
		Eventually(pvbPhase(p)).WithTimeout(5 * time.Second).Should(Equal(cairnv1.PodVolumePhaseCancelled))
	})

	It("fails the copy an agent was running when it restarts, and the backup ends", func() {
		stall.Store(true)
		pod := runningPod("pv-restart", "app", nodeA, "data", "", true)
		fillVolume(emptyDir(pod, "data"), 4096)
		CreateBackup(OperatorNamespace, "pv-restart", cairnv1.BackupSpec{IncludedNamespaces: []string{"pv-restart"}})
		p := waitInProgress("pv-restart")
		stopAgent()
		// The agent stopping writes Failed itself; a killed one writes nothing: put it back.
		var got cairnv1.PodVolumeBackup
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(&p), &got)).To(Succeed())
		if got.Status.Phase != cairnv1.PodVolumePhaseInProgress {
			patch := client.MergeFrom(got.DeepCopy())
			got.Status.Phase, got.Status.Message, got.Status.CompletionTimestamp = cairnv1.PodVolumePhaseInProgress, "", nil
			Expect(K8sClient.Status().Patch(SuiteCtx, &got, patch)).To(Succeed())
		}
		stopAgent = startAgent(nodeA, tokenFor(agentAccount))
		Eventually(func(g Gomega) {
			Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(&p), &got)).To(Succeed())
			g.Expect(got.Status.Phase).To(Equal(cairnv1.PodVolumePhaseFailed))
			g.Expect(got.Status.Message).To(ContainSubstring("restarted"))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		b := WaitPhase("pv-restart", cairnv1.BackupPhasePartiallyFailed)
		Expect(b.Status.BackupItemOperationsFailed).To(BeEquivalentTo(1))
	})

	It("refuses a node agent that is not the chart's: the copy fails saying why", func() {
		stop := startAgent("node-b", tokenFor("intruder"))
		DeferCleanup(stop)
		pod := runningPod("pv-intruder", "app", "node-b", "data", "", true)
		fillVolume(emptyDir(pod, "data"), 4096)
		CreateBackup(OperatorNamespace, "pv-intruder", cairnv1.BackupSpec{IncludedNamespaces: []string{"pv-intruder"}})
		b := WaitPhase("pv-intruder", cairnv1.BackupPhasePartiallyFailed)
		pvbs := podVolumeBackups(b)
		Expect(pvbs).To(HaveLen(1))
		Expect(pvbs[0].Status.Phase).To(Equal(cairnv1.PodVolumePhaseFailed))
		Expect(pvbs[0].Status.Message).To(ContainSubstring("may not use the blob proxy"))
		Expect(repositorySnapshots("pv-intruder")).To(BeEmpty())
	})

	// schedule binds a restored pod to node, as the scheduler would, and makes its volume
	// directories, as the kubelet would before its init containers start; it returns the pod.
	schedule := func(namespace, name, node string, volumes ...string) *corev1.Pod {
		GinkgoHelper()
		if len(volumes) == 0 {
			volumes = []string{"data"}
		}
		var pod corev1.Pod
		Eventually(func() error {
			return K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: namespace, Name: name}, &pod)
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(K8sClient.SubResource("binding").Create(SuiteCtx, &pod, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		})).To(Succeed())
		for _, v := range append(volumes, podvolume.RestoreMarkerVolume) {
			Expect(os.MkdirAll(emptyDir(&pod, v), 0o777)).To(Succeed())
		}
		// Every volume mounted, the kubelet runs the first init container: the restore helper.
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(&pod), &pod)).To(Succeed())
		pod.Status.Phase = corev1.PodPending
		pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: podvolume.RestoreHelperContainer,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		Expect(K8sClient.Status().Update(SuiteCtx, &pod)).To(Succeed())
		return &pod
	}
	podVolumeRestores := func(rs *cairnv1.Restore) []cairnv1.PodVolumeRestore {
		GinkgoHelper()
		var list cairnv1.PodVolumeRestoreList
		Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(OperatorNamespace),
			client.MatchingLabels{cairnv1.PodVolumeRestoreUIDLabel: string(rs.UID)})).To(Succeed())
		return list.Items
	}
	var source *corev1.Pod
	var sourceBytes int64

	It("restores a pod's volume data under a namespace mapping, and the pod's helper is told", func() {
		source = runningPod("pv-src", "app", nodeA, "data", "", true)
		sourceBytes = fillVolume(emptyDir(source, "data"), 2<<20)
		CreateBackup(OperatorNamespace, "pv-rb", cairnv1.BackupSpec{IncludedNamespaces: []string{"pv-src"}})
		WaitPhase("pv-rb", cairnv1.BackupPhaseCompleted)

		CreateRestore(OperatorNamespace, "pv-r1", cairnv1.RestoreSpec{BackupName: "pv-rb",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"pv-src": "pv-dst"}})
		pod := schedule("pv-dst", "app", nodeA)
		By("the restored pod waits for its data in a first init container")
		Expect(pod.Spec.InitContainers).NotTo(BeEmpty())
		helper := pod.Spec.InitContainers[0]
		Expect(helper.Name).To(Equal(podvolume.RestoreHelperContainer))
		Expect(helper.Image).To(Equal("cairn-manager:test"))
		Expect(helper.Args).To(ContainElements("restore-helper", "--volumes=data"))
		Expect(*helper.SecurityContext.RunAsNonRoot).To(BeTrue())

		rs := WaitRestore(OperatorNamespace, "pv-r1", cairnv1.RestorePhaseCompleted)
		pvrs := podVolumeRestores(rs)
		Expect(pvrs).To(HaveLen(1))
		Expect(pvrs[0].Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), pvrs[0].Status.Message)
		Expect(pvrs[0].Spec.Node).To(Equal(nodeA))
		Expect(pvrs[0].Spec.Pod.UID).To(Equal(pod.UID))
		Expect(pvrs[0].Spec.SourcePod.Namespace).To(Equal("pv-src"))
		Expect(pvrs[0].Status.BytesDone).To(Equal(sourceBytes))
		Expect(rs.Status.Progress.VolumeBytesDone).To(Equal(sourceBytes))

		By("every file, mode and symlink is back, and the helper's marker says done")
		for _, name := range []string{"random.bin", "small-a", "small-b", "small-c", "marker.txt"} {
			want, err := os.ReadFile(filepath.Join(emptyDir(source, "data"), name))
			Expect(err).NotTo(HaveOccurred())
			got, err := os.ReadFile(filepath.Join(emptyDir(pod, "data"), name))
			Expect(err).NotTo(HaveOccurred())
			Expect(bytes.Equal(got, want)).To(BeTrue(), name)
			wantInfo, _ := os.Stat(filepath.Join(emptyDir(source, "data"), name))
			gotInfo, _ := os.Stat(filepath.Join(emptyDir(pod, "data"), name))
			Expect(gotInfo.Mode()).To(Equal(wantInfo.Mode()), name)
		}
		Expect(os.Readlink(filepath.Join(emptyDir(pod, "data"), "link"))).To(Equal("random.bin"))
		Expect(filepath.Join(emptyDir(pod, "data"), "empty")).To(BeADirectory())
		Expect(filepath.Join(emptyDir(pod, podvolume.RestoreMarkerVolume), "data.done")).To(BeAnExistingFile())
		Expect(filepath.Join(emptyDir(pod, "data"), ".cairn")).NotTo(BeAnExistingFile(), "nothing of Cairn's in the restored data")
	})

	It("stops a running volume restore when the restore is cancelled: the pod's helper fails with the reason", func() {
		stall.Store(true)
		CreateRestore(OperatorNamespace, "pv-r2", cairnv1.RestoreSpec{BackupName: "pv-rb",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"pv-src": "pv-dst2"}})
		pod := schedule("pv-dst2", "app", nodeA)
		var p cairnv1.PodVolumeRestore
		Eventually(func(g Gomega) {
			pvrs := podVolumeRestores(GetRestore(OperatorNamespace, "pv-r2"))
			g.Expect(pvrs).To(HaveLen(1))
			p = pvrs[0]
			g.Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseInProgress))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		rs := GetRestore(OperatorNamespace, "pv-r2")
		patch := client.MergeFrom(rs.DeepCopy())
		rs.Spec.Cancel = true
		Expect(K8sClient.Patch(SuiteCtx, rs, patch)).To(Succeed())
		Eventually(func() cairnv1.PodVolumePhase {
			var got cairnv1.PodVolumeRestore
			Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(&p), &got)).To(Succeed())
			return got.Status.Phase
		}).WithTimeout(5 * time.Second).Should(Equal(cairnv1.PodVolumePhaseCancelled))
		failed := filepath.Join(emptyDir(pod, podvolume.RestoreMarkerVolume), "data.failed")
		Eventually(func() string { b, _ := os.ReadFile(failed); return string(b) }).Should(ContainSubstring("Cancelled"))
		rs = WaitRestore(OperatorNamespace, "pv-r2", cairnv1.RestorePhaseFailed)
		Expect(rs.Status.FailureReason).To(ContainSubstring("cancel"))
	})

	It("gives up on a restored pod that is never scheduled: no PodVolumeRestore is left behind", func() {
		CreateRestore(OperatorNamespace, "pv-r3", cairnv1.RestoreSpec{BackupName: "pv-rb",
			NamespaceMapping:     map[string]cairnv1.NamespaceName{"pv-src": "pv-dst3"},
			ItemOperationTimeout: &metav1.Duration{Duration: 2 * time.Second}})
		rs := WaitRestore(OperatorNamespace, "pv-r3", cairnv1.RestorePhasePartiallyFailed)
		Expect(rs.Status.RestoreItemOperationsFailed).To(BeEquivalentTo(1))
		Eventually(func() []cairnv1.PodVolumeRestore { return podVolumeRestores(rs) }).Should(BeEmpty())
	})

	It("deletes a restore's PodVolumeRestores with it", func() {
		rs := GetRestore(OperatorNamespace, "pv-r1")
		Expect(podVolumeRestores(rs)).NotTo(BeEmpty())
		Expect(K8sClient.Delete(SuiteCtx, rs)).To(Succeed())
		Eventually(func() []cairnv1.PodVolumeRestore { return podVolumeRestores(rs) }).Should(BeEmpty())
	})

	restoreTargetSpecs(volumeSpecs{
		store: func() *storage.Filesystem { return store }, runningPod: runningPod, fillVolume: fillVolume, emptyDir: emptyDir,
		schedule: schedule, podVolumeRestores: podVolumeRestores,
		stopAgent: func() { stopAgent() }, startAgent: func() { stopAgent = startAgent(nodeA, tokenFor(agentAccount)) },
	})

	// The real Velero file-system backup of hack/velero-volume-fixtures.sh (testdata/velero/volumes):
	// namespace ledger, pod books, emptyDir volumes data and journal copied by Velero's kopia
	// uploader into its repository of the namespace, whose password is Velero's default.
	It("restores the volume data of a real Velero file-system backup with the password its location names, and fails a volume clearly without it or with a wrong one", func() {
		root := GinkgoT().TempDir()
		src := filepath.Join(testenv.RepoRoot(), "testdata", "velero", "volumes", "bucket")
		Expect(filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			if d.IsDir() {
				return os.MkdirAll(filepath.Join(root, rel), 0o750)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(root, rel), b, 0o600)
		})).To(Succeed())
		spec := FilesystemSpec(root)
		spec.Format, spec.AccessMode = cairnv1.LocationFormatVelero, cairnv1.AccessModeReadOnly
		spec.ObjectStorage = &cairnv1.ObjectStorage{Prefix: "velero"}
		spec.BackupSyncPeriod = &metav1.Duration{Duration: time.Second}
		spec.Velero = &cairnv1.VeleroLocation{RepositoryPasswordSecretRef: &cairnv1.SecretKeyReference{Name: "velero-repo-credentials", Key: "repository-password"}}
		vel := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "from-velero", Namespace: OperatorNamespace}, Spec: spec}
		Expect(K8sClient.Create(SuiteCtx, vel)).To(Succeed())
		DeferCleanup(func() { _ = K8sClient.Delete(SuiteCtx, vel) })
		EventuallyLocation(vel, cairnv1.StorageLocationPhaseAvailable, "")
		Eventually(func() error {
			return K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: OperatorNamespace, Name: "ledger-fs"}, &cairnv1.Backup{})
		}).WithTimeout(30 * time.Second).Should(Succeed())
		WaitPhase("ledger-fs", cairnv1.BackupPhaseCompleted)
		restoreInto := func(name, namespace string) {
			GinkgoHelper()
			CreateRestore(OperatorNamespace, name, cairnv1.RestoreSpec{BackupName: "ledger-fs", IncludedResources: []string{"pods"},
				NamespaceMapping: map[string]cairnv1.NamespaceName{"ledger": cairnv1.NamespaceName(namespace)}})
		}
		repositoryNamed := "the volume repository of location from-velero for namespace ledger"

		By("without the password Secret: the pod is an error naming the Secret, and is not made")
		restoreInto("velero-nopw", "ledger-nopw")
		rs := WaitRestore(OperatorNamespace, "velero-nopw", cairnv1.RestorePhasePartiallyFailed)
		Expect(podVolumeRestores(rs)).To(BeEmpty())
		Expect(apierrors.IsNotFound(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: "ledger-nopw", Name: "books"}, &corev1.Pod{}))).To(BeTrue())
		var results restore.Results
		GunzipJSON(store, storage.Layout{}.Restore(OperatorNamespace, "velero-nopw").Results, &results)
		Expect(results.Errors.Namespaces["ledger-nopw"]).To(ContainElement(And(
			ContainSubstring("the data of volume data cannot be restored"),
			ContainSubstring("the Secret %s/velero-repo-credentials that storage location from-velero names for it does not exist", OperatorNamespace))))

		By("with a wrong password: each volume fails, naming the repository")
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "velero-repo-credentials", Namespace: OperatorNamespace},
			Data: map[string][]byte{"repository-password": []byte("not-static-passw0rd")}}
		Expect(K8sClient.Create(SuiteCtx, secret)).To(Succeed())
		DeferCleanup(func() { _ = K8sClient.Delete(SuiteCtx, secret) })
		restoreInto("velero-badpw", "ledger-badpw")
		schedule("ledger-badpw", "books", nodeA, "data", "journal")
		rs = WaitRestore(OperatorNamespace, "velero-badpw", cairnv1.RestorePhasePartiallyFailed)
		// The pod's operation fails with its first failed volume, and the other volume's
		// restore is cancelled if it had not failed yet.
		Eventually(func(g Gomega) {
			pvrs := podVolumeRestores(rs)
			g.Expect(pvrs).To(HaveLen(2))
			failed := 0
			for _, p := range pvrs {
				g.Expect(p.Status.Phase).To(BeElementOf(cairnv1.PodVolumePhaseFailed, cairnv1.PodVolumePhaseCancelled))
				if p.Status.Phase == cairnv1.PodVolumePhaseFailed {
					failed++
					g.Expect(p.Status.Message).To(And(ContainSubstring(repositoryNamed), ContainSubstring("wrong repository password")))
				}
			}
			g.Expect(failed).To(BeNumerically(">=", 1))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(rs.Status.RestoreItemOperationsFailed).To(BeEquivalentTo(1))
		var ops []backup.Operation
		GunzipJSON(store, storage.Layout{}.Restore(OperatorNamespace, "velero-badpw").ItemOperations, &ops)
		Expect(ops).To(HaveLen(1))
		Expect(ops[0].Error).To(And(ContainSubstring("volumes of pod ledger-badpw/books"),
			ContainSubstring(repositoryNamed), ContainSubstring("wrong repository password")))

		By("with Velero's password: both volumes as Velero copied them, from the snapshots of that pod")
		secret.Data["repository-password"] = []byte("static-passw0rd")
		Expect(K8sClient.Update(SuiteCtx, secret)).To(Succeed())
		restoreInto("velero-vol", "ledger-vol")
		pod := schedule("ledger-vol", "books", nodeA, "data", "journal")
		rs = WaitRestore(OperatorNamespace, "velero-vol", cairnv1.RestorePhaseCompleted)
		pvrs := podVolumeRestores(rs)
		Expect(pvrs).To(HaveLen(2))
		for _, p := range pvrs {
			Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), p.Status.Message)
			Expect(p.Spec.Repository).To(Equal(cairnv1.RepositoryReference{StorageLocation: "from-velero", Namespace: "ledger"}))
			Expect(p.Spec.SnapshotSource).To(Equal("snapshot-pod-volume/kopia/ledger/books/"))
			Expect(p.Spec.SnapshotTags).To(Equal(map[string]string{"ns": "ledger", "pod": "books"}))
			want, err := testenv.VeleroFixtureTree(p.Spec.Volume)
			Expect(err).NotTo(HaveOccurred())
			Expect(testenv.VolumeTree(emptyDir(pod, p.Spec.Volume))).To(Equal(want), p.Spec.Volume)
			Expect(filepath.Join(emptyDir(pod, podvolume.RestoreMarkerVolume), p.Spec.Volume+".done")).To(BeAnExistingFile())
		}
	})

	It("deletes a deleted backup's snapshots and copies, and maintenance gives the space back", func() {
		second := GetBackup(OperatorNamespace, "pv-b2")
		secondIDs := []string{}
		for _, p := range podVolumeBackups(second) {
			secondIDs = append(secondIDs, p.Status.SnapshotID)
		}
		DeleteBackup("pv-b1")
		ExpectGone("pv-b1")
		Expect(podVolumeBackups(first)).To(BeEmpty())
		left := repositorySnapshots("pv-copy")
		Expect(left).NotTo(ContainElement(firstCopies["data"].Status.SnapshotID))
		Expect(left).To(ConsistOf(secondIDs))

		DeleteBackup("pv-b2")
		ExpectGone("pv-b2")
		Expect(repositorySnapshots("pv-copy")).To(BeEmpty())
		Eventually(func() int64 { return dirSize(filepath.Join(locDir, "kopia", "pv-copy")) }).
			WithTimeout(30*time.Second).WithPolling(time.Second).Should(BeNumerically("<", peak/10), "peak %d", peak)
	})
})
