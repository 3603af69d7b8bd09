package cairn_test

// The RBAC of each chart mode, and of config/default (kustomize, which grants what mode full
// does), installed on a real kube-apiserver (the envtest binaries, make envtest) and asked about
// by the real kubectl and by SubjectAccessReviews: no exec-like permission in any mode but the
// pods/exec create of hooks (hooks.enabled, on in mode full), and the
// named resources matched against what the API server serves.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// notBackedUp are the resources, among those the backup lists (internal/backup's
// ResourcesFromDiscovery) in the groups the chart names, that no mode of the chart may read,
// with the reason. docs/install.md lists them too.
var notBackedUp = map[schema.GroupResource]string{
	{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}: "a request for a credential, made by and for " +
		"whoever created it; a restored one would be a new request made by the operator, and approving is never Cairn's",
}

// rbacMode is one chart mode as the tests install it: its own release and namespace, so that
// the modes live side by side on one API server. The mode "kustomize" is config/default's
// RBAC (kubectl apply -k), which must grant what the chart's mode full grants.
type rbacMode struct {
	name      string // rbac.mode, or kustomize
	release   string
	namespace string
}

var rbacModes = []rbacMode{
	{"full", "full", "cairn-full"},
	{"backupOnly", "backup-only", "cairn-backup-only"},
	{"kustomize", "", "cairn-system"},
}

// restores says whether the mode grants what restores need.
func (m rbacMode) restores() bool { return m.name != "backupOnly" }

// serviceAccount is the manager's ServiceAccount of the mode's release (the release's full
// name), or config/rbac's.
func (m rbacMode) serviceAccount() string {
	if m.name == "kustomize" {
		return "cairn-manager"
	}
	return m.release + "-cairn"
}

// user is the username the API server gives the manager's ServiceAccount.
func (m rbacMode) user() string {
	return "system:serviceaccount:" + m.namespace + ":" + m.serviceAccount()
}

// controlPlane is the API server the RBAC tests share, started by the first that needs it and
// stopped by TestMain.
var controlPlane struct {
	once       sync.Once
	env        *envtest.Environment
	kubeconfig string // an administrator's, for kubectl
	dir        string
	err        error
	installed  sync.Map // rbacMode.name -> the manifest applied
}

func TestMain(m *testing.M) {
	code := m.Run()
	if controlPlane.env != nil {
		_ = controlPlane.env.Stop()
	}
	if controlPlane.dir != "" {
		_ = os.RemoveAll(controlPlane.dir)
	}
	os.Exit(code)
}

// startControlPlane starts the shared API server, with Cairn's CRDs and the CSI snapshot CRDs.
func startControlPlane(t *testing.T) *envtest.Environment {
	t.Helper()
	controlPlane.once.Do(func() {
		env, err := testenv.New()
		if err != nil {
			controlPlane.err = err
			return
		}
		controlPlane.env = env
		if _, err := env.Start(); err != nil {
			controlPlane.err = fmt.Errorf("starting the API server: %w", err)
			return
		}
		admin, err := env.AddUser(envtest.User{Name: "rbac-test-admin", Groups: []string{"system:masters"}}, nil)
		if err != nil {
			controlPlane.err = err
			return
		}
		kubeconfig, err := admin.KubeConfig()
		if err != nil {
			controlPlane.err = err
			return
		}
		if controlPlane.dir, err = os.MkdirTemp("", "cairn-rbac-test-"); err != nil {
			controlPlane.err = err
			return
		}
		controlPlane.kubeconfig = filepath.Join(controlPlane.dir, "kubeconfig")
		controlPlane.err = os.WriteFile(controlPlane.kubeconfig, kubeconfig, 0o600)
	})
	if controlPlane.err != nil {
		t.Fatal(controlPlane.err)
	}
	return controlPlane.env
}

