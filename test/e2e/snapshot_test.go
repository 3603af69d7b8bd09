package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cairn-backup/cairn/internal/testenv"
)

// A backup with a volume snapshot, watched with `kubectl get -w` while a simulated CSI
// snapshotter (in this test process) takes a couple of seconds to make the snapshot ready.
var _ = Describe("A backup with a CSI volume snapshot", func() {
	It("goes InProgress → WaitingForPluginOperations → Completed, as kubectl watch shows", func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c, err := client.New(env.Config, client.Options{Scheme: testenv.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		go testenv.SimulateSnapshotter(ctx, c, 2*time.Second)

		namespaceWithCSIVolume("snapshots")

		watch := exec.Command(kubectlBinary(), "--kubeconfig", kubeconfig, "get", "backup", "-n", "cairn-system", "-w", "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase", "--field-selector", "metadata.name=with-snapshot")
		out, err := watch.StdoutPipe()
		Expect(err).NotTo(HaveOccurred())
		Expect(watch.Start()).To(Succeed())
		defer func() { _ = watch.Process.Kill(); _ = watch.Wait() }()
		phases := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				fmt.Fprintln(GinkgoWriter, "watch:", sc.Text())
				f := strings.Fields(sc.Text())
				if len(f) == 2 && f[0] == "with-snapshot" {
					phases <- f[1]
				}
			}
			close(phases)
		}()

		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: with-snapshot, namespace: cairn-system}
spec: {includedNamespaces: [snapshots]}
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)

		var seen []string
		Eventually(func() []string {
			for {
				select {
				case p, ok := <-phases:
					if !ok {
						return seen
					}
					if len(seen) == 0 || seen[len(seen)-1] != p {
						seen = append(seen, p)
					}
				default:
					return seen
				}
			}
		}).WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).Should(ContainElement("Completed"),
			func() string {
				y, _, _ := kubectl("get", "backup", "with-snapshot", "-n", "cairn-system", "-o", "yaml")
				return y
			})
		Expect(seen).To(ContainElements("InProgress", "WaitingForPluginOperations", "Completed"))
		Expect(indexOf(seen, "WaitingForPluginOperations")).To(BeNumerically("<", indexOf(seen, "Completed")))
		Expect(kubectlOK("get", "backup", "with-snapshot", "-n", "cairn-system", "-o", "jsonpath={.status.backupItemOperationsCompleted}")).To(Equal("1"))
	})
})

// namespaceWithCSIVolume creates a namespace holding a PVC "data" bound to a PersistentVolume of
// the test CSI driver (testenv.TestDriver), whose StorageClass and default VolumeSnapshotClass
// are named after the namespace, as is the volume: a backup of the namespace snapshots the
// volume. The cluster-scoped objects are removed when the spec ends, so that each spec's
// default snapshot class is the only one for the driver.
func namespaceWithCSIVolume(name string) {
	GinkgoHelper()
	stderr, err := kubectlStdin(fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: %[1]s}
provisioner: %[2]s
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata:
  name: %[1]s
  annotations: {snapshot.storage.kubernetes.io/is-default-class: "true"}
driver: %[2]s
deletionPolicy: Delete
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: %[1]s}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: %[1]s
  csi: {driver: %[2]s, volumeHandle: %[1]s}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: %[1]s}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: %[1]s
  volumeName: %[1]s
  resources: {requests: {storage: 1Gi}}
`, name, testenv.TestDriver), "apply", "-f", "-")
	Expect(err).NotTo(HaveOccurred(), stderr)
	DeferCleanup(func() {
		kubectlOK("delete", "volumesnapshotclass", name, "--ignore-not-found")
		kubectlOK("delete", "storageclass", name, "--ignore-not-found")
		kubectlOK("delete", "pv", name, "--ignore-not-found", "--wait=false")
	})
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}
