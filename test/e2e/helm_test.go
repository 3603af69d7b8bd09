package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cairn-backup/cairn/internal/testenv"
)

// The chart installed with helm into a control plane of its own that has never seen Cairn (no
// CRDs: the chart brings them), and the manager run exactly as the chart's pod would run it:
// the Deployment's arguments, authenticated as the chart's ServiceAccount with a token from the
// TokenRequest API, so that the RBAC the chart grants is proven sufficient (or, in backupOnly
// mode, proven to refuse restores). There is no kubelet: the Deployment's pod never runs, the
// manager runs here. Each spec installs its own release in its own namespace.
var _ = Describe("The Helm chart", Ordered, func() {
	var cluster *helmCluster

	BeforeAll(func() {
		cluster = startHelmCluster()
	})

	It("installs, backs up, restores, runs a schedule, cancels and deletes with exactly the RBAC it grants (full), upgrades a flag and uninstalls keeping the CRDs, the backups and their data", func() {
		const ns, release, app = "cairn-full", "cairn-full", "helm-app-full"
		storage := filepath.Join(GinkgoT().TempDir(), "backups")
		values := []string{
			"--set", "storage.filesystem.mountPath=" + storage,
			"--set", "schedules[0].name=often",
			"--set", "schedules[0].schedule=@every 5s",
			"--set", "schedules[0].template.includedNamespaces[0]=" + app,
		}
		cluster.kubectlOK("create", "namespace", ns)
		cluster.kubectlOK("create", "namespace", app)
		cluster.kubectlOK("create", "configmap", "settings", "-n", app, "--from-literal=color=blue")

		By("installing with --dry-run=server, then for real")
		out := cluster.helmOK(append([]string{"install", release, chartDir(), "-n", ns, "--dry-run=server", "--take-ownership"}, values...)...)
		Expect(out).To(ContainSubstring("kind: CustomResourceDefinition"))
		_, _, err := cluster.kubectl("get", "crd", "backups.cairn.dev")
		Expect(err).To(HaveOccurred(), "a dry run creates nothing")
		out = cluster.helmOK(append([]string{"install", release, chartDir(), "-n", ns, "--take-ownership"}, values...)...)
		Expect(out).To(ContainSubstring("STATUS: deployed"))
		Expect(cluster.kubectlOK("get", "pvc", release+"-storage", "-n", ns, "-o", "name")).To(Equal("persistentvolumeclaim/" + release + "-storage\n"))

		By("applying the location and the schedule of the values: the manager does, once it runs")
		_, _, err = cluster.kubectl("get", "backupstoragelocation", "default", "-n", ns)
		Expect(err).To(HaveOccurred(), "helm creates no storage location itself")
		m := cluster.runManagerAsChart(ns, release, release)
		DeferCleanup(m.stop)
		cluster.waitExists(ns, "backupstoragelocation/default", "schedule/often")
		Expect(cluster.kubectlOK("get", "backupstoragelocation", "default", "-n", ns, "-o", "jsonpath={.spec.config.path}")).To(Equal(storage))
		Expect(cluster.kubectlOK("get", "schedule", "often", "-n", ns, "-o", "jsonpath={.spec.schedule}")).To(Equal("@every 5s"))

		By("backing up")
		cluster.apply(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: first, namespace: %s}
spec: {includedNamespaces: [%s]}
`, ns, app))
		cluster.waitPhase(m, "backup", ns, "first", "Completed")
		Expect(filepath.Join(storage, "backups", ns, "first", "cairn-backup.json")).To(BeAnExistingFile())

		By("restoring into another namespace")
		cluster.apply(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata: {name: copy, namespace: %s}
spec:
  backupName: first
  namespaceMapping: {%s: %s-copy}
`, ns, app, app))
		cluster.waitPhase(m, "restore", ns, "copy", "Completed")
		cluster.kubectlOK("wait", "restore/copy", "-n", ns, "--for=condition=Ready", "--timeout=30s")
		Expect(cluster.kubectlOK("get", "configmap", "settings", "-n", app+"-copy", "-o", "jsonpath={.data.color}")).To(Equal("blue"))

		By("running the schedule from the values")
		Eventually(func() []string {
			return strings.Fields(cluster.kubectlOK("get", "backups", "-n", ns, "-l", "cairn.dev/schedule-name=often", "-o", "jsonpath={.items[*].status.phase}"))
		}).WithTimeout(90*time.Second).WithPolling(time.Second).Should(ContainElement("Completed"), func() string { return m.log.String() })

		By("cancelling a backup")
		cluster.apply(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: cancelled, namespace: %s}
spec: {includedNamespaces: [%s], cancel: true}
`, ns, app))
		cluster.waitPhase(m, "backup", ns, "cancelled", "Failed")
		Expect(cluster.kubectlOK("get", "backup", "cancelled", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="Cancelled")].status}`)).To(Equal("True"))

		By("deleting a backup and its data")
		cluster.kubectlOK("delete", "backup", "first", "-n", ns, "--timeout=60s")
		Expect(filepath.Join(storage, "backups", ns, "first", "cairn-backup.json")).NotTo(BeAnExistingFile())

		By("upgrading a flag, and pausing the schedule in place; the download signing key stays, and so does a change made with kubectl to an object the upgrade leaves alone")
		key := cluster.signingKey(ns, release, "signing-key")
		uids := cluster.uids(ns, "backupstoragelocation/default", "schedule/often")
		Expect(cluster.kubectlOK("get", "schedule", "often", "-n", ns, "-o", "jsonpath={.status.lastBackup}")).NotTo(BeEmpty())
		cluster.kubectlOK("label", "backupstoragelocation", "default", "-n", ns, "--overwrite", "app.kubernetes.io/managed-by=someone")
		cluster.helmOK(append([]string{"upgrade", release, chartDir(), "-n", ns, "--set", "concurrentBackups=3", "--set", "schedules[0].paused=true"}, values...)...)
		cluster.kubectlOK("wait", "schedule/often", "-n", ns, "--for=jsonpath={.status.phase}=Paused", "--timeout=30s")
		Expect(cluster.uids(ns, "backupstoragelocation/default", "schedule/often")).To(Equal(uids), "the manager updates them in place, as docs/install.md says")
		Expect(cluster.kubectlOK("get", "schedule", "often", "-n", ns, "-o", "jsonpath={.status.lastBackup}")).NotTo(BeEmpty(), "the schedule's status stays")
		Expect(cluster.kubectlOK("get", "backupstoragelocation", "default", "-n", ns, "-o", `jsonpath={.metadata.labels.app\.kubernetes\.io/managed-by}`)).To(Equal("someone"),
			"the values did not change the location: it is not applied again")
		Expect(cluster.deploymentArgs(ns, release)).To(ContainElement("--concurrent-backups=3"))
		Expect(cluster.signingKey(ns, release, "signing-key")).To(Equal(key), "an upgrade keeps the signing key: URLs signed before it still work")

		By("uninstalling: the CRDs, the backups and their data stay")
		m.stop()
		scheduled := strings.Fields(cluster.kubectlOK("get", "backups", "-n", ns, "-l", "cairn.dev/schedule-name=often",
			"-o", `jsonpath={.items[?(@.status.phase=="Completed")].metadata.name}`))[0]
		cluster.helmOK("uninstall", release, "-n", ns, "--wait")
		_, _, err = cluster.kubectl("get", "deployment", release, "-n", ns)
		Expect(err).To(HaveOccurred(), "the release's objects are gone")
		for _, crd := range []string{"backups", "restores", "schedules", "backupstoragelocations"} {
			cluster.kubectlOK("get", "crd", crd+".cairn.dev")
		}
		Expect(cluster.kubectlOK("get", "backup", scheduled, "-n", ns, "-o", "jsonpath={.status.phase}")).To(Equal("Completed"))
		Expect(filepath.Join(storage, "backups", ns, scheduled, "cairn-backup.json")).To(BeAnExistingFile())
		cluster.kubectlOK("get", "pvc", release+"-storage", "-n", ns)
		// The schedule (applied by the manager, not a release object: kept) would go on running under a later manager.
		cluster.kubectlOK("delete", "schedule", "often", "-n", ns)
	})

	It("backs up but refuses restores, saying why, in rbac.mode backupOnly; a second replica takes over", func() {
		const ns, release, app = "cairn-backuponly", "cairn-backuponly", "helm-app-backuponly"
		storage := filepath.Join(GinkgoT().TempDir(), "backups")
		cluster.kubectlOK("create", "namespace", ns)
		cluster.kubectlOK("create", "namespace", app)
		cluster.kubectlOK("create", "configmap", "settings", "-n", app, "--from-literal=color=green")
		cluster.helmOK("install", release, chartDir(), "-n", ns, "--take-ownership",
			"--set", "rbac.mode=backupOnly", "--set", "storage.filesystem.mountPath="+storage)
		sa := "system:serviceaccount:" + ns + ":" + release
		Expect(cluster.kubectlOK("auth", "can-i", "list", "configmaps", "-A", "--as", sa)).To(Equal("yes\n"))
		out, _, _ := cluster.kubectl("auth", "can-i", "create", "configmaps", "-n", app, "--as", sa)
		Expect(out).To(Equal("no\n"))

		m := cluster.runManagerAsChart(ns, release, release)
		DeferCleanup(m.stop)

		cluster.apply(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: only, namespace: %s}
spec: {includedNamespaces: [%s]}
`, ns, app))
		cluster.waitPhase(m, "backup", ns, "only", "Completed")
		Expect(filepath.Join(storage, "backups", ns, "only", "cairn-backup.json")).To(BeAnExistingFile())

		cluster.apply(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata: {name: refused, namespace: %s}
spec: {backupName: only}
`, ns))
		cluster.waitPhase(m, "restore", ns, "refused", "FailedValidation")
		cluster.kubectlOK("wait", "restore/refused", "-n", ns, "--for=condition=Stalled", "--timeout=30s")
		Expect(cluster.kubectlOK("get", "restore", "refused", "-n", ns, "-o", "jsonpath={.status.validationErrors}")).
			To(And(ContainSubstring("not allowed to create the resources a restore creates"), ContainSubstring("rbac.mode backupOnly")))

		By("running a second replica, ready on standby, which takes over when the leader stops")
		standby := cluster.runManagerAsChart(ns, release, release)
		DeferCleanup(standby.stop)

		By("serving, on the standby, a download URL the leader signed: the chart's key is shared")
		cluster.apply(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: DownloadRequest
metadata: {name: only-log, namespace: %s}
spec: {target: {kind: BackupLog, name: only}}
`, ns))
		cluster.waitPhase(m, "downloadrequest", ns, "only-log", "Processed")
		signed, err := url.Parse(cluster.kubectlOK("get", "downloadrequest", "only-log", "-n", ns, "-o", "jsonpath={.status.downloadURL}"))
		Expect(err).NotTo(HaveOccurred())
		Expect(signed.Host).To(Equal(m.downloadAddr), "the leader signed it")
		signed.Host = standby.downloadAddr
		Expect(httpStatus(signed.String())).To(Equal(http.StatusOK))

		m.stop()
		cluster.apply(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: after-failover, namespace: %s}
spec: {includedNamespaces: [%s]}
`, ns, app))
		cluster.waitPhase(standby, "backup", ns, "after-failover", "Completed")
	})
})