// kubectl runs the envtest kubectl as the administrator and returns its stdout, and stderr
// with the exit status as the error.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	binary := filepath.Join(testenv.AssetsDir(), "kubectl")
	if _, err := os.Stat(binary); err != nil {
		t.Fatalf("no kubectl in %s: run 'make envtest' first", testenv.AssetsDir())
	}
	cmd := exec.Command(binary, append([]string{"--kubeconfig", controlPlane.kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %s%w", strings.Join(args, " "), stderr.String(), err)
	}
	return stdout.String(), nil
}

// rbacKinds are the kinds of the chart's objects that make up its RBAC.
var rbacKinds = []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// installRBAC renders the chart in mode m (or kustomizes config/default) and applies its RBAC
// objects (and its ServiceAccount) with kubectl, once per mode; it returns them by kind/name.
func installRBAC(t *testing.T, m rbacMode) map[string][]byte {
	t.Helper()
	startControlPlane(t)
	var out string
	var err error
	if m.name == "kustomize" {
		out, err = kubectl(t, "kustomize", filepath.Join("..", "..", "config", "default"))
	} else {
		out, err = runHelm(t, helmBinary(t), "template", m.release, ".", "--namespace", m.namespace, "--set", "rbac.mode="+m.name)
	}
	if err != nil {
		t.Fatal(err)
	}
	objects := map[string][]byte{}
	var manifest bytes.Buffer
	for key, doc := range documents(t, out) {
		if slices.Contains(rbacKinds, strings.SplitN(key, "/", 2)[0]) {
			objects[key] = doc
			manifest.WriteString("---\n")
			manifest.Write(doc)
			manifest.WriteString("\n")
		}
	}
	if _, done := controlPlane.installed.Load(m.name); done {
		return objects
	}
	if _, err := kubectl(t, "create", "namespace", m.namespace); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rbac.yaml")
	if err := os.WriteFile(path, manifest.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := kubectl(t, "apply", "-f", path); err != nil {
		t.Fatal(err)
	}
	controlPlane.installed.Store(m.name, true)
	return objects
}

// canICheck is one question for `kubectl auth can-i`, and the answer each mode must give.
type canICheck struct {
	args       []string // verb, resource[.group], and --subresource
	full       bool
	backupOnly bool
}

func (c canICheck) want(m rbacMode) bool {
	if m.restores() {
		return c.full
	}
	return c.backupOnly
}

// canIChecks: nothing that runs code in a pod (but hooks' pods/exec create, in mode full) or
// on a node, mints a credential, approves a certificate or escalates RBAC, in either mode;
// impersonation only in full mode; and a few permissions each mode needs.
var canIChecks = []canICheck{
	{args: []string{"get", "nodes", "--subresource=proxy"}},
	{args: []string{"create", "nodes", "--subresource=proxy"}},
	{args: []string{"get", "pods", "--subresource=exec"}},
	// Hooks (hooks.enabled: on in mode full, off in backupOnly): create is what an exec needs,
	// over a websocket (GET) too.
	{args: []string{"create", "pods", "--subresource=exec"}, full: true},
	{args: []string{"get", "pods", "--subresource=attach"}},
	{args: []string{"create", "pods", "--subresource=attach"}},
	{args: []string{"get", "pods", "--subresource=portforward"}},
	{args: []string{"create", "pods", "--subresource=portforward"}},
	{args: []string{"get", "pods", "--subresource=proxy"}},
	{args: []string{"get", "services", "--subresource=proxy"}},
	{args: []string{"patch", "pods", "--subresource=ephemeralcontainers"}},
	{args: []string{"create", "serviceaccounts", "--subresource=token"}},
	{args: []string{"update", "certificatesigningrequests.certificates.k8s.io", "--subresource=approval"}},
	{args: []string{"approve", "signers.certificates.k8s.io"}},
	{args: []string{"escalate", "roles.rbac.authorization.k8s.io"}},
	{args: []string{"escalate", "clusterroles.rbac.authorization.k8s.io"}},
	{args: []string{"bind", "roles.rbac.authorization.k8s.io"}},
	{args: []string{"bind", "clusterroles.rbac.authorization.k8s.io"}},
	{args: []string{"delete", "secrets"}},
	{args: []string{"*", "*"}},
	{args: []string{"impersonate", "users"}, full: true},
	{args: []string{"impersonate", "groups"}, full: true},
	{args: []string{"impersonate", "serviceaccounts"}, full: true},
	// UIDs and extras: kubectl cannot ask about them (TestRBACImpersonation does).
	{args: []string{"list", "configmaps"}, full: true, backupOnly: true},
	{args: []string{"list", "secrets"}, full: true, backupOnly: true},
	{args: []string{"list", "deployments.apps"}, full: true, backupOnly: true},
	{args: []string{"create", "subjectaccessreviews.authorization.k8s.io"}, full: true, backupOnly: true},
	{args: []string{"create", "selfsubjectaccessreviews.authorization.k8s.io"}, full: true, backupOnly: true},
	{args: []string{"create", "volumesnapshots.snapshot.storage.k8s.io"}, full: true, backupOnly: true},
	{args: []string{"create", "configmaps"}, full: true},
	{args: []string{"patch", "deployments.apps"}, full: true},
	{args: []string{"update", "deployments.apps", "--subresource=status"}, full: true},
	{args: []string{"create", "namespaces"}, full: true},
}

// TestRBACKubectlCanI installs each mode's RBAC and asks kubectl, as the manager's
// ServiceAccount, every question of canIChecks: across all namespaces (the ClusterRole) and in
// the operator's namespace (where the chart's Roles add theirs).
func TestRBACKubectlCanI(t *testing.T) {
	for _, m := range rbacModes {
		t.Run(m.name, func(t *testing.T) {
			installRBAC(t, m)
			for _, c := range canIChecks {
				for _, scope := range [][]string{{"--all-namespaces"}, {"--namespace", m.namespace}} {
					args := append([]string{"auth", "can-i", "--as=" + m.user()}, c.args...)
					args = append(args, scope...)
					out, err := kubectl(t, args...)
					answer := strings.TrimSpace(out)
					if err != nil && answer != "no" { // can-i exits 1 on "no"
						t.Fatalf("%v", err)
					}
					if got := answer == "yes"; got != c.want(m) {
						t.Errorf("mode %s: kubectl auth can-i %s %s: %s, want %v", m.name, strings.Join(c.args, " "), strings.Join(scope, " "), answer, c.want(m))
					}
				}
			}
		})
	}
}

// accessReviewer asks the API server, as the administrator, what a mode's ServiceAccount may do.
type accessReviewer struct {
	t         *testing.T
	clientset *kubernetes.Clientset
	mode      rbacMode
}

// allowed is the API server's answer for verb on group/resource[/subresource] in namespace
// ("" = cluster-wide).
func (r accessReviewer) allowed(verb, group, resource, subresource, namespace string) bool {
	r.t.Helper()
	return serviceAccountAllowed(r.t, r.clientset, r.mode.namespace, r.mode.serviceAccount(),
		authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group, Resource: resource, Subresource: subresource})
}

// serviceAccountGroups are the groups the API server puts a ServiceAccount of namespace in.
func serviceAccountGroups(namespace string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// serviceAccountAllowed is the API server's answer, from a SubjectAccessReview, for the
// ServiceAccount name of namespace saNamespace doing attrs.
func serviceAccountAllowed(t *testing.T, clientset *kubernetes.Clientset, saNamespace, name string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + saNamespace + ":" + name,
		Groups:             serviceAccountGroups(saNamespace),
		ResourceAttributes: &attrs,
	}}
	got, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), review, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Status.Allowed
}

