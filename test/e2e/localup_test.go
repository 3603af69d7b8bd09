package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cairn-backup/cairn/internal/testenv"
)

// The local control plane of `make run-local`, run by its script with its own state directory
// and free ports so that it does not touch a developer's bin/local.
var _ = Describe("hack/local-up.sh", Ordered, func() {
	var dir, kc string
	var envVars []string

	localUp := func(args ...string) string {
		GinkgoHelper()
		cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "local-up.sh"), args...)
		cmd.Env = append(os.Environ(), envVars...)
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(GinkgoWriter, "$ local-up.sh %v\n%s", args, out)
		Expect(err).NotTo(HaveOccurred(), string(out))
		return string(out)
	}
	pid := func(name string) int {
		GinkgoHelper()
		data, err := os.ReadFile(filepath.Join(dir, name+".pid"))
		Expect(err).NotTo(HaveOccurred())
		p, err := strconv.Atoi(strings.TrimSpace(string(data)))
		Expect(err).NotTo(HaveOccurred())
		return p
	}
	alive := func(p int) bool { return syscall.Kill(p, 0) == nil }

	BeforeAll(func() {
		dir = filepath.Join(GinkgoT().TempDir(), "local")
		kc = filepath.Join(dir, "kubeconfig")
		envVars = []string{
			"LOCAL_DIR=" + dir,
			fmt.Sprintf("LOCAL_API_PORT=%d", freePort()),
			fmt.Sprintf("LOCAL_ETCD_PORT=%d", freePort()),
			fmt.Sprintf("LOCAL_ETCD_PEER_PORT=%d", freePort()),
			fmt.Sprintf("LOCAL_CONTROLLER_MANAGER_PORT=%d", freePort()),
		}
		DeferCleanup(func() {
			cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "local-up.sh"), "down")
			cmd.Env = append(os.Environ(), envVars...)
			_ = cmd.Run()
		})
	})

	It("starts a control plane with the CRDs, the namespace and a default filesystem location", func() {
		out := localUp("up")
		Expect(out).To(ContainSubstring("export KUBECONFIG=" + kc))
		path, _, err := kubectlWith(kc, "get", "bsl", "default", "-n", "cairn-system", "-o", "jsonpath={.spec.provider} {.spec.default} {.spec.config.path}")
		Expect(err).NotTo(HaveOccurred())
		Expect(path).To(Equal("filesystem true " + filepath.Join(dir, "storage")))
		Expect(filepath.Join(dir, "storage")).To(BeADirectory())
	})

	It("records who creates each object, with the chart's admission policies", func() {
		// Another user than the one the manager runs as (the kubeconfig's cairn-admin).
		requester, stderr, err := kubectlWith(kc, "create", "--dry-run=server", "--as", "alice", "--as-group", "system:masters",
			"-f", "config/samples/cairn_v1alpha1_backup.yaml", "-o", `jsonpath={.metadata.annotations.cairn\.dev/requester}`)
		Expect(err).NotTo(HaveOccurred(), stderr)
		Expect(requester).To(Equal("alice"))
	})

	It("accepts the samples", func() {
		_, stderr, err := kubectlWith(kc, "apply", "-f", "config/samples/")
		Expect(err).NotTo(HaveOccurred(), stderr)
	})

	It("finalizes a deleted namespace: kube-controller-manager runs", func() {
		_, stderr, err := kubectlWith(kc, "create", "namespace", "local-deleted")
		Expect(err).NotTo(HaveOccurred(), stderr)
		_, stderr, err = kubectlWith(kc, "delete", "namespace", "local-deleted", "--wait", "--timeout=60s")
		Expect(err).NotTo(HaveOccurred(), stderr)
		_, stderr, err = kubectlWith(kc, "get", "namespace", "local-deleted")
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring(`namespaces "local-deleted" not found`))
	})

	It("is idempotent: a second up keeps the same processes", func() {
		etcd, apiserver, controllerManager := pid("etcd"), pid("kube-apiserver"), pid("kube-controller-manager")
		localUp("up")
		Expect(pid("etcd")).To(Equal(etcd))
		Expect(pid("kube-apiserver")).To(Equal(apiserver))
		Expect(pid("kube-controller-manager")).To(Equal(controllerManager))
	})

	It("stops exactly the processes it started", func() {
		etcd, apiserver, controllerManager := pid("etcd"), pid("kube-apiserver"), pid("kube-controller-manager")
		localUp("down")
		Expect(alive(etcd)).To(BeFalse())
		Expect(alive(apiserver)).To(BeFalse())
		Expect(alive(controllerManager)).To(BeFalse())
		Expect(filepath.Join(dir, "etcd.pid")).NotTo(BeAnExistingFile())
		// The test's own control plane is untouched.
		kubectlOK("get", "namespaces")
	})

	It("keeps its state across down and up", func() {
		localUp("up")
		out, _, err := kubectlWith(kc, "get", "backup", "nightly-example", "-n", "cairn-system", "-o", "name")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(out)).To(Equal("backup.cairn.dev/nightly-example"))
		localUp("down")
	})
})
