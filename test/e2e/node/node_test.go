//go:build e2enode

package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/testenv"
)

const (
	// The pods' subnet on the bridge cni0 (hack/node-lib.sh).
	podSubnet = "10.244.0.0/24"
	// The pods' default gateway: cni0's address in the node's namespace.
	podGateway = "10.244.0.1"
	// The node's address on the namespace's lo, which pods reach (hack/node-lib.sh).
	nodeIP = "10.200.0.1"
)

var _ = Describe("The one-node cluster", func() {
	It("has a Ready node running kubelet v1.36.3 on containerd", func(ctx SpecContext) {
		var node corev1.Node
		Expect(k8s.Get(ctx, client.ObjectKey{Name: "cairn-node"}, &node)).To(Succeed())
		Expect(node.Status.Conditions).To(ContainElement(And(
			HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
		Expect(node.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.3"))
		Expect(node.Status.NodeInfo.ContainerRuntimeVersion).To(HavePrefix("containerd://"))
	})

	It("has no route off the machine, for the pods or for this test", func() {
		out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "node-up.sh"), "--check").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "hack/node-up.sh --check: %s", out)

		By("finding no route to an address off the machine: connecting a UDP socket sends nothing, it only looks the route up")
		for _, addr := range []string{"192.0.2.1:9", "[2001:db8::1]:9"} {
			conn, err := net.Dial("udp", addr)
			if err == nil {
				conn.Close()
			}
			Expect(errors.Is(err, syscall.ENETUNREACH)).To(BeTrue(), "dialing %s: %v", addr, err)
		}

		By("finding only the namespace's own routes and links, and forwarding dropped")
		routes, err := exec.Command("ip", "route", "show", "table", "all").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(routes))
		Expect(string(routes)).NotTo(ContainSubstring("default"))
		Expect(string(routes)).NotTo(ContainSubstring(" via "))
		rules, err := exec.Command("iptables", "-w", "-S", "FORWARD").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(rules))
		Expect(strings.Split(string(rules), "\n")).To(ContainElement("-P FORWARD DROP"))
	})
})

// appManifests is the app the specs back up: a Deployment of the static HTTP server serving
// its ConfigMap and its Secret, both mounted under the directory it serves.
func appManifests(ns, greeting, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: site
  namespace: %[1]s
data:
  greeting.txt: %[2]q
---
apiVersion: v1
kind: Secret
metadata:
  name: token
  namespace: %[1]s
stringData:
  token: %[3]q
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: %[1]s
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      terminationGracePeriodSeconds: 5
      securityContext:
        runAsNonRoot: true
      containers:
        - name: httpd
          image: %[4]s
          imagePullPolicy: IfNotPresent
          args: ["-root=/srv", "-listen=:8080"]
          ports:
            - name: http
              containerPort: 8080
          readinessProbe:
            httpGet:
              path: /config/greeting.txt
              port: http
            periodSeconds: 2
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
          volumeMounts:
            - name: config
              mountPath: /srv/config
              readOnly: true
            - name: secret
              mountPath: /srv/secret
              readOnly: true
      volumes:
        - name: config
          configMap:
            name: site
        - name: secret
          secret:
            secretName: token
`, ns, greeting, token, httpdImage)
}

// managerManifests runs Cairn's manager image as config/manager does (non-root, read-only root
// filesystem, leader election, probes), with the ServiceAccount and roles of config/rbac, and
// a default filesystem location on the hostPath storageDir, mounted at /backups.
func managerManifests(storageDir string) string {
	return fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata:
  name: default
  namespace: cairn-system
spec:
  provider: filesystem
  default: true
  config:
    path: /backups
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cairn-manager
  namespace: cairn-system
spec:
  replicas: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: cairn
  template:
    metadata:
      labels:
        app.kubernetes.io/name: cairn
    spec:
      serviceAccountName: cairn-manager
      terminationGracePeriodSeconds: 10
      securityContext:
        runAsNonRoot: true
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: manager
          image: %[1]s
          imagePullPolicy: IfNotPresent
          args:
            - --namespace=cairn-system
            - --leader-elect
            - --restore-scratch-dir=/scratch
          ports:
            - name: metrics
              containerPort: 8080
            - name: probes
              containerPort: 8081
          livenessProbe:
            httpGet:
              path: /healthz
              port: probes
          readinessProbe:
            httpGet:
              path: /readyz
              port: probes
            periodSeconds: 2
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
          volumeMounts:
            - name: scratch
              mountPath: /scratch
            - name: backups
              mountPath: /backups
      volumes:
        - name: scratch
          emptyDir: {}
        - name: backups
          hostPath:
            path: %[2]s
            type: Directory
`, managerImage, storageDir)
}