// TestRBACImpersonation: mode full (and kustomize) may impersonate a requester's username, groups, UID and
// extra, which a restore in a team's namespace writes as; backupOnly may impersonate no one.
// kubectl auth can-i cannot name impersonation's resources in authentication.k8s.io, so
// SubjectAccessReviews ask.
func TestRBACImpersonation(t *testing.T) {
	env := startControlPlane(t)
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rbacModes {
		t.Run(m.name, func(t *testing.T) {
			installRBAC(t, m)
			r := accessReviewer{t: t, clientset: clientset, mode: m}
			for _, a := range []struct{ group, resource, subresource string }{
				{"", "users", ""},
				{"", "groups", ""},
				{"", "serviceaccounts", ""},
				{"authentication.k8s.io", "uids", ""},
				{"authentication.k8s.io", "userextras", "scopes"},
				{"authentication.k8s.io", "userextras", "authentication.kubernetes.io/pod-name"},
			} {
				want := m.restores()
				if got := r.allowed("impersonate", a.group, a.resource, a.subresource, ""); got != want {
					t.Errorf("impersonate %s %s/%s: allowed %v, want %v", a.group, a.resource, a.subresource, got, want)
				}
			}
			// The repository server checks the node agents' tokens (TokenReview create); the
			// manager reads no one's reviews.
			if !r.allowed("create", "authentication.k8s.io", "tokenreviews", "", "") {
				t.Error("create tokenreviews: refused, and the repository server needs it")
			}
			for _, verb := range []string{"get", "list"} {
				if r.allowed(verb, "authentication.k8s.io", "tokenreviews", "", "") {
					t.Errorf("%s tokenreviews: allowed", verb)
				}
			}
		})
	}
}

