package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
)

// A download URL serves only its requester, and a download is verified as it streams
// (DESIGN.md section 21): the lead of a team downloads a backup that holds the namespace's
// Secrets; a junior member, who may list and read the DownloadRequests of the namespace, reads
// the lead's URL and fetches it with curl and their own token, and is refused, on a filesystem
// and an S3 location; the lead's `cairn backup download` works. An archive changed by one byte
// in storage is cut short, for the CLI and for curl.
var _ = Describe("Downloads: a URL serves only its requester, verified as it streams", Ordered, func() {
	const ns = "e2e-dl-team"
	var lead, junior string // kubeconfigs of the tenants

	BeforeAll(func() {
		kubectlOK("create", "namespace", ns)
		DeferCleanup(func() { kubectlOK("delete", "namespace", ns, "--wait=false") })
		createCairnEditorRole()
		lead = tenant(ns, "lead", "e2e-namespace-admin")
		junior = tenant(ns, "junior")
		kubectlOK("create", "secret", "generic", "db-password", "-n", ns, "--from-literal=password=s3cr3t")
		// Random bytes do not compress: an archive well over the download server's 64 KiB reads.
		noise := make([]byte, 400<<10)
		_, _ = rand.Read(noise)
		file := filepath.Join(GinkgoT().TempDir(), "noise")
		Expect(os.WriteFile(file, []byte(base64.StdEncoding.EncodeToString(noise)), 0o600)).To(Succeed())
		kubectlOK("create", "configmap", "noise", "-n", ns, "--from-file=noise="+file)
	})

	for _, kind := range []string{"filesystem", "s3"} {
		It("refuses the lead's URL to the junior and serves the lead's own download, on a "+kind+" location", func() {
			location, name := "default", "lead-fs"
			if kind == "s3" {
				location, name = "e2e-dl-s3", "lead-s3"
				s3Location(location, "e2e-dl")
			}
			applyAs(lead, backupManifest(ns, name, "storageLocation: "+location))
			waitBackupPhase(ns, name, "Completed")

			By("the lead asks for the contents; the junior reads the URL from the DownloadRequest")
			applyAs(lead, fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: DownloadRequest\nmetadata: {name: %s-contents, namespace: %s}\nspec: {target: {kind: BackupContents, name: %s}}\n", name, ns, name))
			var u string
			Eventually(func() string {
				u, _, _ = kubectlWith(junior, "get", "downloadrequest", name+"-contents", "-n", ns, "-o", "jsonpath={.status.downloadURL}")
				return u
			}).WithTimeout(30 * time.Second).ShouldNot(BeEmpty())
			Expect(u).NotTo(ContainSubstring("X-Amz-"), "no presigned URL of the bucket")

			By("the junior's curl, with their token or none, is refused")
			for _, token := range []string{tokenOf(junior), ""} {
				code, body := curl(u, token, "")
				Expect(code).To(Equal("403"), body)
				Expect(body).To(ContainSubstring("serves only system:serviceaccount:" + ns + ":lead"))
			}

			By("the lead's own curl and cairn backup download get the archive, Secrets included")
			out := filepath.Join(GinkgoT().TempDir(), name+".tar.gz")
			code, body := curl(u, tokenOf(lead), out)
			Expect(code).To(Equal("200"), body)
			got := cairnWith(lead, "backup", "download", name, "-n", ns, "-o", filepath.Join(GinkgoT().TempDir(), "cli.tar.gz"))
			Expect(got.code).To(Equal(0), got.stderr)
			Expect(tarEntries(out)).To(ContainElement("resources/secrets/namespaces/" + ns + "/db-password.json"))
		})
	}

	It("cuts the download of an archive changed by one byte in storage, before its last bytes", func() {
		applyAs(lead, backupManifest(ns, "altered", "storageLocation: default"))
		waitBackupPhase(ns, "altered", "Completed")
		archive := filepath.Join(storageDir, "backups", ns, "altered", "altered.tar.gz")
		data, err := os.ReadFile(archive)
		Expect(err).NotTo(HaveOccurred())
		Expect(len(data)).To(BeNumerically(">", 256<<10))
		data[len(data)-100] ^= 1
		Expect(os.WriteFile(archive, data, 0o600)).To(Succeed())

		By("cairn backup download fails, saving nothing")
		saved := filepath.Join(GinkgoT().TempDir(), "altered.tar.gz")
		got := cairnWith(lead, "backup", "download", "altered", "-n", ns, "-o", saved)
		Expect(got.code).NotTo(Equal(0))
		Expect(got.stderr).To(ContainSubstring("the download ended before its end"))
		Expect(saved).NotTo(BeAnExistingFile())

		By("curl sees a cut response: fewer bytes than the archive, and an error")
		applyAs(lead, fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: DownloadRequest\nmetadata: {name: altered-contents, namespace: %s}\nspec: {target: {kind: BackupContents, name: altered}}\n", ns))
		var u string
		Eventually(func() string {
			u, _, _ = kubectlWith(lead, "get", "downloadrequest", "altered-contents", "-n", ns, "-o", "jsonpath={.status.downloadURL}")
			return u
		}).WithTimeout(30 * time.Second).ShouldNot(BeEmpty())
		out := filepath.Join(GinkgoT().TempDir(), "curl.tar.gz")
		cmd := exec.Command("curl", "-sS", "-o", out, "-H", "Authorization: Bearer "+tokenOf(lead), u)
		stderr, err := cmd.CombinedOutput()
		Expect(err).To(HaveOccurred(), "curl took the cut response for a whole one")
		Expect(string(stderr)).To(ContainSubstring("transfer closed"))
		info, err := os.Stat(out)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Size()).To(BeNumerically("<", len(data)))
		Expect(manager.log.String()).To(ContainSubstring("does not match the digest its backup's commit marker records"))
	})
})

// tokenOf is the bearer token of a tenant's kubeconfig.
func tokenOf(config string) string {
	GinkgoHelper()
	cfg, err := clientcmd.LoadFromFile(config)
	Expect(err).NotTo(HaveOccurred())
	return cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token
}

// curl fetches u with the real curl, sending token ("": none) as a bearer token, into out
// ("": the body is returned), and returns the HTTP status code and the body.
func curl(u, token, out string) (code, body string) {
	GinkgoHelper()
	file := out
	if file == "" {
		file = filepath.Join(GinkgoT().TempDir(), "body")
	}
	args := []string{"-sS", "-o", file, "-w", "%{http_code}"}
	if token != "" {
		args = append(args, "-H", "Authorization: Bearer "+token)
	}
	stdout, err := exec.Command("curl", append(args, u)...).Output()
	Expect(err).NotTo(HaveOccurred())
	b, _ := os.ReadFile(file)
	if out != "" {
		b = []byte(strconv.Itoa(len(b)) + " bytes")
	}
	return strings.TrimSpace(string(stdout)), string(b)
}
