//go:build e2enode

package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
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
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/testenv"
)

const (
	// The pods' subnet on the bridge cni0 (hack/node-lib.sh).
	podSubnet = "10.244.0.0/24"
	// The pods' default gateway: cni0's address in the node's namespace.
	podGateway = "10.244.0.1"
	// The node's address on the namespace's lo, which pods reach (hack/node-lib.sh).
	nodeIP = "10.200.0.1"
	// The cluster DNS's Service, kube-system/kube-dns: CoreDNS (hack/node-lib.sh, node-up.sh).
	dnsIP          = "10.0.0.10"
	dnsPodSelector = "k8s-app=kube-dns"
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

	It("resolves a Service's name in a pod through CoreDNS, and forwards the Service's cluster IP to its pods through kube-proxy", func(ctx SpecContext) {
		ns := "node-dns-" + rand.String(5)
		greeting, token := "hello from "+ns, rand.String(16)
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=180s")
		})
		By("serving the app behind the Service web")
		apply(appManifests(ns, greeting, token) + fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: %s
spec:
  selector:
    app: web
  ports:
    - name: http
      port: 80
      targetPort: http
`, ns))
		kubectlOK("rollout", "status", "deployment/web", "-n", ns, "--timeout=180s")
		var web, dns corev1.Service
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &web)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-dns"}, &dns)).To(Succeed())
		Expect(dns.Spec.ClusterIP).To(Equal(dnsIP))

		By("finding neither cluster IP on a link of the node's namespace: only kube-proxy's rules lead there")
		addrs, err := exec.Command("ip", "-o", "addr", "show").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(addrs))
		for _, ip := range []string{web.Spec.ClusterIP, dns.Spec.ClusterIP} {
			Expect(string(addrs)).NotTo(ContainSubstring(" "+ip+"/"), "the namespace's addresses")
		}

		By("running a pod that looks web." + ns + ".svc up and GETs the greeting from it")
		apply(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: %s
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 5
  securityContext:
    runAsNonRoot: true
  containers:
    - name: client
      image: %s
      imagePullPolicy: IfNotPresent
      args: ["-get", "http://web.%[1]s.svc/config/greeting.txt"]
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: ["ALL"]
`, ns, httpdImage))
		var pod corev1.Pod
		Eventually(func(g Gomega) corev1.PodPhase {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "client"}, &pod)).To(Succeed())
			return pod.Status.Phase
		}).WithTimeout(120*time.Second).WithPolling(time.Second).Should(Equal(corev1.PodSucceeded), "pod %s/client", ns)
		Expect(kubectlOK("logs", "client", "-n", ns)).To(Equal(
			fmt.Sprintf("web.%s.svc resolves to %s\n%s", ns, web.Spec.ClusterIP, greeting)))

		By("finding the pod's query answered by CoreDNS's pod, from the pod's own address")
		Expect(kubectlOK("logs", "-n", "kube-system", "-l", dnsPodSelector, "--tail=-1")).To(MatchRegexp(
			`(?m)^\[INFO\] %s:\d+ - \d+ "A IN web\.%s\.svc\.cluster\.local\. udp .*" NOERROR `,
			regexp.QuoteMeta(pod.Status.PodIP), regexp.QuoteMeta(ns)))
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

// The chart's release, in the operator's namespace, and what selects its pods.
const (
	release         = "cairn"
	cairnNamespace  = "cairn-system"
	managerSelector = "app.kubernetes.io/name=cairn,app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=manager"
	// The leader election lease of cmd/manager.
	leaderLease = "manager.cairn.dev"
	// The S3 location the chart's values add, beside the filesystem location "default".
	s3Location = "s3"
	s3Bucket   = "cairn"
	s3Prefix   = "cluster"
)

// chartValues are the values the suite installs charts/cairn with: the manager image 'make
// image' built, the filesystem location on the node's directory storageDir (there is no
// storage class for a claim), an S3 location at endpoint with credentials, and the node agent
// reading the pods' volumes from the kubelet's root directory that hack/node-up.sh gives it,
// with repository maintenance often enough for a spec to see it run, and async operations
// polled every 2 s (a restored pod's volume restores are bound to its node by a poll).
func chartValues(storageDir, endpoint, credentials string) string {
	repository, tag, _ := strings.Cut(managerImage, ":")
	return fmt.Sprintf(`image:
  repository: %[1]q
  tag: %[2]q
  pullPolicy: IfNotPresent
terminationGracePeriodSeconds: 10
storage:
  filesystem:
    hostPath: %[3]q
    persistence:
      enabled: false
  locations:
    - name: %[4]s
      provider: s3
      bucket: %[5]s
      prefix: %[6]s
      config:
        endpoint: %[7]q
        region: us-east-1
        forcePathStyle: "true"
      credential:
        cloud: %[8]q
nodeAgent:
  kubeletDir: %[9]q
itemOperationSyncFrequency: 2s
repositoryMaintenance:
  interval: 20s
  timeout: 2m
`, repository, tag, storageDir, s3Location, s3Bucket, s3Prefix, endpoint, credentials, filepath.Join(nodeDir, "kubelet"))
}

