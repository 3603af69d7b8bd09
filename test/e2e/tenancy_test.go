package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/storage"
)

// Cairn never does for anyone what they could not do themselves (DESIGN.md section 15). Every
// spec here acts as a tenant would: a ServiceAccount of a team's namespace, bound only to what
// the spec says, with a token from `kubectl create token`, driving the real kubectl and the
// real cairn CLI. The admin kubeconfig only sets the scene and looks at the result.
var _ = Describe("Tenancy: Cairn acts with its requester's rights", Ordered, func() {
	const ns = "e2e-tenant-a"
	var lead, member, viewer string // kubeconfigs of the tenants

	BeforeAll(func() {
		kubectlOK("create", "namespace", ns)
		DeferCleanup(func() { kubectlOK("delete", "namespace", ns, "--wait=false") })
		createCairnEditorRole()
		// lead: the namespace's admin and Cairn's editor role.
		lead = tenant(ns, "lead", "e2e-namespace-admin")
		// member: Cairn's editor role only: may not create Roles or Pods, nor get Secrets.
		member = tenant(ns, "member")
		// viewer: reads the application's kinds but not Secrets nor RBAC, and Cairn's editor role.
		viewer = tenant(ns, "viewer", "e2e-namespace-viewer")
		for _, who := range []struct{ config, verb, resource, want string }{
			{member, "create", "roles", "no"}, {member, "create", "pods", "no"}, {member, "get", "secrets", "no"},
			{member, "create", "backups.cairn.dev", "yes"}, {viewer, "get", "secrets", "no"}, {viewer, "list", "configmaps", "yes"},
			{lead, "get", "secrets", "yes"}, {lead, "create", "roles", "yes"},
		} {
			out, _, _ := kubectlWith(who.config, "auth", "can-i", who.verb, who.resource, "-n", ns)
			answer, _, _ := strings.Cut(strings.TrimSpace(out), " ")
			Expect(answer).To(Equal(who.want), "%s may %s %s", who.config, who.verb, who.resource)
		}

		// The application, and access an administrator will revoke.
		kubectlOK("create", "configmap", "app-config", "-n", ns, "--from-literal=mode=prod")
		kubectlOK("create", "secret", "generic", "app-password", "-n", ns, "--from-literal=password=hunter2")
		kubectlOK("create", "serviceaccount", "dev", "-n", ns)
		kubectlOK("create", "role", "secret-reader", "-n", ns, "--verb=get,list", "--resource=secrets")
		kubectlOK("create", "rolebinding", "dev-reads-secrets", "-n", ns, "--role=secret-reader", "--serviceaccount="+ns+":dev")
		kubectlOK("create", "role", "app-role", "-n", ns, "--verb=get,list,create,update,delete", "--resource=configmaps")
		applyAdmin(fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: dev-token
  namespace: %s
  annotations: {kubernetes.io/service-account.name: dev}
type: kubernetes.io/service-account-token
`, ns))
		Eventually(func() string {
			return kubectlOK("get", "secret", "dev-token", "-n", ns, "-o", "jsonpath={.data.token}")
		}).WithTimeout(30 * time.Second).ShouldNot(BeEmpty())
		Expect(canI("get", "secrets", ns, "system:serviceaccount:"+ns+":dev")).To(Equal("yes"))

		By("the namespace's admin backs it up: every object, Secrets and RBAC included")
		applyAs(lead, backupManifest(ns, "before", ""))
		waitBackupPhase(ns, "before", "Completed")
		Expect(kubectlOK("get", "backup", "before", "-n", ns, "-o", `jsonpath={.metadata.annotations.cairn\.dev/requester}`)).
			To(Equal("system:serviceaccount:" + ns + ":lead"))
	})

	It("does not bring back access an administrator revoked: the restore writes as its requester, and the API server refuses", func() {
		By("an administrator revokes dev's access: deletes the Role and the legacy token, narrows app-role")
		kubectlOK("delete", "role", "secret-reader", "-n", ns)
		kubectlOK("delete", "secret", "dev-token", "-n", ns)
		Expect(applyAdminOut(fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: app-role, namespace: %s}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
`, ns))).To(Succeed())
		Expect(canI("get", "secrets", ns, "system:serviceaccount:"+ns+":dev")).To(Equal("no"))

		By("a member who may not create Roles nor Secrets restores the older backup, updating what exists")
		applyAs(member, fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata: {name: revoked-back, namespace: %s}
spec: {backupName: before, existingResourcePolicy: update}
`, ns))
		waitRestorePhase(ns, "revoked-back", "PartiallyFailed")

		By("nothing the member could not do was done")
		Expect(canI("get", "secrets", ns, "system:serviceaccount:"+ns+":dev")).To(Equal("no"))
		_, _, err := kubectl("get", "role", "secret-reader", "-n", ns)
		Expect(err).To(HaveOccurred(), "the revoked Role came back")
		_, _, err = kubectl("get", "secret", "dev-token", "-n", ns)
		Expect(err).To(HaveOccurred(), "the revoked token came back")
		Expect(kubectlOK("get", "role", "app-role", "-n", ns, "-o", "jsonpath={.rules[0].verbs}")).To(Equal(`["get"]`), "the narrowed Role was widened")

		By("each refusal is an error on its item, with the API server's reason")
		out := cairnWith(member, "restore", "describe", "revoked-back", "-n", ns)
		Expect(out.code).To(Equal(0), out.stderr)
		for _, item := range []string{"roles.rbac.authorization.k8s.io " + ns + "/secret-reader", "secrets " + ns + "/dev-token"} {
			Expect(out.stdout).To(ContainSubstring(item))
		}
		Expect(out.stdout).To(ContainSubstring("forbidden"))
	})

	It("does not hand out Secrets to a member who may not read them: left out of their backup, refused in a download", func() {
		By("a member who may read everything but Secrets backs up the namespace")
		applyAs(viewer, backupManifest(ns, "by-viewer", ""))
		waitBackupPhase(ns, "by-viewer", "Completed")
		Expect(kubectlOK("get", "backup", "by-viewer", "-n", ns, "-o", "jsonpath={.status.warnings}")).NotTo(Equal("0"))
		logs := cairnWith(viewer, "backup", "logs", "by-viewer", "-n", ns)
		Expect(logs.code).To(Equal(0), logs.stderr)
		Expect(logs.stdout).To(ContainSubstring("Left out secrets in namespace " + ns))

		By("their download holds no Secret")
		dir := GinkgoT().TempDir()
		got := cairnWith(viewer, "backup", "download", "by-viewer", "-n", ns, "-o", filepath.Join(dir, "mine.tar.gz"))
		Expect(got.code).To(Equal(0), got.stderr)
		entries := tarEntries(filepath.Join(dir, "mine.tar.gz"))
		Expect(entries).To(ContainElement("resources/configmaps/namespaces/" + ns + "/app-config.json"))
		for _, e := range entries {
			Expect(e).NotTo(HavePrefix("resources/secrets/"))
		}

		By("the admin's backup, which holds Secrets, is not handed to them")
		refused := cairnWith(viewer, "backup", "download", "before", "-n", ns, "-o", filepath.Join(dir, "theirs.tar.gz"))
		Expect(refused.code).NotTo(Equal(0))
		Expect(refused.stderr).To(ContainSubstring("secrets in namespace " + ns))
		Expect(filepath.Join(dir, "theirs.tar.gz")).NotTo(BeAnExistingFile())
		// Its log they may read: they may get the Backup.
		Expect(cairnWith(viewer, "backup", "logs", "before", "-n", ns).code).To(Equal(0))
		// The member with Cairn's role only may not get the contents either.
		Expect(cairnWith(member, "backup", "download", "before", "-n", ns, "-o", filepath.Join(dir, "m.tar.gz")).code).NotTo(Equal(0))
	})

	It("keeps a backup written into the bucket inside the namespace: no cluster-scoped object, no other namespace, no foreign snapshot", func() {
		const other = "e2e-tenant-b"
		kubectlOK("create", "namespace", other)
		DeferCleanup(func() { kubectlOK("delete", "namespace", other, "--wait=false") })

		By("someone who can write the bucket places a backup under the team's namespace")
		dir := GinkgoT().TempDir()
		writeCraftedBackup(dir, ns, "escape", []craftedEntry{
			// A cluster-scoped Namespace at a namespaced path.
			{path: "resources/namespaces/namespaces/" + ns + "/evil-ns.json",
				item: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"evil-ns","labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`},
			// Another team's Namespace, relabelled, at the team's own Namespace path.
			{path: "resources/namespaces/cluster/" + ns + ".json",
				item: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + other + `","labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`},
			// A ConfigMap whose body names another namespace.
			{path: "resources/configmaps/namespaces/" + ns + "/moved.json",
				item: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"moved","namespace":"` + other + `"},"data":{"k":"v"}}`},
			// A snapshot content pointing at someone else's snapshot handle.
			{path: "resources/volumesnapshotcontents.snapshot.storage.k8s.io/cluster/stolen.json",
				item: `{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotContent","metadata":{"name":"stolen"},"spec":{"driver":"hostpath.csi.k8s.io","deletionPolicy":"Retain","source":{"snapshotHandle":"team-b-secret-snapshot"},"volumeSnapshotRef":{"name":"stolen","namespace":"` + ns + `"}}}`},
			// And one honest item.
			{path: "resources/configmaps/namespaces/" + ns + "/honest.json",
				item: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"honest","namespace":"` + ns + `"},"data":{"k":"v"}}`},
		})
		bucketLocation("e2e-tenancy-bucket", dir)
		waitBackupPhase(ns, "escape", "Completed")

		By("a member restores it")
		applyAs(lead, fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata: {name: escape-back, namespace: %s}
spec: {backupName: escape, existingResourcePolicy: update}
`, ns))
		_, _, err := kubectl("wait", "restore/escape-back", "-n", ns, "--for=jsonpath={.status.completionTimestamp}", "--timeout=120s")
		Expect(err).NotTo(HaveOccurred(), manager.log.String())
		Expect(kubectlOK("get", "restore", "escape-back", "-n", ns, "-o", "jsonpath={.status.phase}")).To(BeElementOf("PartiallyFailed", "Failed"))

		By("nothing left the namespace")
		_, _, err = kubectl("get", "namespace", "evil-ns")
		Expect(err).To(HaveOccurred(), "a cluster-scoped Namespace was created")
		Expect(kubectlOK("get", "namespace", other, "-o", `jsonpath={.metadata.labels.pod-security\.kubernetes\.io/enforce}`)).To(BeEmpty())
		_, _, err = kubectl("get", "configmap", "moved", "-n", other)
		Expect(err).To(HaveOccurred(), "an item was created in another namespace")
		_, _, err = kubectl("get", "volumesnapshotcontent", "stolen")
		Expect(err).To(HaveOccurred(), "a VolumeSnapshotContent for a foreign handle was created")
		Expect(kubectlOK("get", "configmap", "honest", "-n", ns, "-o", "jsonpath={.data.k}")).To(Equal("v"))
	})

	It("refuses an archive entry larger than the cap before reading it, and stays up", func() {
		dir := GinkgoT().TempDir()
		const entrySize = 512 << 20
		// One backup whose marker matches its archive, so that only the cap stands between the
		// entry and the manager's memory; one whose checksum is wrong too, as in the report.
		for _, name := range []string{"bomb", "bomb-wrong"} {
			writeCraftedBackup(dir, ns, name, []craftedEntry{{path: "resources/configmaps/namespaces/" + ns + "/big.json", size: entrySize}})
		}
		markerPath := filepath.Join(dir, storage.Layout{}.Backup(ns, "bomb-wrong").Metadata)
		data, err := os.ReadFile(markerPath)
		Expect(err).NotTo(HaveOccurred())
		var marker storage.BackupMetadata
		Expect(json.Unmarshal(data, &marker)).To(Succeed())
		marker.ArchiveSHA256 = strings.Repeat("0", 64)
		data, err = json.Marshal(marker)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(markerPath, data, 0o600)).To(Succeed())
		bucketLocation("e2e-tenancy-bomb", dir)

		for _, tc := range []struct{ backup, reason string }{
			{"bomb", "big.json"},
			{"bomb-wrong", "archive checksum mismatch"},
		} {
			waitBackupPhase(ns, tc.backup, "Completed")
			applyAs(lead, fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata: {name: %s-back, namespace: %s}
spec: {backupName: %s}
`, tc.backup, ns, tc.backup))
			waitRestorePhase(ns, tc.backup+"-back", "Failed")
			Expect(kubectlOK("get", "restore", tc.backup+"-back", "-n", ns, "-o", "jsonpath={.status.failureReason}")).To(ContainSubstring(tc.reason))
		}
		_, _, err = kubectl("get", "configmap", "big", "-n", ns)
		Expect(err).To(HaveOccurred())
		Expect(httpStatus("http://" + manager.probeAddr + "/readyz")).To(Equal(200))
	})

	It("still serves a member with rights on everything: backup, delete, restore, download as themselves; a schedule's backups carry its requester", func() {
		By("the namespace's admin backs up, deletes the objects, restores and downloads")
		kubectlOK("create", "configmap", "lead-data", "-n", ns, "--from-literal=k=v")
		applyAs(lead, backupManifest(ns, "lead-full", ""))
		waitBackupPhase(ns, "lead-full", "Completed")
		_, stderr, err := kubectlWith(lead, "delete", "configmap", "lead-data", "app-config", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), stderr)
		applyAs(lead, fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata: {name: lead-back, namespace: %s}
spec: {backupName: lead-full, includedResources: [configmaps]}
`, ns))
		waitRestorePhase(ns, "lead-back", "Completed")
		Expect(kubectlOK("get", "configmap", "lead-data", "-n", ns, "-o", "jsonpath={.data.k}")).To(Equal("v"))
		got := cairnWith(lead, "backup", "download", "lead-full", "-n", ns, "-o", filepath.Join(GinkgoT().TempDir(), "lead.tar.gz"))
		Expect(got.code).To(Equal(0), got.stderr)

		By("a schedule made by the viewer makes backups that act for the viewer")
		applyAs(viewer, fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Schedule
metadata: {name: viewer-nightly, namespace: %s}
spec: {schedule: "@every 5s", template: {}}
`, ns))
		var name string
		Eventually(func() string {
			names := strings.Fields(kubectlOK("get", "backups", "-n", ns, "-l", "cairn.dev/schedule-name=viewer-nightly", "-o", "jsonpath={.items[*].metadata.name}"))
			if len(names) > 0 {
				name = names[0]
			}
			return name
		}).WithTimeout(60 * time.Second).ShouldNot(BeEmpty())
		_, stderr, err = kubectlWith(viewer, "patch", "schedule", "viewer-nightly", "-n", ns, "--type=merge", "-p", `{"spec":{"paused":true}}`)
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitBackupPhase(ns, name, "Completed")
		Expect(kubectlOK("get", "backup", name, "-n", ns, "-o", `jsonpath={.metadata.annotations.cairn\.dev/requester}`)).
			To(Equal("system:serviceaccount:" + ns + ":viewer"))
		Expect(kubectlOK("get", "backup", name, "-n", ns, "-o", "jsonpath={.status.warnings}")).NotTo(Equal("0"), "the viewer may not list Secrets")
	})

	It("refuses a forged requester: the API server records who created the object", func() {
		applyAs(member, fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata:
  name: forged
  namespace: %s
  annotations: {cairn.dev/requester: "system:admin", cairn.dev/requester-groups: '["system:masters"]'}
spec: {}
`, ns))
		Expect(kubectlOK("get", "backup", "forged", "-n", ns, "-o", `jsonpath={.metadata.annotations.cairn\.dev/requester}`)).
			To(Equal("system:serviceaccount:" + ns + ":member"))
		_, stderr, err := kubectlWith(member, "annotate", "backup", "forged", "-n", ns, "--overwrite", "cairn.dev/requester=system:admin")
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring("cairn.dev/requester"))
	})
})

