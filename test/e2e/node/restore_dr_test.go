//go:build e2enode

package node

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/blobproxy"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// The second cluster of the disaster-recovery spec: a control plane with no node of its own
// (envtest's etcd and kube-apiserver, and kube-controller-manager), the manager binary run by
// the test as its operator, and the manager binary's node agent run by the test as the agent
// of a node that only this test plays: it binds the restored pod to that node, as a scheduler
// would, and makes the pod's volume directories in a pods directory laid out like the
// kubelet's, as the kubelet would. The two clusters share nothing but the S3 server.
const (
	// drNode is the node the second cluster's restored pod is bound to.
	drNode = "cairn-dr-node"
	// drLocation is what the second cluster calls the first one's S3 location: another name,
	// so that the password's key is renamed as docs/volumes.md says.
	drLocation = "cluster-a"
)

// clusterB is the second control plane, its admin client and kubeconfig.
type clusterB struct {
	kubeconfig string
	c          client.Client
}

// kubectl runs kubectl against the second cluster with stdin and fails the spec if it fails.
func (b *clusterB) kubectl(stdin string, args ...string) string {
	GinkgoHelper()
	cmd := exec.Command(kubectlBinary(), append([]string{"--kubeconfig", b.kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	fmt.Fprintf(GinkgoWriter, "$ kubectl (second cluster) %s\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	Expect(err).NotTo(HaveOccurred(), "kubectl (second cluster) %v: %s", args, stderr.String())
	return stdout.String()
}

// startClusterB starts the second control plane with the cairn-system namespace; it stops
// when the spec ends.
func startClusterB() *clusterB {
	GinkgoHelper()
	env, err := testenv.New()
	Expect(err).NotTo(HaveOccurred())
	// The node's namespace has no default route, from which kube-apiserver would pick it.
	env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", "127.0.0.1")
	_, err = env.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) })
	kcm, err := testenv.StartControllerManager(GinkgoT(), env)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(kcm.Stop)
	admin, err := env.AddUser(envtest.User{Name: "node-dr-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	data, err := admin.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	b := &clusterB{kubeconfig: filepath.Join(GinkgoT().TempDir(), "kubeconfig-b")}
	Expect(os.WriteFile(b.kubeconfig, data, 0o600)).To(Succeed())
	b.c, err = client.New(admin.Config(), client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	Expect(testenv.InstallAdmissionPolicies(context.Background(), admin.Config(), admin.Config())).To(Succeed())
	b.kubectl("", "create", "namespace", cairnNamespace)
	// Registered after the control plane's clean-up, so run before it: what a failed spec left.
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			cmd := exec.Command(kubectlBinary(), "--kubeconfig", b.kubeconfig, "get", "restores,podvolumerestores,backups,backupstoragelocations,pods,persistentvolumeclaims,persistentvolumes,events", "-A", "-o", "yaml")
			out, _ := cmd.CombinedOutput()
			fmt.Fprintf(GinkgoWriter, "The second cluster:\n%s\n", out)
		}
	})
	return b
}

// process is a binary the test runs, with its output kept for a failed spec.
type process struct {
	name   string
	cmd    *exec.Cmd
	out    *bytes.Buffer
	exited chan struct{}
}

// startProcess runs bin/manager with args until the spec ends (SIGTERM, then SIGKILL).
func startProcess(name string, args ...string) *process {
	GinkgoHelper()
	p := &process{name: name, out: &bytes.Buffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(testenv.RepoRoot(), "bin", "manager"), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	Expect(p.cmd.Start()).To(Succeed())
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	DeferCleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if CurrentSpecReport().Failed() {
			fmt.Fprintf(GinkgoWriter, "%s's log:\n%s\n", p.name, p.out.String())
		}
	})
	return p
}