var _ = Describe("Cairn installed by its chart", Ordered, func() {
	var (
		storageDir string
		values     string // the values file
		server     *testenv.S3Server
		proxy      *testenv.StallingProxy
	)

	BeforeAll(func(ctx SpecContext) {
		// Whatever a run stopped before its clean-up left (etcd keeps it across node-down).
		removeCairn()

		// The filesystem location's directory, on the machine: the manager runs as 65532.
		storageDir = filepath.Join(nodeDir, "storage", rand.String(8))
		Expect(os.MkdirAll(storageDir, 0o750)).To(Succeed())
		Expect(os.Chown(storageDir, 65532, 65532)).To(Succeed())

		By("running versitygw in the node's namespace, behind a proxy on the node's address that can hold writes")
		server = testenv.StartS3Server(GinkgoT())
		server.CreateBucket(s3Bucket)
		l, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0")) // where the manager's pod reaches it
		Expect(err).NotTo(HaveOccurred())
		proxy = testenv.ServeStallingProxy(GinkgoT(), l, server.Endpoint())
		values = filepath.Join(GinkgoT().TempDir(), "values.yaml")
		Expect(os.WriteFile(values, []byte(chartValues(storageDir, proxy.URL, server.CredentialsFile())), 0o600)).To(Succeed())

		// Removed while the manager and the S3 server still run, so that the backups' data can be deleted.
		DeferCleanup(func() {
			removeCairn()
			Expect(os.RemoveAll(storageDir)).To(Succeed())
		})

		By("helm install cairn charts/cairn --wait: the manager and the node agent Ready")
		helmOK("install", release, "charts/cairn", "--namespace", cairnNamespace, "--create-namespace",
			"--values", values, "--wait", "--timeout=5m")
		kubectlOK("rollout", "status", "daemonset/"+release+"-node-agent", "-n", cairnNamespace, "--timeout=120s")
		for _, location := range []string{"default", s3Location} {
			// The manager applies the chart's locations when it starts (docs/install.md).
			kubectlOK("wait", "backupstoragelocation/"+location, "-n", cairnNamespace, "--for=create", "--timeout=120s")
			kubectlOK("wait", "backupstoragelocation/"+location, "-n", cairnNamespace,
				"--for=jsonpath={.status.phase}=Available", "--timeout=120s")
		}
	})

	It("runs the manager image as a non-root pod with a read-only root filesystem, Ready once its caches synced", func(ctx SpecContext) {
		pod := readyManager(ctx)

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
		Eventually(leader).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Equal(pod.Name))
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

		By("backing the app's namespace up into the chart's filesystem location, the default")
		apply(backupManifest(ns, ns, ""))
		waitBackupPhase(ctx, ns, cairnv1.BackupPhaseCompleted)
		Expect(filepath.Join(storageDir, "backups", cairnNamespace, ns, ns+".tar.gz")).To(BeAnExistingFile())

		By("deleting the namespace, as a user who lost it")
		kubectlOK("delete", "namespace", ns, "--wait", "--timeout=180s")
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}))).To(BeTrue())

		By("restoring it")
		apply(fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Restore\nmetadata:\n  name: %[1]s\n  namespace: %[2]s\nspec:\n  backupName: %[1]s\n", ns, cairnNamespace))
		waitRestoreCompleted(ctx, ns)
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
			proxy.Unstall()
			_, _, _ = kubectl("delete", "backups", "-n", cairnNamespace, ns+"-interrupted", ns+"-next", "--ignore-not-found", "--wait", "--timeout=120s")
			_, _, _ = kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=180s")
		})
		apply(fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %[1]s\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: %[1]s\ndata:\n  a: b\n", ns))

		By("deleting the manager's pod while its backup's uploads to the chart's S3 location hang")
		old := readyManager(ctx)
		proxy.Stall()
		apply(backupManifest(ns+"-interrupted", ns, s3Location))
		waitBackupPhase(ctx, ns+"-interrupted", cairnv1.BackupPhaseInProgress)
		Eventually(proxy.Held).WithTimeout(60*time.Second).Should(BeNumerically(">", 0), "an upload of the backup reaches the proxy")
		kubectlOK("delete", "pod", old.Name, "-n", cairnNamespace, "--wait=false")
		Eventually(func(g Gomega) {
			pods := runningPods(ctx, g, cairnNamespace, managerSelector)
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].Name).NotTo(Equal(old.Name))
		}).WithTimeout(180 * time.Second).WithPolling(time.Second).Should(Succeed())

		By("finding the backup failed by the new pod's restart recovery")
		proxy.Unstall()
		waitBackupPhase(ctx, ns+"-interrupted", cairnv1.BackupPhaseFailed)
		var interrupted cairnv1.Backup
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cairnNamespace, Name: ns + "-interrupted"}, &interrupted)).To(Succeed())
		Expect(interrupted.Status.FailureReason).To(Equal(lifecycle.FailureReasonRestarted))

		By("completing the next backup")
		apply(backupManifest(ns+"-next", ns, s3Location))
		waitBackupPhase(ctx, ns+"-next", cairnv1.BackupPhaseCompleted)
	})

	It("rolls the manager's pod on a helm upgrade that changes a flag, and the new pod is Ready and leads", func(ctx SpecContext) {
		old := readyManager(ctx)
		Expect(podArgs(old)).To(ContainElement("--queue-resync-period=30s"))

		By("helm upgrade --reuse-values --set queueResyncPeriod=45s")
		helmOK("upgrade", release, "charts/cairn", "--namespace", cairnNamespace, "--reuse-values",
			"--set", "queueResyncPeriod=45s", "--wait", "--timeout=5m")

		By("finding a new pod, Ready with the new flag, the old one gone, and the new one the leader")
		var pod corev1.Pod
		Eventually(func(g Gomega) {
			pods := runningPods(ctx, g, cairnNamespace, managerSelector)
			g.Expect(pods).To(HaveLen(1))
			pod = pods[0]
			g.Expect(pod.Name).NotTo(Equal(old.Name))
			g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(&old), &corev1.Pod{}))).To(BeTrue(), "the old pod is gone")
		}).WithTimeout(180 * time.Second).WithPolling(time.Second).Should(Succeed())
		Expect(podArgs(pod)).To(ContainElement("--queue-resync-period=45s"))
		Eventually(leader).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Equal(pod.Name))
	})

	It("runs backups only in the leader of two replicas, and hands over when the leader's pod is deleted", func(ctx SpecContext) {
		ns := "node-leader-" + rand.String(5)
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=180s")
		})
		apply(fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %[1]s\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: %[1]s\ndata:\n  a: b\n", ns))

		By("helm upgrade --reuse-values --set replicas=2")
		helmOK("upgrade", release, "charts/cairn", "--namespace", cairnNamespace, "--reuse-values",
			"--set", "replicas=2", "--wait", "--timeout=5m")
		var pods []corev1.Pod
		Eventually(func(g Gomega) {
			pods = runningPods(ctx, g, cairnNamespace, managerSelector)
			g.Expect(pods).To(HaveLen(2))
		}).WithTimeout(180 * time.Second).WithPolling(time.Second).Should(Succeed())

		By("finding the lease naming one of the two pods, and the other one waiting for it")
		var first, standby corev1.Pod
		Eventually(func(g Gomega) {
			holder, err := leader()
			g.Expect(err).NotTo(HaveOccurred())
			i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == holder })
			g.Expect(i).NotTo(Equal(-1), "the lease's holder %q is one of the pods", holder)
			first, standby = pods[i], pods[1-i]
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())
		firstBefore, standbyBefore := backupAttempts(ctx, first), backupAttempts(ctx, standby)

		By("running a backup: the leader runs it, the standby does nothing")
		apply(backupManifest(ns+"-first", ns, ""))
		waitBackupPhase(ctx, ns+"-first", cairnv1.BackupPhaseCompleted)
		Expect(backupAttempts(ctx, first)).To(Equal(firstBefore + 1))
		Expect(backupAttempts(ctx, standby)).To(Equal(standbyBefore))
		Expect(standbyBefore).To(BeZero(), "a standby never started a backup")
		standbyLog := kubectlOK("logs", "-n", cairnNamespace, standby.Name)
		Expect(standbyLog).To(MatchRegexp(`(?i)attempting to acquire leader lease`))
		Expect(standbyLog).NotTo(ContainSubstring("Starting workers"))
		Expect(standbyLog).NotTo(ContainSubstring(ns))

		By("deleting the leader's pod: another pod takes the lease (the standby or the one replacing the deleted pod), and runs the next backup alone")
		kubectlOK("delete", "pod", first.Name, "-n", cairnNamespace, "--wait=false")
		var next corev1.Pod
		var others []corev1.Pod
		Eventually(func(g Gomega) {
			holder, err := leader()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(holder).NotTo(Equal(first.Name))
			pods := runningPods(ctx, g, cairnNamespace, managerSelector)
			g.Expect(pods).To(HaveLen(2))
			i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == holder })
			g.Expect(i).NotTo(Equal(-1), "the lease's holder %q is one of the running pods", holder)
			next = pods[i]
			others = slices.Delete(pods, i, i+1)
		}).WithTimeout(120 * time.Second).WithPolling(time.Second).Should(Succeed())
		nextBefore, otherBefore := backupAttempts(ctx, next), backupAttempts(ctx, others[0])
		apply(backupManifest(ns+"-second", ns, s3Location))
		waitBackupPhase(ctx, ns+"-second", cairnv1.BackupPhaseCompleted)
		Expect(backupAttempts(ctx, next)).To(Equal(nextBefore + 1))
		Expect(backupAttempts(ctx, others[0])).To(Equal(otherBefore))
		Expect(kubectlOK("logs", "-n", cairnNamespace, next.Name)).To(ContainSubstring("Starting workers"))

		By("helm upgrade --reuse-values --set replicas=1")
		helmOK("upgrade", release, "charts/cairn", "--namespace", cairnNamespace, "--reuse-values",
			"--set", "replicas=1", "--wait", "--timeout=5m")
	})

	It("leaves the CRDs, the backups and their data on helm uninstall, and a new install takes them over", func(ctx SpecContext) {
		ns := "node-uninstall-" + rand.String(5)
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=180s")
		})
		apply(fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %[1]s\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: %[1]s\ndata:\n  a: b\n", ns))
		backups := map[string]string{ns + "-fs": "", ns + "-s3": s3Location}
		for name, location := range backups {
			apply(backupManifest(name, ns, location))
		}
		for name := range backups {
			waitBackupPhase(ctx, name, cairnv1.BackupPhaseCompleted)
		}
		fsData := filepath.Join(storageDir, "backups", cairnNamespace, ns+"-fs", ns+"-fs.tar.gz")
		Expect(fsData).To(BeAnExistingFile())
		Expect(filesNamed(filepath.Join(server.Dir, s3Bucket, s3Prefix), ns+"-s3")).NotTo(BeEmpty())

		By("helm uninstall cairn --wait")
		helmOK("uninstall", release, "--namespace", cairnNamespace, "--wait", "--timeout=5m")
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(cairnNamespace))).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
		}).WithTimeout(120 * time.Second).WithPolling(time.Second).Should(Succeed())
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: cairnNamespace, Name: release}, &appsv1.Deployment{}))).To(BeTrue())

		By("finding the CRDs, the Backups and their data still there")
		for _, crd := range []string{"backups", "restores", "schedules", "backupstoragelocations"} {
			kubectlOK("get", "crd", crd+".cairn.dev")
		}
		for name := range backups {
			var b cairnv1.Backup
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cairnNamespace, Name: name}, &b)).To(Succeed())
			Expect(b.DeletionTimestamp).To(BeNil())
			Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
		}
		Expect(fsData).To(BeAnExistingFile())
		Expect(filesNamed(filepath.Join(server.Dir, s3Bucket, s3Prefix), ns+"-s3")).NotTo(BeEmpty())

		By("installing again: the backups are still Completed, and the one in S3 restores the deleted namespace")
		helmOK("install", release, "charts/cairn", "--namespace", cairnNamespace, "--values", values, "--wait", "--timeout=5m")
		readyManager(ctx)
		kubectlOK("delete", "namespace", ns, "--wait", "--timeout=180s")
		apply(fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Restore\nmetadata:\n  name: %[1]s\n  namespace: %[2]s\nspec:\n  backupName: %[1]s\n", ns+"-s3", cairnNamespace))
		waitRestoreCompleted(ctx, ns+"-s3")
		var settings corev1.ConfigMap
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "settings"}, &settings)).To(Succeed())
		Expect(settings.Data).To(HaveKeyWithValue("a", "b"))
		for name := range backups {
			var b cairnv1.Backup
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cairnNamespace, Name: name}, &b)).To(Succeed())
			Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
		}
	})

	describeVolumeData(&storageDir, &proxy)
	describeVolumeRestore(&proxy, &server)
	describeTenantVolumes(&storageDir)
	describeVeleroVolumes(&proxy, &server)
	describeHooks(&storageDir)
	describeCloudVolumes() // last: its gcs specs leave the manager's environment changed
})