// servedResource is a resource, or a subresource, the API server serves in some version.
type servedResource struct {
	schema.GroupResource
	subresource string
	verbs       []string
	namespaced  bool
}

// servedKey is served's key of group, resource and subresource ("" for the resource itself).
func servedKey(group, resource, subresource string) string {
	return group + "/" + resource + "/" + subresource
}

// served is every (sub)resource of every version of the checked groups, by servedKey.
func served(t *testing.T, clientset *kubernetes.Clientset) map[string]servedResource {
	t.Helper()
	_, lists, err := clientset.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]servedResource{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		if gv.Group == cairnv1.GroupVersion.Group {
			continue
		}
		for _, r := range list.APIResources {
			name, sub, _ := strings.Cut(r.Name, "/")
			s := servedResource{GroupResource: schema.GroupResource{Group: gv.Group, Resource: name}, subresource: sub, namespaced: r.Namespaced}
			key := servedKey(gv.Group, name, sub)
			if prev, ok := out[key]; ok {
				s.verbs = prev.verbs
			}
			for _, v := range r.Verbs {
				if !slices.Contains(s.verbs, v) {
					s.verbs = append(s.verbs, v)
				}
			}
			out[key] = s
		}
	}
	return out
}

// restorable says whether a restore creates items of gr: it is backed up, can be created, and
// internal/restore does not skip it.
func restorable(gr schema.GroupResource, verbs []string) bool {
	_, excluded := notBackedUp[gr]
	return !excluded && slices.Contains(verbs, "create") && restore.SkipReason(gr, nil) == ""
}

// TestRBACMatchesDiscovery compares each mode's RBAC with every resource and subresource the
// API server serves (all groups but Cairn's own): what the backup lists (internal/backup's own
// choice from discovery) is readable in both modes unless notBackedUp excludes it; what a
// restore creates is writable, with its status, in mode full only; and no other subresource is
// reachable at all in either mode. A Kubernetes release that adds a resource fails it until
// the resource is named in config/rbac/resources_role.yaml or in notBackedUp.
func TestRBACMatchesDiscovery(t *testing.T) {
	env := startControlPlane(t)
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	all := served(t, clientset)
	preferred, err := clientset.Discovery().ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[schema.GroupResource]backup.Resource{}
	for _, res := range backup.ResourcesFromDiscovery(preferred) {
		if res.Group != cairnv1.GroupVersion.Group {
			listed[res.GroupResource()] = res
		}
	}
	for gr := range notBackedUp {
		if _, ok := listed[gr]; !ok {
			t.Errorf("notBackedUp names %s, which the API server does not serve for listing: remove it", gr)
		}
	}
	// The writes besides restoring items: Cairn's own VolumeSnapshots (both modes, the
	// generated role), and the VolumeSnapshotContents a restore makes from CSI snapshots.
	vs := schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshots"}
	vsc := schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshotcontents"}
	otherWrites := map[bool]map[schema.GroupResource][]string{
		true:  {vs: {"create", "delete"}, vsc: {"create", "delete"}},
		false: {vs: {"create", "delete"}},
	}

	for _, m := range rbacModes {
		t.Run(m.name, func(t *testing.T) {
			installRBAC(t, m)
			r := accessReviewer{t: t, clientset: clientset, mode: m}
			full := m.restores()
			for gr := range listed {
				_, excluded := notBackedUp[gr]
				for _, verb := range []string{"get", "list"} {
					if got := r.allowed(verb, gr.Group, gr.Resource, "", ""); got == excluded {
						t.Errorf("%s %s: allowed %v; want %v (name it in config/rbac/resources_role.yaml, or in notBackedUp with the reason)", verb, gr, got, !excluded)
					}
				}
				verbs := all[servedKey(gr.Group, gr.Resource, "")].verbs
				restores := full && restorable(gr, verbs)
				for _, verb := range []string{"create", "patch", "update", "delete", "deletecollection"} {
					if !slices.Contains(verbs, verb) {
						continue
					}
					want := (restores && verb != "delete" && verb != "deletecollection") || slices.Contains(otherWrites[m.restores()][gr], verb)
					if got := r.allowed(verb, gr.Group, gr.Resource, "", ""); got != want {
						t.Errorf("%s %s: allowed %v, want %v", verb, gr, got, want)
					}
				}
			}
			for _, s := range all {
				if s.subresource == "" {
					continue
				}
				_, isListed := listed[s.GroupResource]
				for _, verb := range s.verbs {
					want := full && s.subresource == "status" && verb == "update" && isListed &&
						restorable(s.GroupResource, all[servedKey(s.Group, s.Resource, "")].verbs)
					// Hooks (hooks.enabled, on in mode full) exec into pods: create only.
					want = want || full && s.Group == "" && s.Resource == "pods" && s.subresource == "exec" && verb == "create"
					namespaces := []string{""}
					if s.namespaced {
						namespaces = append(namespaces, m.namespace, "kube-system")
					}
					for _, ns := range namespaces {
						if got := r.allowed(verb, s.Group, s.Resource, s.subresource, ns); got != want {
							t.Errorf("%s %s/%s in namespace %q: allowed %v, want %v", verb, s.GroupResource, s.subresource, ns, got, want)
						}
					}
				}
			}
		})
	}
}

