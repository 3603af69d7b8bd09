package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// secondCluster is another control plane (kube-apiserver, etcd and kube-controller-manager)
// with its own Cairn manager: the cluster a disaster-recovery plan restores into.
type secondCluster struct {
	kubeconfig string
	manager    *managerProcess
}

// startSecondCluster starts a control plane beside the suite's, with the cairn-system
// namespace, and a manager of its own; both stop when the spec ends.
func startSecondCluster() *secondCluster {
	GinkgoHelper()
	env, err := testenv.New()
	Expect(err).NotTo(HaveOccurred())
	_, err = env.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) })
	kcmB, err := testenv.StartControllerManager(GinkgoT(), env)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(kcmB.Stop)
	admin, err := env.AddUser(envtest.User{Name: "e2e-admin-b", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	data, err := admin.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	c := &secondCluster{kubeconfig: filepath.Join(GinkgoT().TempDir(), "kubeconfig-b")}
	Expect(os.WriteFile(c.kubeconfig, data, 0o600)).To(Succeed())
	Expect(testenv.InstallAdmissionPolicies(context.Background(), admin.Config(), admin.Config())).To(Succeed())
	c.kubectlOK("create", "namespace", "cairn-system")
	// The later --kubeconfig wins: this manager reconciles the second cluster only.
	c.manager = startManager(append(suiteManagerFlags, "--kubeconfig", c.kubeconfig)...)
	DeferCleanup(c.manager.stop)
	return c
}

func (c *secondCluster) kubectlOK(args ...string) string {
	GinkgoHelper()
	stdout, stderr, err := kubectlWith(c.kubeconfig, args...)
	Expect(err).NotTo(HaveOccurred(), "kubectl (second cluster) %v: %s", args, stderr)
	return stdout
}

// apply applies a manifest to the second cluster.
func (c *secondCluster) apply(manifest string) {
	GinkgoHelper()
	file := filepath.Join(GinkgoT().TempDir(), "manifest.yaml")
	Expect(os.WriteFile(file, []byte(manifest), 0o600)).To(Succeed())
	c.kubectlOK("apply", "-f", file)
}

// wait waits with kubectl for a condition of an object of the second cluster; on failure it
// shows the object and the second manager's log.
func (c *secondCluster) wait(object, namespace, condition, timeout string) {
	GinkgoHelper()
	// An object the second cluster's reconcilers make (a synced backup) may not exist yet:
	// kubectl wait for a condition fails at once on a missing object.
	_, stderr, err := kubectlWith(c.kubeconfig, "wait", object, "-n", namespace, "--for=create", "--timeout="+timeout)
	if err == nil {
		_, stderr, err = kubectlWith(c.kubeconfig, "wait", object, "-n", namespace, "--for="+condition, "--timeout="+timeout)
	}
	if err != nil {
		yaml, _, _ := kubectlWith(c.kubeconfig, "get", object, "-n", namespace, "-o", "yaml")
		Fail(fmt.Sprintf("%s in the second cluster: not %s: %s\n%s\nits manager's log:\n%s", object, condition, stderr, yaml, c.manager.log.String()))
	}
}

// Disaster recovery as docs/disaster-recovery.md tells it: cluster A backs up into a bucket;
// cluster B, whose location names the same bucket ReadOnly, sees the backup and restores it.
var _ = Describe("Disaster recovery with two clusters and one bucket", func() {
	It("shows cluster A's backup in cluster B, restores it there, and marks it DataAvailable=False there once A deletes it", func() {
		const ns, backupName, location, bucket = "e2e-dr-app", "e2e-dr", "e2e-dr", "e2e-dr"
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")
			_, _, _ = kubectl("delete", "backup", backupName, "-n", "cairn-system", "--wait=false", "--ignore-not-found")
		})
		server := s3Location(location, bucket) // cluster A's location: ReadWrite
		b := startSecondCluster()

		By("backing up a namespace in cluster A")
		kubectlOK("create", "namespace", ns)
		kubectlOK("create", "configmap", "settings", "-n", ns, "--from-literal=color=blue")
		kubectlOK("create", "secret", "generic", "creds", "-n", ns, "--from-literal=password=s3cret")
		kubectlOK("create", "deployment", "web", "-n", ns, "--image=nginx:1.27", "--replicas=2")
		stderr, err := kubectlStdin(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: %s, namespace: cairn-system}
spec:
  includedNamespaces: [%s]
  storageLocation: %s
`, backupName, ns, location), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitBackupPhase("cairn-system", backupName, "Completed")

		By("syncing the bucket into cluster B through a ReadOnly location")
		credentials := filepath.Join(GinkgoT().TempDir(), "cloud")
		Expect(os.WriteFile(credentials, []byte(server.CredentialsFile()), 0o600)).To(Succeed())
		b.kubectlOK("create", "secret", "generic", location, "-n", "cairn-system", "--from-file=cloud="+credentials)
		b.apply(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata: {name: %s, namespace: cairn-system}
spec:
  provider: s3
  accessMode: ReadOnly
  backupSyncPeriod: 2s
  objectStorage: {bucket: %s, prefix: cluster}
  config: {endpoint: %q, region: us-east-1, forcePathStyle: "true"}
  credential: {name: %s, key: cloud}
`, location, bucket, server.Endpoint(), location))
		b.wait("backup/"+backupName, "cairn-system", "jsonpath={.status.phase}=Completed", "60s")
		Expect(b.kubectlOK("get", "backup", backupName, "-n", "cairn-system", "-o",
			`jsonpath={.metadata.annotations.cairn\.dev/synced-from} {.status.storageLocation} {.spec.includedNamespaces[0]}`)).
			To(Equal(location + " " + location + " " + ns))
		uidA := kubectlOK("get", "backup", backupName, "-n", "cairn-system", "-o", "jsonpath={.metadata.uid}")
		Expect(b.kubectlOK("get", "backup", backupName, "-n", "cairn-system", "-o", "jsonpath={.status.originUID}")).To(Equal(uidA))

		By("restoring it in cluster B")
		b.apply(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata: {name: e2e-dr, namespace: cairn-system}
spec:
  backupName: %s
`, backupName))
		b.wait("restore/e2e-dr", "cairn-system", "jsonpath={.status.phase}=Completed", "120s")
		get := func(kind, name, jsonpath string) string {
			return b.kubectlOK("get", kind, name, "-n", ns, "-o", "jsonpath="+jsonpath)
		}
		Expect(get("configmap", "settings", "{.data}")).To(MatchJSON(`{"color":"blue"}`))
		Expect(get("secret", "creds", "{.data}")).To(MatchJSON(`{"password":"czNjcmV0"}`)) // base64 of s3cret
		Expect(get("deployment", "web", "{.spec.replicas} {.spec.template.spec.containers[0].image}")).To(Equal("2 nginx:1.27"))

		By("deleting the backup in cluster A, which deletes its data")
		kubectlOK("delete", "backup", backupName, "-n", "cairn-system", "--timeout=60s")
		b.wait("backup/"+backupName, "cairn-system", "condition="+cairnv1.BackupConditionDataAvailable+"=false", "60s")
		Expect(b.kubectlOK("get", "backup", backupName, "-n", "cairn-system", "-o",
			`jsonpath={.status.conditions[?(@.type=="DataAvailable")].reason}`)).To(Equal(cairnv1.ReasonNotFoundInStorage))

		By("deleting it in cluster B too: nothing left to delete, and a ReadOnly location is no obstacle")
		b.kubectlOK("delete", "backup", backupName, "-n", "cairn-system", "--timeout=60s")
	})
})