// removeCairn removes everything the suite installs: the backups and restores first, while
// the manager runs their finalizers (and the S3 server still runs), then the release, the CRDs
// the release keeps, and the namespace. Should the manager be gone, the finalizers are dropped.
// It does nothing when nothing is installed.
func removeCairn() {
	By("removing Cairn from the node: its backups and restores first, while the manager runs their finalizers")
	if _, _, err := kubectl("delete", "restores,backups", "--all", "-n", cairnNamespace, "--wait", "--timeout=120s"); err != nil {
		for _, kind := range []string{"restores", "backups"} {
			names, _, _ := kubectl("get", kind, "-n", cairnNamespace, "-o", "name")
			for _, name := range strings.Fields(names) {
				_, _, _ = kubectl("patch", name, "-n", cairnNamespace, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
			}
		}
	}
	_, _, _ = helm("uninstall", release, "--namespace", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=2m")
	_, _, _ = kubectl("delete", "-f", testenv.CRDDir(), "--ignore-not-found", "--timeout=120s")
	_, _, _ = kubectl("delete", "namespace", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=180s")
}

// backupManifest is a Backup of namespace ns into location ("": the default location).
func backupManifest(name, ns, location string) string {
	m := fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Backup\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  includedNamespaces: [%s]\n", name, cairnNamespace, ns)
	if location != "" {
		m += "  storageLocation: " + location + "\n"
	}
	return m
}

// leader is the name of the pod that holds the manager's leader election lease (its holder
// identity is "<pod name>_<uuid>").
func leader() (string, error) {
	out, _, err := kubectl("get", "lease", leaderLease, "-n", cairnNamespace, "-o", "jsonpath={.spec.holderIdentity}")
	name, _, _ := strings.Cut(out, "_")
	return name, err
}

// podArgs are the arguments of the manager's container in pod.
func podArgs(pod corev1.Pod) []string {
	GinkgoHelper()
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == "manager" })
	Expect(i).NotTo(Equal(-1), "pod %s has a manager container", pod.Name)
	return pod.Spec.Containers[i].Args
}

// backupAttempts is how many backups made by hand pod's manager started, from its metrics
// (cairn_backup_attempts_total, absent until the first).
func backupAttempts(ctx context.Context, pod corev1.Pod) int {
	GinkgoHelper()
	var attempts int
	Eventually(func(g Gomega) {
		metrics, err := httpGet(ctx, "http://"+net.JoinHostPort(pod.Status.PodIP, "8080")+"/metrics")
		g.Expect(err).NotTo(HaveOccurred())
		attempts = 0
		for _, line := range strings.Split(metrics, "\n") {
			if value, ok := strings.CutPrefix(line, `cairn_backup_attempts_total{schedule=""} `); ok {
				attempts, err = strconv.Atoi(value)
				g.Expect(err).NotTo(HaveOccurred())
			}
		}
	}).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())
	return attempts
}

// filesNamed are the files under dir whose path contains name.
func filesNamed(dir, name string) []string {
	GinkgoHelper()
	var files []string
	Expect(filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(path, name) {
			files = append(files, path)
		}
		return err
	})).To(Succeed())
	return files
}

// readyManager waits for the one manager pod to be Running and Ready, and returns it.
func readyManager(ctx context.Context) corev1.Pod {
	GinkgoHelper()
	var pod corev1.Pod
	Eventually(func(g Gomega) {
		pods := runningPods(ctx, g, cairnNamespace, managerSelector)
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

// waitRestoreCompleted waits for the restore name to be Completed, and fails at once when it
// ends otherwise.
func waitRestoreCompleted(ctx context.Context, name string) {
	GinkgoHelper()
	phase := cairnv1.RestorePhaseCompleted
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