// waitReady waits until the process's health probe at addr answers /readyz.
func (p *process) waitReady(addr string) {
	GinkgoHelper()
	Eventually(func() error {
		select {
		case <-p.exited:
			StopTrying(p.name + " exited").Now()
		default:
		}
		resp, err := (&http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{}}).Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// freeAddr is an address on 127.0.0.1 that nothing listens on right now.
func freeAddr() string {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().String()
}

// carriedPasswords is the first cluster's repository password Secret edited as
// docs/volumes.md ("Into another cluster") tells an administrator: exported with kubectl get
// -o yaml, its uid, resourceVersion and creationTimestamp dropped, its namespace and name the
// second cluster's (the same here), and each key of location from renamed for location to.
func carriedPasswords(exported, from, to string) string {
	GinkgoHelper()
	var secret map[string]any
	Expect(yaml.Unmarshal([]byte(exported), &secret)).To(Succeed())
	meta, _ := secret["metadata"].(map[string]any)
	Expect(meta).NotTo(BeNil())
	for _, field := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields"} {
		delete(meta, field)
	}
	meta["namespace"], meta["name"] = cairnNamespace, release+"-repository-passwords"
	data, _ := secret["data"].(map[string]any)
	renamed := map[string]any{}
	for key, value := range data {
		if ns, ok := strings.CutPrefix(key, from+"_"); ok {
			key = to + "_" + ns
		}
		renamed[key] = value
	}
	secret["data"] = renamed
	out, err := yaml.Marshal(secret)
	Expect(err).NotTo(HaveOccurred())
	return string(out)
}

// restoreIntoSecondCluster restores the backup of app (in the first cluster's S3 location)
// into a second cluster that reaches only the S3 server, and checks the data its node agent
// writes on the node against what the app wrote.
func restoreIntoSecondCluster(ctx context.Context, server *testenv.S3Server, app *voldataApp, backup cairnv1.Backup) {
	GinkgoHelper()
	started := time.Now()
	By("starting a second control plane and its Cairn manager, with a repository server")
	b := startClusterB()
	repositoryAddr, probeAddr := freeAddr(), freeAddr()
	manager := startProcess("the second cluster's manager", "--kubeconfig", b.kubeconfig, "--namespace", cairnNamespace,
		"--health-probe-bind-address", probeAddr, "--metrics-bind-address", "0", "--download-bind-address", freeAddr(),
		"--repository-server-bind-address", repositoryAddr, "--restore-helper-image", managerImage,
		"--item-operation-sync-frequency=1s")
	manager.waitReady(probeAddr)

	By("giving it a ReadOnly location on the first cluster's bucket, under another name")
	credentials := filepath.Join(GinkgoT().TempDir(), "cloud")
	Expect(os.WriteFile(credentials, []byte(server.CredentialsFile()), 0o600)).To(Succeed())
	b.kubectl("", "create", "secret", "generic", drLocation, "-n", cairnNamespace, "--from-file=cloud="+credentials)
	b.kubectl(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata: {name: %s, namespace: %s}
spec:
  provider: s3
  accessMode: ReadOnly
  backupSyncPeriod: 2s
  objectStorage: {bucket: %s, prefix: %s}
  config: {endpoint: %q, region: us-east-1, forcePathStyle: "true"}
  credential: {name: %s, key: cloud}
`, drLocation, cairnNamespace, s3Bucket, s3Prefix, server.Endpoint(), drLocation), "apply", "-f", "-")

	By("carrying the repository password over as docs/volumes.md says: kubectl get -o yaml, edited, kubectl apply")
	exported := kubectlOK("get", "secret", release+"-repository-passwords", "-n", cairnNamespace, "-o", "yaml")
	Expect(exported).To(ContainSubstring(s3Location + "_" + app.ns))
	b.kubectl(carriedPasswords(exported, s3Location, drLocation), "apply", "-f", "-")

	By("finding the backup synced, and restoring it")
	Eventually(func(g Gomega) cairnv1.BackupPhase {
		var synced cairnv1.Backup
		g.Expect(b.c.Get(ctx, client.ObjectKey{Namespace: cairnNamespace, Name: backup.Name}, &synced)).To(Succeed())
		return synced.Status.Phase
	}).WithTimeout(60 * time.Second).WithPolling(500 * time.Millisecond).Should(Equal(cairnv1.BackupPhaseCompleted))
	b.kubectl(restoreManifest(app.ns, backup.Name, "", ""), "apply", "-f", "-")

	By("running a node agent for the second cluster's node, on a pods directory of the test's, with a token of its ServiceAccount for the repository server")
	podsDir := filepath.Join(GinkgoT().TempDir(), "pods")
	Expect(os.MkdirAll(podsDir, 0o750)).To(Succeed())
	b.kubectl("", "create", "serviceaccount", release+"-node-agent", "-n", cairnNamespace)
	token := filepath.Join(GinkgoT().TempDir(), "token")
	Expect(os.WriteFile(token, []byte(b.kubectl("", "create", "token", release+"-node-agent", "-n", cairnNamespace,
		"--audience", blobproxy.Audience, "--duration=1h")), 0o600)).To(Succeed())
	agentProbe := freeAddr()
	agent := startProcess("the second cluster's node agent", "node-agent", "--kubeconfig", b.kubeconfig, "--namespace", cairnNamespace,
		"--node-name", drNode, "--pods-dir", podsDir, "--repository-server", "http://"+repositoryAddr, "--token-file", token,
		"--config-dir", GinkgoT().TempDir(), "--metrics-bind-address", "0", "--health-probe-bind-address", agentProbe)
	agent.waitReady(agentProbe)

	By("scheduling the restored pod onto the node, as a scheduler would")
	var pod corev1.Pod
	Eventually(func(g Gomega) {
		g.Expect(b.c.Get(ctx, client.ObjectKey{Namespace: app.ns, Name: "voldata"}, &pod)).To(Succeed())
	}).WithTimeout(60 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
	Expect(pod.Spec.NodeName).To(BeEmpty())
	Expect(pod.Spec.InitContainers[0].Name).To(Equal(podvolume.RestoreHelperContainer))
	Expect(b.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: drNode}})).To(Succeed())
	Expect(b.c.SubResource("binding").Create(ctx, &pod, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: drNode},
	})).To(Succeed())

	By("making the pod's volume directories, as the kubelet would: the claim's local volume and the emptyDirs")
	var restore cairnv1.Restore
	Expect(b.c.Get(ctx, client.ObjectKey{Namespace: cairnNamespace, Name: app.ns}, &restore)).To(Succeed())
	var claim corev1.PersistentVolumeClaim
	Expect(b.c.Get(ctx, client.ObjectKey{Namespace: app.ns, Name: "data"}, &claim)).To(Succeed())
	Expect(claim.Spec.VolumeName).To(Equal(app.pv), "the restored claim names its restored volume")
	volumes := filepath.Join(podsDir, string(pod.UID), "volumes")
	dirs := map[string]string{
		"claim":                       filepath.Join(volumes, "kubernetes.io~local-volume", app.pv),
		"scratch":                     filepath.Join(volumes, "kubernetes.io~empty-dir", "scratch"),
		podvolume.RestoreMarkerVolume: filepath.Join(volumes, "kubernetes.io~empty-dir", podvolume.RestoreMarkerVolume),
	}
	for _, dir := range dirs {
		Expect(os.MkdirAll(dir, 0o750)).To(Succeed())
		Expect(os.Chmod(dir, 0o777)).To(Succeed()) // as the kubelet makes an emptyDir; the restore gives each volume its own
	}
	By("running the restore helper, as the kubelet does once every volume is mounted")
	Expect(b.c.Get(ctx, client.ObjectKeyFromObject(&pod), &pod)).To(Succeed())
	pod.Status.Phase = corev1.PodPending
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: podvolume.RestoreHelperContainer,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	Expect(b.c.Status().Update(ctx, &pod)).To(Succeed())

	By("finding both volumes restored by the agent, the restore Completed, and the helper told")
	Eventually(func(g Gomega) cairnv1.RestorePhase {
		g.Expect(b.c.Get(ctx, client.ObjectKeyFromObject(&restore), &restore)).To(Succeed())
		return restore.Status.Phase
	}).WithTimeout(120*time.Second).WithPolling(500*time.Millisecond).Should(Equal(cairnv1.RestorePhaseCompleted), func() string {
		return fmt.Sprintf("the restore: %+v", restore.Status)
	})
	pvrs := podVolumeRestores(ctx, Default, b.c, restore.UID)
	Expect(pvrs).To(HaveLen(2))
	for volume, p := range pvrs {
		Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), "volume %s: %s", volume, p.Status.Message)
		Expect(p.Spec.Node).To(Equal(drNode))
		Expect(p.Spec.Pod.UID).To(Equal(pod.UID))
		Expect(p.Spec.Repository).To(Equal(cairnv1.RepositoryReference{StorageLocation: drLocation, Namespace: app.ns}))
		Expect(filepath.Join(dirs[podvolume.RestoreMarkerVolume], volume+podvolume.DoneMarkerSuffix)).To(BeAnExistingFile())
		fmt.Fprintf(GinkgoWriter, "Volume %s: %d bytes restored in the second cluster in %s\n", volume, p.Status.BytesDone,
			p.Status.CompletionTimestamp.Sub(p.Status.StartTimestamp.Time))
	}

	By("finding on the node the trees the app wrote in the first cluster, owned by its user")
	for volume, want := range app.reports {
		got, err := treeDigest(dirs[volume])
		Expect(err).NotTo(HaveOccurred())
		expectSameTree(volume, got, want)
		var st syscall.Stat_t
		Expect(syscall.Lstat(filepath.Join(dirs[volume], "marker.txt"), &st)).To(Succeed())
		Expect(st.Uid).To(BeEquivalentTo(65532), volume)
	}
	fmt.Fprintf(GinkgoWriter, "The second cluster's restore took %s, its control plane included\n", time.Since(started).Round(time.Millisecond))
}