// createCairnEditorRole makes the chart's cairn-backup-editor ClusterRole, as the chart's
// rbac.teamRoles renders it (charts/cairn/templates/rbac.yaml), and two roles for a team's
// members: a namespace admin and a viewer who may not read Secrets nor RBAC (the built-in admin
// and view roles are aggregated by a controller the suite's control plane does not run).
func createCairnEditorRole() {
	GinkgoHelper()
	applyAdmin(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-namespace-admin}
rules:
- apiGroups: ["", "apps", "batch", "rbac.authorization.k8s.io", "networking.k8s.io", "policy", "autoscaling", "coordination.k8s.io", "discovery.k8s.io", "snapshot.storage.k8s.io"]
  resources: ["*"]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-namespace-viewer}
rules:
- apiGroups: [""]
  resources: [configmaps, services, serviceaccounts, pods, persistentvolumeclaims, endpoints, limitranges, resourcequotas, replicationcontrollers, podtemplates]
  verbs: [get, list, watch]
- apiGroups: ["apps", "batch"]
  resources: ["*"]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-cairn-backup-editor}
rules:
- apiGroups: ["cairn.dev"]
  resources: ["backups", "restores", "schedules", "downloadrequests"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["cairn.dev"]
  resources: ["backups/status", "restores/status", "schedules/status", "downloadrequests/status"]
  verbs: ["get"]
`)
}

// tenant makes a ServiceAccount in ns bound to Cairn's editor role and to the given cluster
// roles there, and returns a kubeconfig that authenticates with a token of it from
// `kubectl create token`: a real ServiceAccount token, not the admin's identity.
func tenant(ns, name string, clusterRoles ...string) string {
	GinkgoHelper()
	kubectlOK("create", "serviceaccount", name, "-n", ns)
	for _, role := range append([]string{"e2e-cairn-backup-editor"}, clusterRoles...) {
		kubectlOK("create", "rolebinding", name+"-"+role, "-n", ns, "--clusterrole="+role, "--serviceaccount="+ns+":"+name)
	}
	token := strings.TrimSpace(kubectlOK("create", "token", name, "-n", ns, "--duration=2h"))
	admin, err := clientcmd.LoadFromFile(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	current := admin.Contexts[admin.CurrentContext]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = admin.Clusters[current.Cluster]
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: name, Namespace: ns}
	cfg.CurrentContext = "e2e"
	path := filepath.Join(GinkgoT().TempDir(), name+".kubeconfig")
	Expect(clientcmd.WriteToFile(*cfg, path)).To(Succeed())
	return path
}

// canI answers `kubectl auth can-i VERB RESOURCE -n NS --as USER` as the admin.
func canI(verb, resource, ns, user string) string {
	GinkgoHelper()
	out, _, _ := kubectl("auth", "can-i", verb, resource, "-n", ns, "--as", user)
	answer, _, _ := strings.Cut(strings.TrimSpace(out), " ") // "no - RBAC: ..." says why
	return answer
}

// applyAs applies a manifest with a tenant's kubeconfig.
func applyAs(config, manifest string) {
	GinkgoHelper()
	cmd := []string{"apply", "-f", "-"}
	stderr, err := kubectlStdinWith(config, manifest, cmd...)
	Expect(err).NotTo(HaveOccurred(), stderr)
}

// applyAdmin applies a manifest as the admin.
func applyAdmin(manifest string) {
	GinkgoHelper()
	Expect(applyAdminOut(manifest)).To(Succeed())
}

func applyAdminOut(manifest string) error {
	stderr, err := kubectlStdin(manifest, "apply", "-f", "-")
	if err != nil {
		return fmt.Errorf("%w: %s", err, stderr)
	}
	return nil
}

func kubectlStdinWith(config, stdin string, args ...string) (string, error) {
	cmd := exec.Command(kubectlBinary(), append([]string{"--kubeconfig", config}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

// backupManifest is a Backup of its own namespace.
func backupManifest(ns, name, extra string) string {
	return fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Backup\nmetadata: {name: %s, namespace: %s}\nspec: {%s}\n", name, ns, extra)
}

// bucketLocation makes a ReadOnly filesystem location of dir that syncs every second, as an
// administrator would point Cairn at a bucket someone else writes, and removes it after the spec.
func bucketLocation(name, dir string) {
	GinkgoHelper()
	applyAdmin(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata: {name: %s, namespace: cairn-system}
spec:
  provider: filesystem
  accessMode: ReadOnly
  backupSyncPeriod: 1s
  config: {path: %s}
`, name, dir))
	DeferCleanup(func() { kubectlOK("delete", "backupstoragelocation", name, "-n", "cairn-system") })
}