// Helm 4 is what users run now; charts must also work with Helm 3, which creates and patches a
// release's objects client-side where Helm 4 applies them server-side. The storage locations
// and schedules of the values are the manager's to apply with either (docs/install.md); Helm 3
// creating the CRDs and Cairn's own kinds in one install raced the API server's discovery of
// the new CRDs when the chart made them in a post-install hook. A control plane of the spec's
// own, which has never seen Cairn, so that Helm 3 creates the CRDs.
var _ = Describe("The Helm chart with Helm 3", func() {
	It("installs (a server dry run, then for real), backs up, upgrades the locations and schedules, and uninstalls keeping the CRDs and the backups", func() {
		cluster := startHelmCluster()
		cluster.helm = helm3Binary()
		Expect(cluster.helmOK("version", "--short")).To(HavePrefix("v3."))
		const ns, release, app = "cairn-helm3", "cairn-helm3", "helm3-app"
		storage := filepath.Join(GinkgoT().TempDir(), "backups")
		values := []string{
			"--set", "storage.filesystem.mountPath=" + storage,
			"--set", "schedules[0].name=nightly",
			"--set", "schedules[0].schedule=0 2 * * *",
			"--set", "schedules[0].template.includedNamespaces[0]=" + app,
			// The location by name: the upgrade makes it no longer the default.
			"--set", "schedules[0].template.storageLocation=default",
		}
		cluster.kubectlOK("create", "namespace", ns)
		cluster.kubectlOK("create", "namespace", app)
		cluster.kubectlOK("create", "configmap", "settings", "-n", app, "--from-literal=color=red")

		By("installing with --dry-run=server, then for real")
		out := cluster.helmOK(append([]string{"install", release, chartDir(), "-n", ns, "--dry-run=server"}, values...)...)
		Expect(out).To(ContainSubstring("kind: CustomResourceDefinition"))
		_, _, err := cluster.kubectl("get", "crd", "backups.cairn.dev")
		Expect(err).To(HaveOccurred(), "a dry run creates nothing")
		out = cluster.helmOK(append([]string{"install", release, chartDir(), "-n", ns}, values...)...)
		Expect(out).To(ContainSubstring("STATUS: deployed"))
		for _, crd := range []string{"backups", "restores", "schedules", "backupstoragelocations", "downloadrequests"} {
			Expect(cluster.kubectlOK("get", "crd", crd+".cairn.dev", "-o", "jsonpath={.metadata.annotations.helm\\.sh/resource-policy}")).To(Equal("keep"))
		}

		m := cluster.runManagerAsChart(ns, release, release)
		DeferCleanup(m.stop)
		cluster.waitExists(ns, "backupstoragelocation/default", "schedule/nightly")
		Expect(cluster.kubectlOK("get", "backupstoragelocation", "default", "-n", ns, "-o", "jsonpath={.spec.config.path} {.spec.default}")).To(Equal(storage + " true"))
		Expect(cluster.kubectlOK("get", "schedule", "nightly", "-n", ns, "-o", "jsonpath={.spec.schedule} {.spec.paused}")).To(Equal("0 2 * * * false"))

		By("backing up with the RBAC the chart grants")
		cluster.apply(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: before-upgrade, namespace: %s}
spec: {includedNamespaces: [%s]}
`, ns, app))
		cluster.waitPhase(m, "backup", ns, "before-upgrade", "Completed")
		Expect(filepath.Join(storage, "backups", ns, "before-upgrade", "cairn-backup.json")).To(BeAnExistingFile())

		By("upgrading: the manager updates the location and the schedule in place with the new values, the signing key stays")
		key := cluster.signingKey(ns, release, "signing-key")
		uids := cluster.uids(ns, "backupstoragelocation/default", "schedule/nightly")
		cluster.helmOK(append([]string{"upgrade", release, chartDir(), "-n", ns, "--set", "concurrentBackups=2",
			"--set", "storage.filesystem.default=false", "--set", "schedules[0].paused=true"}, values...)...)
		Expect(cluster.deploymentArgs(ns, release)).To(ContainElement("--concurrent-backups=2"))
		Expect(cluster.signingKey(ns, release, "signing-key")).To(Equal(key), "an upgrade keeps the signing key")
		cluster.kubectlOK("wait", "schedule/nightly", "-n", ns, "--for=jsonpath={.status.phase}=Paused", "--timeout=30s")
		cluster.kubectlOK("wait", "backupstoragelocation/default", "-n", ns, "--for=jsonpath={.spec.default}=false", "--timeout=30s")
		cluster.kubectlOK("wait", "backupstoragelocation/default", "-n", ns, "--for=jsonpath={.status.phase}=Available", "--timeout=30s")
		Expect(cluster.kubectlOK("get", "backupstoragelocation", "default", "-n", ns, "-o", "jsonpath={.spec.config.path} {.spec.default}")).To(Equal(storage + " false"))
		Expect(cluster.kubectlOK("get", "schedule", "nightly", "-n", ns, "-o", "jsonpath={.spec.schedule} {.spec.paused}")).To(Equal("0 2 * * * true"))
		Expect(cluster.uids(ns, "backupstoragelocation/default", "schedule/nightly")).To(Equal(uids), "the manager updates them in place, as docs/install.md says")

		By("uninstalling: the CRDs, the backup, its data, the location and the schedule stay")
		m.stop()
		cluster.helmOK("uninstall", release, "-n", ns, "--wait")
		_, _, err = cluster.kubectl("get", "deployment", release, "-n", ns)
		Expect(err).To(HaveOccurred(), "the release's objects are gone")
		for _, crd := range []string{"backups", "restores", "schedules", "backupstoragelocations", "downloadrequests"} {
			cluster.kubectlOK("get", "crd", crd+".cairn.dev")
		}
		Expect(cluster.kubectlOK("get", "backup", "before-upgrade", "-n", ns, "-o", "jsonpath={.status.phase}")).To(Equal("Completed"))
		Expect(filepath.Join(storage, "backups", ns, "before-upgrade", "cairn-backup.json")).To(BeAnExistingFile())
		cluster.kubectlOK("get", "backupstoragelocation", "default", "-n", ns)
		cluster.kubectlOK("get", "schedule", "nightly", "-n", ns)
		cluster.kubectlOK("get", "pvc", release+"-storage", "-n", ns)
	})
})

// helmCluster is a control plane of the helm specs' own, with an administrator's kubeconfig.
type helmCluster struct {
	helm       string // the helm binary the spec runs
	env        *envtest.Environment
	kubeconfig string
	helmHome   string
}

func startHelmCluster() *helmCluster {
	GinkgoHelper()
	env, err := testenv.New()
	Expect(err).NotTo(HaveOccurred())
	// Only the CSI snapshot CRDs, as a cluster with a CSI driver has: Cairn's come with the chart.
	env.CRDDirectoryPaths = []string{testenv.SnapshotCRDDir()}
	_, err = env.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	cm, err := testenv.StartControllerManager(GinkgoT(), env)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(cm.Stop)
	admin, err := env.AddUser(envtest.User{Name: "helm-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	data, err := admin.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	dir := GinkgoT().TempDir()
	c := &helmCluster{helm: helmBinary(), env: env, kubeconfig: filepath.Join(dir, "kubeconfig"), helmHome: filepath.Join(dir, "helm")}
	Expect(os.WriteFile(c.kubeconfig, data, 0o600)).To(Succeed())
	return c
}

// helmBinary is $HELM (the Makefile sets it), else the Makefile's pinned helm in bin/.
func helmBinary() string {
	if path := os.Getenv("HELM"); path != "" {
		return path
	}
	return filepath.Join(testenv.RepoRoot(), "bin", "helm-v4.3.1")
}

// helm3Binary is $HELM3 (the Makefile sets it), else the Makefile's pinned Helm 3 in bin/.
func helm3Binary() string {
	if path := os.Getenv("HELM3"); path != "" {
		return path
	}
	return filepath.Join(testenv.RepoRoot(), "bin", "helm-v3.22.0")
}

func chartDir() string { return filepath.Join(testenv.RepoRoot(), "charts", "cairn") }

// helmOK runs helm against the cluster, with no user configuration, and fails the spec if it fails.
func (c *helmCluster) helmOK(args ...string) string {
	GinkgoHelper()
	Expect(c.helm).To(BeAnExistingFile(), "run 'make helm helm3' first")
	cmd := exec.Command(c.helm, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+c.helmHome, "HELM_CACHE_HOME="+c.helmHome, "HELM_DATA_HOME="+c.helmHome)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	fmt.Fprintf(GinkgoWriter, "$ helm %s\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	Expect(err).NotTo(HaveOccurred(), "helm %v: %s", args, stderr.String())
	return stdout.String()
}

func (c *helmCluster) kubectl(args ...string) (string, string, error) {
	return kubectlWith(c.kubeconfig, args...)
}

func (c *helmCluster) kubectlOK(args ...string) string {
	GinkgoHelper()
	stdout, stderr, err := c.kubectl(args...)
	Expect(err).NotTo(HaveOccurred(), "kubectl %v: %s", args, stderr)
	return stdout
}

func (c *helmCluster) apply(manifest string) {
	GinkgoHelper()
	cmd := exec.Command(kubectlBinary(), "--kubeconfig", c.kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "kubectl apply: %s\n%s", out, manifest)
}

// waitPhase waits with kubectl for the phase of a backup or restore; on failure it shows the
// object and m's log.
func (c *helmCluster) waitPhase(m *managerProcess, kind, namespace, name, phase string) {
	GinkgoHelper()
	_, stderr, err := c.kubectl("wait", kind+"/"+name, "-n", namespace, "--for=jsonpath={.status.phase}="+phase, "--timeout=90s")
	if err != nil {
		yaml, _, _ := c.kubectl("get", kind, name, "-n", namespace, "-o", "yaml")
		Fail(fmt.Sprintf("%s %s/%s did not reach %s: %s\n%s\nmanager log:\n%s", kind, namespace, name, phase, stderr, yaml, m.log.String()))
	}
}

// uids are the UIDs of the objects (kind/name) in namespace.
func (c *helmCluster) uids(namespace string, objects ...string) []string {
	GinkgoHelper()
	var uids []string
	for _, obj := range objects {
		uids = append(uids, c.kubectlOK("get", obj, "-n", namespace, "-o", "jsonpath={.metadata.uid}"))
	}
	return uids
}

// waitExists waits until every one of objects exists in namespace, as docs/install.md does.
func (c *helmCluster) waitExists(namespace string, objects ...string) {
	GinkgoHelper()
	for _, obj := range objects {
		c.kubectlOK("wait", obj, "-n", namespace, "--for=create", "--timeout=30s")
	}
}

// deploymentArgs are the arguments of the chart's manager container.
func (c *helmCluster) deploymentArgs(namespace, name string) []string {
	GinkgoHelper()
	var args []string
	out := c.kubectlOK("get", "deployment", name, "-n", namespace, "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	Expect(json.Unmarshal([]byte(out), &args)).To(Succeed())
	return args
}

// runManagerAsChart runs bin/manager as the chart's pod would: with the Deployment's
// arguments (but listening on 127.0.0.1 (the repository server on a free port), unpacking restores into a temporary directory
// instead of the pod's /scratch, and reading the download signing key from a file written from
// the Deployment's Secret, as the kubelet mounts it), authenticated as the chart's
// ServiceAccount.
func (c *helmCluster) runManagerAsChart(namespace, deployment, serviceAccount string) *managerProcess {
	GinkgoHelper()
	var args []string
	for _, arg := range c.deploymentArgs(namespace, deployment) {
		switch {
		case strings.HasPrefix(arg, "--metrics-bind-address"), strings.HasPrefix(arg, "--health-probe-bind-address"),
			strings.HasPrefix(arg, "--download-bind-address"):
			continue // startManager's loopback addresses
		case strings.HasPrefix(arg, "--repository-server-bind-address="):
			arg = "--repository-server-bind-address=127.0.0.1:0" // the node agents' server, on loopback
		case strings.HasPrefix(arg, "--download-signing-key-file="):
			key := filepath.Base(strings.TrimPrefix(arg, "--download-signing-key-file="))
			arg = "--download-signing-key-file=" + c.mountSigningKey(namespace, deployment, key)
		}
		args = append(args, arg)
	}
	Expect(args).To(ContainElements("--leader-elect", "--namespace="+namespace))
	args = append(args, "--restore-scratch-dir="+GinkgoT().TempDir(), "--kubeconfig="+c.serviceAccountKubeconfig(namespace, serviceAccount))
	return startManager(args...)
}

// signingKey is the download signing key in the Secret that the Deployment mounts.
func (c *helmCluster) signingKey(namespace, deployment, key string) []byte {
	GinkgoHelper()
	secret := c.kubectlOK("get", "deployment", deployment, "-n", namespace, "-o",
		`jsonpath={.spec.template.spec.volumes[?(@.name=="download-signing-key")].secret.secretName}`)
	Expect(secret).NotTo(BeEmpty(), "the Deployment mounts no signing key")
	// Not through kubectl(), which would write the key into the test's log.
	out, err := exec.Command(kubectlBinary(), "--kubeconfig", c.kubeconfig, "get", "secret", secret, "-n", namespace,
		"-o", "jsonpath={.data."+key+"}").Output()
	Expect(err).NotTo(HaveOccurred())
	data, err := base64.StdEncoding.DecodeString(string(out))
	Expect(err).NotTo(HaveOccurred())
	Expect(len(data)).To(BeNumerically(">=", 32), "Secret %s holds %d bytes under %s", secret, len(data), key)
	return data
}

// mountSigningKey writes the Deployment's download signing key into a file of its own, as the
// kubelet mounts the Secret, and returns its path.
func (c *helmCluster) mountSigningKey(namespace, deployment, key string) string {
	GinkgoHelper()
	path := filepath.Join(GinkgoT().TempDir(), key)
	Expect(os.WriteFile(path, c.signingKey(namespace, deployment, key), 0o400)).To(Succeed())
	return path
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the ServiceAccount with a
// token from the TokenRequest API, as the kubelet gives a pod.
func (c *helmCluster) serviceAccountKubeconfig(namespace, serviceAccount string) string {
	GinkgoHelper()
	// Not through kubectl(), which would write the token into the test's log.
	out, err := exec.Command(kubectlBinary(), "--kubeconfig", c.kubeconfig, "create", "token", serviceAccount, "-n", namespace, "--duration=1h").Output()
	Expect(err).NotTo(HaveOccurred())
	token := strings.TrimSpace(string(out))
	cfg, err := clientcmd.LoadFromFile(c.kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	for name := range cfg.AuthInfos {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	}
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(clientcmd.WriteToFile(*cfg, path)).To(Succeed())
	return path
}