// TestRBACNamesOnlyServedResources: every resource the chart's roles name, in both modes, is
// one the API server serves, so that a misspelt name cannot pass for a grant; the only "*"
// are the impersonation of extras (and the CRD groups an administrator adds, none here).
func TestRBACNamesOnlyServedResources(t *testing.T) {
	env := startControlPlane(t)
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	all := served(t, clientset)
	_, lists, err := clientset.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	for _, list := range lists { // Cairn's own, which served leaves out
		if gv, _ := schema.ParseGroupVersion(list.GroupVersion); gv.Group == cairnv1.GroupVersion.Group {
			for _, r := range list.APIResources {
				name, sub, _ := strings.Cut(r.Name, "/")
				all[servedKey(gv.Group, name, sub)] = servedResource{}
			}
		}
	}
	// What RBAC checks that discovery does not list: impersonation's users and groups, and the
	// finalizers of Cairn's kinds (the OwnerReferencesPermissionEnforcement admission plugin).
	pseudo := map[string]bool{servedKey("", "users", ""): true, servedKey("", "groups", ""): true}
	for _, m := range rbacModes {
		t.Run(m.name, func(t *testing.T) {
			for key, doc := range installRBAC(t, m) {
				kind := strings.SplitN(key, "/", 2)[0]
				if kind != "ClusterRole" && kind != "Role" {
					continue
				}
				var role rbacv1.ClusterRole // a Role's rules are the same fields
				if err := yaml.Unmarshal(doc, &role); err != nil {
					t.Fatal(err)
				}
				for _, rule := range role.Rules {
					if slices.Contains(rule.APIGroups, "*") {
						t.Errorf("%s: a rule for every API group: %v", key, rule)
					}
					for _, group := range rule.APIGroups {
						for _, resource := range rule.Resources {
							name, sub, _ := strings.Cut(resource, "/")
							switch {
							case name == "*" && group == "authentication.k8s.io" && slices.Equal(rule.Verbs, []string{"impersonate"}):
							case name == "*":
								t.Errorf("%s: %q in group %q: %v", key, resource, group, rule)
							case sub == "finalizers" && group == cairnv1.GroupVersion.Group:
							case pseudo[servedKey(group, name, sub)]:
							default:
								if _, ok := all[servedKey(group, name, sub)]; !ok {
									t.Errorf("%s names %s in group %q, which the API server does not serve", key, resource, group)
								}
							}
						}
					}
				}
			}
		})
	}
}