// craftedEntry is one entry of a hand-made archive: item as its JSON, or, with size, a JSON
// object of that many bytes.
type craftedEntry struct {
	path string
	item string
	size int
}

// writeCraftedBackup writes a committed backup of namespace ns under name into a filesystem
// location at dir, as someone who can write the bucket could: an archive of entries and a
// commit marker whose checksum and size match it.
func writeCraftedBackup(dir, ns, name string, entries []craftedEntry) {
	GinkgoHelper()
	store, err := storage.NewFilesystem(dir)
	Expect(err).NotTo(HaveOccurred())
	keys := storage.Layout{}.Backup(ns, name)
	var buf bytes.Buffer
	w, err := archive.NewWriter(&buf, time.Now())
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		data := []byte(e.item)
		if e.size > 0 {
			data = bytes.Repeat([]byte(" "), e.size)
			copy(data, `{"apiVersion":"v1","kind":"ConfigMap","data":{"k":"`)
			data[len(data)-3], data[len(data)-2], data[len(data)-1] = '"', '}', '}'
		}
		Expect(w.AddEntry(e.path, data)).To(Succeed())
	}
	Expect(w.Close()).To(Succeed())
	ctx := context.Background()
	digest, err := storage.PutArchive(ctx, store, keys.Archive, &buf)
	Expect(err).NotTo(HaveOccurred())
	now := time.Now().UTC()
	Expect(storage.WriteMetadata(ctx, store, keys, storage.BackupMetadata{
		FormatVersion: archive.FormatVersion, Namespace: ns, Name: name, UID: "crafted-" + name, Phase: "Completed",
		ArchiveSHA256: digest.SHA256, ArchiveSize: digest.Size, StartTimestamp: now, CompletionTimestamp: now,
		Spec: json.RawMessage(`{}`),
	})).To(Succeed())
}