var _ = Describe("Cairn as a pod", Ordered, func() {
	var storageDir string

	BeforeAll(func(ctx SpecContext) {
		By("installing the CRDs, the operator's namespace and config/rbac")
		kubectlOK("apply", "--server-side", "-f", testenv.CRDDir())
		kubectlOK("wait", "--for=condition=Established", "--timeout=60s", "-f", testenv.CRDDir())
		// A run stopped in its clean-up may have left the namespace terminating.
		kubectlOK("wait", "--for=delete", "namespace/cairn-system", "--timeout=180s")
		apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cairn-system\n")
		kubectlOK("apply", "-k", filepath.Join(testenv.RepoRoot(), "config", "rbac"))

		// The location's directory, on the machine: the manager runs as 65532.
		storageDir = filepath.Join(nodeDir, "storage", rand.String(8))
		Expect(os.MkdirAll(storageDir, 0o750)).To(Succeed())
		Expect(os.Chown(storageDir, 65532, 65532)).To(Succeed())

		DeferCleanup(func() {
			By("removing Cairn from the node: its backups and restores first, while the manager runs their finalizers")
			_, _, _ = kubectl("delete", "restores,backups", "--all", "-n", "cairn-system", "--wait", "--timeout=120s")
			_, _, _ = kubectl("delete", "deployment,backupstoragelocation", "--all", "-n", "cairn-system", "--wait", "--timeout=60s")
			_, _, _ = kubectl("delete", "-k", filepath.Join(testenv.RepoRoot(), "config", "rbac"), "--ignore-not-found")
			_, _, _ = kubectl("delete", "-f", testenv.CRDDir(), "--ignore-not-found", "--timeout=120s")
			_, _, _ = kubectl("delete", "namespace", "cairn-system", "--ignore-not-found", "--wait", "--timeout=180s")
			Expect(os.RemoveAll(storageDir)).To(Succeed())
		})

		By("running the manager image as a Deployment")
		apply(managerManifests(storageDir))
		kubectlOK("rollout", "status", "deployment/cairn-manager", "-n", "cairn-system", "--timeout=180s")
	})

	It("runs the manager image as a non-root pod with a read-only root filesystem, Ready once its caches synced", func(ctx SpecContext) {
		pod := readyPod(ctx, "cairn-system", "app.kubernetes.io/name=cairn")

		By("finding the container's process running as 65532 on a read-only root")
		pid := containerPID(pod.Status.ContainerStatuses[0].ContainerID)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(status)).To(MatchRegexp(`(?m)^Uid:\s+65532\s+65532\s+65532\s+65532$`))
		Expect(string(status)).To(MatchRegexp(`(?m)^Gid:\s+65532\s+65532\s+65532\s+65532$`))
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		Expect(err).NotTo(HaveOccurred())
		Expect(rootMountOptions(string(mounts))).To(ContainElement("ro"))

		By("finding it the leader, through the API server it reaches as the kubernetes service")
		Eventually(func() (string, error) {
			out, _, err := kubectl("get", "leases", "-n", "cairn-system", "-o", "jsonpath={.items[*].spec.holderIdentity}")
			return out, err
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(HavePrefix(pod.Name))
	})

	It("backs up a running app, and brings it back running and serving after its namespace is deleted", func(ctx SpecContext) {
		ns := "node-app-" + rand.String(5)
		greeting, token := "hello from "+ns, rand.String(16)
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=180s")
		})
		apply(appManifests(ns, greeting, token))
		kubectlOK("rollout", "status", "deployment/web", "-n", ns, "--timeout=180s")
		expectAppServes(ctx, ns, greeting, token)

		By("finding the pods' only way out the bridge cni0 of the node's namespace, which has none")
		for _, p := range runningPods(ctx, Default, ns, "app=web") {
			routes, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/route", containerPID(p.Status.ContainerStatuses[0].ContainerID)))
			Expect(err).NotTo(HaveOccurred())
			Expect(defaultGateways(string(routes))).To(Equal([]string{podGateway}), "pod %s's routes:\n%s", p.Name, routes)
		}

		By("backing the app's namespace up into the filesystem location")
		apply(fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Backup\nmetadata:\n  name: %[1]s\n  namespace: cairn-system\nspec:\n  includedNamespaces: [%[1]s]\n", ns))
		waitBackupPhase(ctx, ns, cairnv1.BackupPhaseCompleted)
		Expect(filepath.Join(storageDir, "backups", "cairn-system", ns, ns+".tar.gz")).To(BeAnExistingFile())

		By("deleting the namespace, as a user who lost it")
		kubectlOK("delete", "namespace", ns, "--wait", "--timeout=180s")
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}))).To(BeTrue())

		By("restoring it")
		apply(fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Restore\nmetadata:\n  name: %[1]s\n  namespace: cairn-system\nspec:\n  backupName: %[1]s\n", ns))
		waitRestorePhase(ctx, ns, cairnv1.RestorePhaseCompleted)
		Eventually(func(g Gomega) {
			var d appsv1.Deployment
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &d)).To(Succeed())
			g.Expect(d.Status.AvailableReplicas).To(Equal(int32(2)))
		}).WithTimeout(180 * time.Second).WithPolling(time.Second).Should(Succeed())
		expectAppServes(ctx, ns, greeting, token)
	})

	It("fails the backup its deleted pod was running, in the new pod's restart recovery, and completes the next", func(ctx SpecContext) {
		ns := "node-restart-" + rand.String(5)
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=180s")
		})
		apply(fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %[1]s\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: %[1]s\ndata:\n  a: b\n", ns))

		By("giving the manager an S3 location whose writes can be held: versitygw, behind a proxy on the node's address")
		server := testenv.StartS3Server(GinkgoT())
		server.CreateBucket(ns)
		proxy := startStallingProxy(server.Endpoint())
		apply(fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: %[1]s, namespace: cairn-system}
stringData:
  cloud: %[3]q
---
apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata: {name: %[1]s, namespace: cairn-system}
spec:
  provider: s3
  objectStorage: {bucket: %[1]s, prefix: cluster}
  config: {endpoint: %[2]q, region: us-east-1, forcePathStyle: "true"}
  credential: {name: %[1]s, key: cloud}
`, ns, proxy.URL, server.CredentialsFile()))
		// Removed while the server still runs, so that the backups' data can be deleted.
		DeferCleanup(func() {
			proxy.unstall()
			_, _, _ = kubectl("delete", "backups", "-n", "cairn-system", ns+"-interrupted", ns+"-next", "--ignore-not-found", "--wait", "--timeout=120s")
			_, _, _ = kubectl("delete", "backupstoragelocation,secret", ns, "-n", "cairn-system", "--ignore-not-found")
		})
		kubectlOK("wait", "backupstoragelocation/"+ns, "-n", "cairn-system", "--for=jsonpath={.status.phase}=Available", "--timeout=60s")

		By("deleting the manager's pod while its backup's uploads hang")
		old := readyPod(ctx, "cairn-system", "app.kubernetes.io/name=cairn")
		proxy.stall()
		backup := func(name string) string {
			return fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Backup\nmetadata:\n  name: %s\n  namespace: cairn-system\nspec:\n  includedNamespaces: [%s]\n  storageLocation: %s\n", name, ns, ns)
		}
		apply(backup(ns + "-interrupted"))
		waitBackupPhase(ctx, ns+"-interrupted", cairnv1.BackupPhaseInProgress)
		Eventually(proxy.held).WithTimeout(60*time.Second).Should(BeNumerically(">", 0), "an upload of the backup reaches the proxy")
		kubectlOK("delete", "pod", old.Name, "-n", "cairn-system", "--wait=false")
		Eventually(func(g Gomega) {
			pods := runningPods(ctx, g, "cairn-system", "app.kubernetes.io/name=cairn")
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].Name).NotTo(Equal(old.Name))
		}).WithTimeout(180 * time.Second).WithPolling(time.Second).Should(Succeed())

		By("finding the backup failed by the new pod's restart recovery")
		proxy.unstall()
		waitBackupPhase(ctx, ns+"-interrupted", cairnv1.BackupPhaseFailed)
		var interrupted cairnv1.Backup
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "cairn-system", Name: ns + "-interrupted"}, &interrupted)).To(Succeed())
		Expect(interrupted.Status.FailureReason).To(Equal(controller.FailureReasonRestarted))

		By("completing the next backup")
		apply(backup(ns + "-next"))
		waitBackupPhase(ctx, ns+"-next", cairnv1.BackupPhaseCompleted)
	})
})

// stallingProxy stands between the manager's pod and an S3 server, on the node's address: reads
// go through, and while stalled, writes (PUT, POST, DELETE) hang until it is released or the
// client goes away, like an object store that takes requests and never answers them.
type stallingProxy struct {
	URL     string
	mu      sync.Mutex
	release chan struct{}
	holding int
}

func startStallingProxy(target string) *stallingProxy {
	GinkgoHelper()
	u, err := url.Parse(target)
	Expect(err).NotTo(HaveOccurred())
	p := &stallingProxy{}
	rp := httputil.NewSingleHostReverseProxy(u) // keeps the Host header, which SigV4 signed
	l, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			p.mu.Lock()
			release := p.release
			if release != nil {
				p.holding++
			}
			p.mu.Unlock()
			if release != nil {
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
			}
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	DeferCleanup(func() { p.unstall(); _ = srv.Close() })
	p.URL = "http://" + l.Addr().String()
	return p
}

func (p *stallingProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.release == nil {
		p.release = make(chan struct{})
	}
}

func (p *stallingProxy) unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.release != nil {
		close(p.release)
		p.release = nil
	}
}

// held is how many writes the proxy has held since it was first stalled.
func (p *stallingProxy) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holding
}

// readyPod waits for the one pod matching selector in ns to be Running and Ready, and returns it.
func readyPod(ctx context.Context, ns, selector string) corev1.Pod {
	GinkgoHelper()
	var pod corev1.Pod
	Eventually(func(g Gomega) {
		pods := runningPods(ctx, g, ns, selector)
		g.Expect(pods).To(HaveLen(1))
		pod = pods[0]
	}).WithTimeout(120 * time.Second).WithPolling(time.Second).Should(Succeed())
	return pod
}

// runningPods are the pods matching selector in ns that are Running and Ready, and not deleted.
func runningPods(ctx context.Context, g Gomega, ns, selector string) []corev1.Pod {
	sel, err := labels.Parse(selector)
	g.Expect(err).NotTo(HaveOccurred())
	var list corev1.PodList
	g.Expect(k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel})).To(Succeed())
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) {
			pods = append(pods, p)
		}
	}
	return pods
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// expectAppServes waits until both of the app's pods are Running and Ready on the pods' network,
// and each serves the ConfigMap's greeting and the Secret's token.
func expectAppServes(ctx context.Context, ns, greeting, token string) {
	GinkgoHelper()
	_, subnet, err := net.ParseCIDR(podSubnet)
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		pods := runningPods(ctx, g, ns, "app=web")
		g.Expect(pods).To(HaveLen(2))
		for _, p := range pods {
			g.Expect(subnet.Contains(net.ParseIP(p.Status.PodIP))).To(BeTrue(), "pod %s's address %s", p.Name, p.Status.PodIP)
			base := "http://" + net.JoinHostPort(p.Status.PodIP, "8080")
			g.Expect(httpGet(ctx, base+"/config/greeting.txt")).To(Equal(greeting))
			g.Expect(httpGet(ctx, base+"/secret/token")).To(Equal(token))
		}
	}).WithTimeout(120 * time.Second).WithPolling(time.Second).Should(Succeed())
}

func waitBackupPhase(ctx context.Context, name string, phase cairnv1.BackupPhase) {
	GinkgoHelper()
	terminal := []cairnv1.BackupPhase{cairnv1.BackupPhaseCompleted, cairnv1.BackupPhasePartiallyFailed,
		cairnv1.BackupPhaseFailed, cairnv1.BackupPhaseFailedValidation}
	Eventually(func(g Gomega) cairnv1.BackupPhase {
		var b cairnv1.Backup
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "cairn-system", Name: name}, &b)).To(Succeed())
		if b.Status.Phase != phase && slices.Contains(terminal, b.Status.Phase) {
			StopTrying(fmt.Sprintf("backup %s ended %s: %s %v", name, b.Status.Phase, b.Status.FailureReason, b.Status.ValidationErrors)).Now()
		}
		return b.Status.Phase
	}).WithTimeout(180 * time.Second).WithPolling(time.Second).Should(Equal(phase))
}

func waitRestorePhase(ctx context.Context, name string, phase cairnv1.RestorePhase) {
	GinkgoHelper()
	terminal := []cairnv1.RestorePhase{cairnv1.RestorePhaseCompleted, cairnv1.RestorePhasePartiallyFailed,
		cairnv1.RestorePhaseFailed, cairnv1.RestorePhaseFailedValidation}
	Eventually(func(g Gomega) cairnv1.RestorePhase {
		var r cairnv1.Restore
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "cairn-system", Name: name}, &r)).To(Succeed())
		if r.Status.Phase != phase && slices.Contains(terminal, r.Status.Phase) {
			StopTrying(fmt.Sprintf("restore %s ended %s: %s %v", name, r.Status.Phase, r.Status.FailureReason, r.Status.ValidationErrors)).Now()
		}
		return r.Status.Phase
	}).WithTimeout(180 * time.Second).WithPolling(time.Second).Should(Equal(phase))
}

// containerPID is the host pid of a container's first process, from the node's containerd
// (containerID as the pod's status gives it, "containerd://<id>").
func containerPID(containerID string) int {
	GinkgoHelper()
	id := strings.TrimPrefix(containerID, "containerd://")
	out, err := exec.Command("ctr", "--address", "/run/cairn-node/containerd.sock", "--namespace", "k8s.io",
		"tasks", "list").CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 3 && fields[0] == id {
			pid, err := strconv.Atoi(fields[1])
			Expect(err).NotTo(HaveOccurred())
			return pid
		}
	}
	Fail(fmt.Sprintf("no task %s in the node's containerd:\n%s", id, out))
	return 0
}

// defaultGateways are the gateways of the default routes in a /proc/<pid>/net/route (IPv4,
// the kernel's hexadecimal in host byte order, little-endian here).
func defaultGateways(routes string) []string {
	var gateways []string
	for _, line := range strings.Split(routes, "\n")[1:] {
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[1] != "00000000" {
			continue
		}
		gw, err := strconv.ParseUint(fields[2], 16, 32)
		if err != nil {
			continue
		}
		gateways = append(gateways, net.IPv4(byte(gw), byte(gw>>8), byte(gw>>16), byte(gw>>24)).String())
	}
	return gateways
}

// rootMountOptions are the mount options of "/" in a /proc/<pid>/mountinfo.
func rootMountOptions(mountinfo string) []string {
	for _, line := range strings.Split(mountinfo, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 5 && fields[4] == "/" {
			return strings.Split(fields[5], ",")
		}
	}
	return nil
}