// TestCustomResourceGroupsSchemaRefusesServedGroups: rbac.customResourceGroups ("*" on a
// group) refuses every group the API server serves itself, so that "*" never reaches a
// built-in resource's subresources.
func TestCustomResourceGroupsSchemaRefusesServedGroups(t *testing.T) {
	env := startControlPlane(t)
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := clientset.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schemaDoc struct {
		Properties struct {
			RBAC struct {
				Properties struct {
					CustomResourceGroups struct {
						Items struct {
							Not struct {
								Enum []string `json:"enum"`
							} `json:"not"`
						} `json:"items"`
					} `json:"customResourceGroups"`
				} `json:"properties"`
			} `json:"rbac"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schemaDoc); err != nil {
		t.Fatal(err)
	}
	refused := schemaDoc.Properties.RBAC.Properties.CustomResourceGroups.Items.Not.Enum
	crdGroups := map[string]bool{}
	for _, crd := range env.CRDs {
		crdGroups[crd.Spec.Group] = true
	}
	var missing []string
	for _, g := range groups.Groups {
		if g.Name != "" && !crdGroups[g.Name] && !slices.Contains(refused, g.Name) {
			missing = append(missing, g.Name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("values.schema.json accepts the built-in groups %v in rbac.customResourceGroups: add them to its not-enum", missing)
	}
	for _, group := range refused {
		if strings.Contains(group, ".") { // the pattern already refuses a group without a dot
			if _, err := runHelm(t, helmBinary(t), "template", "cairn", ".", "--set", "rbac.customResourceGroups[0]="+group); err == nil {
				t.Errorf("rbac.customResourceGroups=%s accepted", group)
			}
		}
	}
}

// TestNodeAgentRBAC installs mode full's RBAC, which holds the node agent's, and acts as the
// node agent's ServiceAccount on the API server: it patches a PodVolumeBackup's status and reads
// the Secret of the repositories' passwords, and is refused every other Secret, listing
// Secrets, creating or deleting PodVolumeBackups, and anything that runs code in a pod.
func TestNodeAgentRBAC(t *testing.T) {
	env := startControlPlane(t)
	m := rbacModes[0]
	if m.name != "full" {
		t.Fatalf("rbacModes[0] is %s, want full", m.name)
	}
	installRBAC(t, m)
	ns := m.namespace
	serviceAccount := m.release + "-cairn-node-agent"
	passwords := m.release + "-cairn-repository-passwords"
	ctx := context.Background()

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cairnv1.AddToScheme(scheme))
	admin, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	agentConfig := rest.CopyConfig(env.Config)
	agentConfig.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + serviceAccount, Groups: serviceAccountGroups(ns)}
	agent, err := client.New(agentConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	const elsewhere = "node-agent-elsewhere"
	pvb := func(namespace string) *cairnv1.PodVolumeBackup {
		return &cairnv1.PodVolumeBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "b1-web-data", Labels: map[string]string{cairnv1.PodVolumeNodeLabel: "node-1"}},
			Spec: cairnv1.PodVolumeBackupSpec{Node: "node-1", Pod: cairnv1.PodReference{Namespace: "team-a", Name: "web-0", UID: "uid-1"},
				Volume: "data", Repository: cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "team-a"}},
		}
	}
	secret := func(namespace, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: map[string][]byte{"default_team-a": []byte("pw")}}
	}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: elsewhere}},
		pvb(ns), pvb(elsewhere),
		secret(ns, passwords), secret(ns, "other"), secret(elsewhere, passwords),
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	// What the agent does, done: each call's error must be nil (allowed) or Forbidden.
	for _, step := range []struct {
		name    string
		do      func() error
		allowed bool
	}{
		{"get its PodVolumeBackup", func() error { return agent.Get(ctx, client.ObjectKeyFromObject(pvb(ns)), &cairnv1.PodVolumeBackup{}) }, true},
		{"list its node's PodVolumeBackups", func() error {
			return agent.List(ctx, &cairnv1.PodVolumeBackupList{}, client.InNamespace(ns), client.MatchingLabels{cairnv1.PodVolumeNodeLabel: "node-1"})
		}, true},
		{"patch a PodVolumeBackup's status", func() error {
			return agent.Status().Patch(ctx, pvb(ns), client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"InProgress","bytesDone":10}}`)))
		}, true},
		{"get the passwords Secret", func() error {
			var s corev1.Secret
			if err := agent.Get(ctx, client.ObjectKey{Namespace: ns, Name: passwords}, &s); err != nil {
				return err
			}
			if string(s.Data["default_team-a"]) != "pw" {
				t.Errorf("the passwords Secret read as %v", s.Data)
			}
			return nil
		}, true},
		{"create an event", func() error {
			return agent.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b1-web-data.1"},
				InvolvedObject: corev1.ObjectReference{Kind: "PodVolumeBackup", Namespace: ns, Name: "b1-web-data"}, Reason: "Started", Message: "copying", Type: "Normal"})
		}, true},
		{"list pods everywhere", func() error { return agent.List(ctx, &corev1.PodList{}) }, true},
		{"get another Secret", func() error { return agent.Get(ctx, client.ObjectKey{Namespace: ns, Name: "other"}, &corev1.Secret{}) }, false},
		{"get a Secret of the passwords' name elsewhere", func() error {
			return agent.Get(ctx, client.ObjectKey{Namespace: elsewhere, Name: passwords}, &corev1.Secret{})
		}, false},
		{"list Secrets", func() error { return agent.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)) }, false},
		{"list Secrets everywhere", func() error { return agent.List(ctx, &corev1.SecretList{}) }, false},
		{"change the passwords", func() error { return agent.Update(ctx, secret(ns, passwords)) }, false},
		{"create a PodVolumeBackup", func() error {
			p := pvb(ns)
			p.Name = "made-by-the-agent"
			return agent.Create(ctx, p)
		}, false},
		{"delete a PodVolumeBackup", func() error { return agent.Delete(ctx, pvb(ns)) }, false},
		{"get a PodVolumeBackup of another namespace", func() error {
			return agent.Get(ctx, client.ObjectKeyFromObject(pvb(elsewhere)), &cairnv1.PodVolumeBackup{})
		}, false},
		{"list claims", func() error { return agent.List(ctx, &corev1.PersistentVolumeClaimList{}) }, false},
	} {
		err := step.do()
		switch {
		case step.allowed && err != nil:
			t.Errorf("%s: %v", step.name, err)
		case !step.allowed && !apierrors.IsForbidden(err):
			t.Errorf("%s: %v, want Forbidden", step.name, err)
		}
	}
	var got cairnv1.PodVolumeBackup
	if err := admin.Get(ctx, client.ObjectKeyFromObject(pvb(ns)), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != cairnv1.PodVolumePhaseInProgress || got.Status.BytesDone != 10 {
		t.Errorf("status after the agent's patch: %+v", got.Status)
	}

	// What no agent may do, asked of the API server.
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		verb, group, resource, subresource, namespace string
		want                                          bool
	}{
		{"get", "", "persistentvolumeclaims", "", "team-a", true},
		{"get", "", "persistentvolumes", "", "", true},
		{"watch", "", "pods", "", "", true},
		{"update", "cairn.dev", "podvolumebackups", "status", ns, true},
		{"patch", "cairn.dev", "podvolumerestores", "status", ns, true},
		{"watch", "cairn.dev", "podvolumerestores", "", ns, true},
		{"create", "cairn.dev", "podvolumerestores", "", ns, false},
		{"delete", "cairn.dev", "podvolumerestores", "", ns, false},
		{"get", "cairn.dev", "podvolumerestores", "", "team-a", false},
		{"create", "events.k8s.io", "events", "", ns, true},
		{"create", "", "pods", "exec", "team-a", false},
		{"get", "", "pods", "exec", "team-a", false},
		{"create", "", "pods", "attach", "team-a", false},
		{"create", "", "pods", "portforward", "team-a", false},
		{"get", "", "nodes", "proxy", "", false},
		{"create", "", "serviceaccounts", "token", ns, false},
		{"create", "authentication.k8s.io", "tokenreviews", "", "", false},
		{"create", "", "pods", "", "team-a", false},
		{"delete", "", "pods", "", "team-a", false},
		{"patch", "", "pods", "", "team-a", false},
		{"watch", "", "secrets", "", ns, false},
		{"get", "", "secrets", "", "team-a", false},
		{"create", "", "secrets", "", ns, false},
		{"update", "cairn.dev", "backups", "", ns, false},
		{"get", "cairn.dev", "backupstoragelocations", "", ns, false},
		{"impersonate", "", "serviceaccounts", "", "", false},
		{"escalate", "rbac.authorization.k8s.io", "roles", "", ns, false},
		{"*", "*", "*", "", "", false},
	} {
		attrs := authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace}
		if got := serviceAccountAllowed(t, clientset, ns, serviceAccount, attrs); got != a.want {
			t.Errorf("node agent: %s %s.%s/%s in %q: allowed %v, want %v", a.verb, a.resource, a.group, a.subresource, a.namespace, got, a.want)
		}
	}
}
