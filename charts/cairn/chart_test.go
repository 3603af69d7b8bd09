// Tests of the Cairn chart with the real helm binaries (make helm helm3): lint, the rendered
// manifests against golden files and the values schema with Helm 4 and Helm 3, and the RBAC
// each mode grants.
package cairn_test

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/chartobjects"
	"github.com/cairn-backup/cairn/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files from what helm renders now")

// helmBinary is $HELM (the Makefile sets it), else the Makefile's pinned helm in bin/: Helm 4,
// which every test runs.
func helmBinary(t *testing.T) string {
	t.Helper()
	return binary(t, "HELM", "helm-v4.3.1", "helm")
}

// helm3Binary is $HELM3 (the Makefile sets it), else the Makefile's pinned Helm 3 in bin/:
// charts must also work with Helm 3, so the lint, golden and schema tests run it too.
func helm3Binary(t *testing.T) string {
	t.Helper()
	return binary(t, "HELM3", "helm-v3.22.0", "helm3")
}

// binary is the path in the environment variable env, else bin/name; target is the make
// target that installs it.
func binary(t *testing.T, env, name, target string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		path = filepath.Join("..", "..", "bin", name)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no %s at %s: run 'make %s' first", target, path, target)
	}
	return path
}

// helmVersion is one of the helm binaries the chart must work with.
type helmVersion struct {
	name   string // the subtest's name
	binary func(*testing.T) string
	major  string // what `helm version --short` starts with
}

// helmVersions are Helm 4, what users run now, and Helm 3, which charts must also work with.
var helmVersions = []helmVersion{
	{"helm4", helmBinary, "v4."},
	{"helm3", helm3Binary, "v3."},
}

// helm runs Helm 4 in the chart's directory and returns its stdout, and stderr as the error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runHelm(t, helmBinary(t), args...)
}

// runHelm runs binary in the chart's directory and returns its stdout, and stderr as the error.
func runHelm(t *testing.T, binary string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// No user configuration, repositories or cache leak in.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	if err := cmd.Run(); err != nil {
		return stdout.String(), errors.New(stderr.String() + err.Error())
	}
	return stdout.String(), nil
}

// render is Helm 4's `helm template` of the chart as release "cairn" in namespace cairn-system.
func render(t *testing.T, set ...string) string {
	t.Helper()
	return renderWith(t, helmBinary(t), set...)
}

// renderWith is render with the helm binary given.
func renderWith(t *testing.T, binary string, set ...string) string {
	t.Helper()
	args := append([]string{"template", "cairn", ".", "--namespace", "cairn-system"}, setArgs(set)...)
	out, err := runHelm(t, binary, args...)
	if err != nil {
		t.Fatalf("%s template %v: %v", binary, set, err)
	}
	return out
}

// documents splits a rendered release into its objects, each decoded into a map by kind/name.
func documents(t *testing.T, manifest string) map[string][]byte {
	t.Helper()
	docs := map[string][]byte{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			metav1.TypeMeta   `json:",inline"`
			metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		if meta.Kind == "" {
			continue // a comment-only document
		}
		docs[meta.Kind+"/"+meta.Name] = doc
		if meta.Kind == "ConfigMap" && strings.HasSuffix(meta.Name, "-objects") {
			addChartObjects(t, doc, meta.Namespace, docs)
		}
	}
}

// addChartObjects adds the storage locations and schedules of the chart's objects ConfigMap to
// docs, as the manager reads them (--chart-objects).
func addChartObjects(t *testing.T, doc []byte, namespace string, docs map[string][]byte) {
	t.Helper()
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(doc, &cm); err != nil {
		t.Fatal(err)
	}
	objects, err := chartobjects.Decode(cm.Data[chartobjects.ConfigMapKey], namespace)
	if err != nil {
		t.Fatalf("ConfigMap %s: the manager refuses its objects: %v", cm.Name, err)
	}
	for _, obj := range objects {
		data, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		docs[obj.GetKind()+"/"+obj.GetName()] = data
	}
}

// TestHelmVersions: the binaries the tests run are the Helm majors they stand for (a $HELM3
// pointing at Helm 4 would prove nothing).
func TestHelmVersions(t *testing.T) {
	for _, h := range helmVersions {
		t.Run(h.name, func(t *testing.T) {
			out, err := runHelm(t, h.binary(t), "version", "--short")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(out, h.major) {
				t.Errorf("%s version %q, want %s*", h.binary(t), out, h.major)
			}
		})
	}
}

func TestLintStrict(t *testing.T) {
	for _, h := range helmVersions {
		t.Run(h.name, func(t *testing.T) {
			for _, args := range [][]string{
				{"--set", "rbac.mode=full"},
				{"--set", "rbac.mode=backupOnly"},
				{"--set", "nodeAgent.enabled=false"},
				{"-f", filepath.Join("testdata", "everything.values.yaml")},
			} {
				if out, err := runHelm(t, h.binary(t), append([]string{"lint", "--strict", "."}, args...)...); err != nil {
					t.Errorf("helm lint --strict %v: %v\n%s", args, err, out)
				}
			}
		})
	}
}

// TestGolden compares what helm template renders with testdata/*.golden.yaml; `make
// update-golden` rewrites them, from Helm 4's rendering, after an intended change (review the
// diff). Helm 3 must render the same, but for the blank lines that end a document.
func TestGolden(t *testing.T) {
	cases := []struct {
		name string
		set  []string
	}{
		{"default", nil},
		{"backuponly", []string{"rbac.mode=backupOnly"}},
		{"customgroups", []string{"rbac.customResourceGroups[0]=example.com", "rbac.customResourceGroups[1]=stable.example.org"}},
		{"monitoring", []string{"metrics.serviceMonitor.enabled=true", "metrics.dashboard.enabled=true", "metrics.prometheusRule.enabled=true"}},
	}
	for _, h := range helmVersions {
		for _, tc := range cases {
			t.Run(h.name+"/"+tc.name, func(t *testing.T) {
				got := withoutSigningKey(renderWith(t, h.binary(t), tc.set...))
				path := filepath.Join("testdata", tc.name+".golden.yaml")
				if *update && h.name == "helm4" {
					if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run 'make update-golden' to write it)", err)
				}
				if h.name != "helm4" {
					got, want = withoutDocumentEnds(got), []byte(withoutDocumentEnds(string(want)))
				}
				if got != string(want) {
					t.Errorf("%s template differs from %s (run 'make update-golden' and review the diff):\n%s", h.name, path, lineDiff(string(want), got))
				}
			})
		}
	}
}

// documentEnds are the blank lines at the end of a rendered document: Helm 4 keeps those the
// templates leave, Helm 3 trims them. Nothing else may differ.
var documentEnds = regexp.MustCompile(`\n(?:[ \t]*\n)+(---\n|$)`)

// withoutDocumentEnds removes the blank lines that end the manifest's documents.
func withoutDocumentEnds(manifest string) string {
	return documentEnds.ReplaceAllString(manifest, "\n$1")
}

// signingKeyLine is the download signing key's line in the chart's Secret.
var signingKeyLine = regexp.MustCompile(`(?m)^(  signing-key: ).*$`)

// withoutSigningKey replaces the download signing key, random in every helm template (there is no
// cluster to keep it in), with a fixed text.
func withoutSigningKey(manifest string) string {
	return signingKeyLine.ReplaceAllString(manifest, "${1}RANDOM")
}

// TestSchemaRejects installs nothing: helm template already checks values.schema.json (Helm 4's
// and Helm 3's own validators).
func TestSchemaRejects(t *testing.T) {
	cases := []struct {
		set  string
		want string // a part of helm's message
	}{
		{"concurrentBackups=zero", "concurrentBackups"},
		{"concurrentBackups=0", "concurrentBackups"},
		{"itemBlockWorkerCount=-1", "itemBlockWorkerCount"},
		{"rbac.mode=admin", "rbac"},
		{"defaultBackupTTL=30days", "defaultBackupTTL"},
		{"storage.filesystem.mountPath=relative/path", "mountPath"},
		{"storage.filesystem.persistence.size=ten", "size"},
		{"concurentBackups=2", "concurentBackups"}, // a misspelt key is not silently ignored
		{"storage.locations[0].name=s3", "provider"},
		{"schedules[0].name=daily", "schedule"},
		{"schedules[0].name=d,schedules[0].schedule=@daily,schedules[0].retention.daily=-1", "retention"},
		{"schedules[0].name=d,schedules[0].schedule=@daily,schedules[0].retention.every=2", "every"},
		{"schedules[0].name=d,schedules[0].schedule=@daily,schedules[0].retention.daily=7,schedules[0].template.ttl=24h", "schedules/0"},
		{"extraArgs[0]=concurrent-backups", "extraArgs"},
		{"extraEnv[0].value=x", "name"},
		{"backupSyncPeriod=1day", "backupSyncPeriod"},
		{"downloadServer.port=0", "port"},
		{"downloadServer.port=70000", "port"},
		{"downloadServer.urlBase=ftp://files.example.com", "urlBase"},
		{"downloadServer.urlBase=https://files.example.com/?a=b", "urlBase"},
		{"downloadServer.signingKey.key=a/b", "key"},
		{"downloadServer.tls=true", "tls"},
		{"rbac.customResourceGroups[0]=*", "customResourceGroups"},
		{"rbac.customResourceGroups[0]=apps", "customResourceGroups"},
		{"rbac.customResourceGroups[0]=storage.k8s.io", "customResourceGroups"},
		{"rbac.customResourceGroups[0]=metrics.k8s.io", "customResourceGroups"},
		{"rbac.customResourceGroups[0]=Example.com", "customResourceGroups"},
		{"rbac.customResourceGroups=example.com", "customResourceGroups"}, // a string, not a list
		{"actAsRequester=nowhere", "actAsRequester"},
		{"maxArchiveEntrySize=big", "maxArchiveEntrySize"},
		{"nodeAgent.enabled=yes", "enabled"},
		{"nodeAgent.kubeletDir=var/lib/kubelet", "kubeletDir"},
		{"nodeAgent.repositoryServer.port=0", "port"},
		{"nodeAgent.repositoryServer.port=65536", "port"},
		{"nodeAgent.gomemlimit=200M", "gomemlimit"},
		{"nodeAgent.tolerations=all", "tolerations"},
		{"nodeAgent.serviceAccount.name=Node_Agent", "name"},
		{"nodeAgent.repositoryServer.tls.existingSecret=My_TLS", "existingSecret"},
		{"nodeAgent.repositoryServer.tls.insecure=true", "insecure"},
		{"networkPolicy.enabled=yes", "enabled"},
		{"networkPolicy.prometheusCIDRs[0]=prometheus", "prometheusCIDRs"},
		{"networkPolicy.apiServerCIDRs=10.0.0.0/8", "apiServerCIDRs"}, // a string, not a list
		{"networkPolicy.egress=true", "egress"},
		{"nodeAgent.hostNetwork=true", "hostNetwork"}, // no such value
		{"repositoryMaintenance.interval=hourly", "interval"},
		{"repositoryMaintenance.timeout=30", "timeout"},
	}
	for _, h := range helmVersions {
		for _, tc := range cases {
			t.Run(h.name+"/"+tc.set, func(t *testing.T) {
				_, err := runHelm(t, h.binary(t), "template", "cairn", ".", "--set", tc.set)
				if err == nil {
					t.Fatalf("helm template --set %s: accepted, want a schema error", tc.set)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("helm template --set %s: %v\nwant a message naming %q", tc.set, err, tc.want)
				}
			})
		}
	}
}

// clusterRole decodes the rendered ClusterRole name.
func clusterRole(t *testing.T, docs map[string][]byte, name string) rbacv1.ClusterRole {
	t.Helper()
	doc, ok := docs["ClusterRole/"+name]
	if !ok {
		t.Fatalf("no ClusterRole %s rendered", name)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(doc, &role); err != nil {
		t.Fatal(err)
	}
	return role
}

// generatedClusterRole is config/rbac/role.yaml's ClusterRole: what the reconcilers declare.
func generatedClusterRole(t *testing.T) rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := documents(t, string(data))
	return clusterRole(t, docs, "cairn-manager")
}

func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}

func TestRBACModes(t *testing.T) {
	generated := generatedClusterRole(t)
	full := documents(t, render(t))
	backupOnly := documents(t, render(t, "rbac.mode=backupOnly"))

	fullRole := clusterRole(t, full, "cairn-manager")
	for _, rule := range generated.Rules {
		if !slices.ContainsFunc(fullRole.Rules, func(r rbacv1.PolicyRule) bool { return equalRule(r, rule) }) {
			t.Errorf("mode full lacks the reconcilers' rule %v", rule)
		}
	}
	if !grants(fullRole.Rules, "apps", "deployments", "create") {
		t.Errorf("mode full cannot create what a restore restores")
	}

	onlyRole := clusterRole(t, backupOnly, "cairn-manager")
	for _, check := range []struct {
		group, resource, verb string
		want                  bool
	}{
		{"apps", "deployments", "list", true},
		{"", "secrets", "get", true},
		{"apps", "deployments", "create", false},
		{"", "configmaps", "patch", false},
		{"", "pods", "update", false},
		{"cairn.dev", "backups", "create", true},
		{"cairn.dev", "backups", "delete", true},
		{"cairn.dev", "restores/status", "patch", true},
		{"cairn.dev", "downloadrequests", "delete", true},
		{"events.k8s.io", "events", "create", true},
		{"snapshot.storage.k8s.io", "volumesnapshots", "create", true},
	} {
		if got := grants(onlyRole.Rules, check.group, check.resource, check.verb); got != check.want {
			t.Errorf("backupOnly grants %s %s.%s: %v, want %v", check.verb, check.resource, check.group, got, check.want)
		}
	}

	// backupOnly keeps only the read verbs of what backups read and restores create.
	resources := resourcesRole(t)
	for _, rule := range resources.Rules {
		var read []string
		for _, v := range rule.Verbs {
			if slices.Contains([]string{"get", "list", "watch"}, v) {
				read = append(read, v)
			}
		}
		want := rbacv1.PolicyRule{APIGroups: rule.APIGroups, Resources: rule.Resources, Verbs: read}
		if len(read) > 0 && !slices.ContainsFunc(onlyRole.Rules, func(r rbacv1.PolicyRule) bool { return equalRule(r, want) }) {
			t.Errorf("backupOnly lacks the read rule %v", want)
		}
		if !slices.ContainsFunc(fullRole.Rules, func(r rbacv1.PolicyRule) bool { return equalRule(r, rule) }) {
			t.Errorf("mode full lacks the rule %v of resources_role.yaml", rule)
		}
	}
	generatedOnly := len(withoutExec(generated.Rules))
	for _, rule := range onlyRole.Rules[generatedOnly:] {
		for _, v := range rule.Verbs {
			if !slices.Contains([]string{"get", "list", "watch"}, v) {
				t.Errorf("backupOnly: a write beyond the reconcilers' own rules: %v", rule)
			}
		}
	}
	if len(onlyRole.Rules) < generatedOnly || !slices.EqualFunc(onlyRole.Rules[:generatedOnly], withoutExec(generated.Rules), equalRule) {
		t.Errorf("backupOnly does not start with the reconcilers' rules (but hooks' pods/exec)")
	}

	for mode, docs := range map[string]map[string][]byte{"full": full, "backupOnly": backupOnly} {
		for key, doc := range docs {
			if !strings.HasPrefix(key, "ClusterRoleBinding/") && !strings.HasPrefix(key, "RoleBinding/") {
				continue
			}
			var binding rbacv1.RoleBinding // the same fields as a ClusterRoleBinding
			if err := yaml.Unmarshal(doc, &binding); err != nil {
				t.Fatal(err)
			}
			if binding.RoleRef.Name == "cluster-admin" || binding.RoleRef.Name == "admin" {
				t.Errorf("mode %s: %s binds %s", mode, key, binding.RoleRef.Name)
			}
		}
	}

	editor := clusterRole(t, full, "cairn-backup-editor")
	for _, resource := range []string{"backups", "restores", "schedules", "downloadrequests"} {
		for _, verb := range []string{"create", "get", "patch"} {
			if !grants(editor.Rules, "cairn.dev", resource, verb) {
				t.Errorf("cairn-backup-editor cannot %s %s", verb, resource)
			}
		}
	}
}

// withoutExec is rules without hooks' pods/exec rule.
func withoutExec(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	return slices.DeleteFunc(slices.Clone(rules), func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "pods/exec") })
}

// TestHooksRBAC: hooks.enabled, by default on in mode full and off in backupOnly, grants the
// manager pods/exec create (and nothing else of pods/exec), and tells the manager
// (--hooks-enabled) so that a backup's hooks say why they cannot run.
func TestHooksRBAC(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want bool
	}{
		{nil, true},
		{[]string{"rbac.mode=backupOnly"}, false},
		{[]string{"hooks.enabled=false"}, false},
		{[]string{"rbac.mode=backupOnly", "hooks.enabled=true"}, true},
		{[]string{"hooks.enabled=true", "hooks.defaultTimeout=2m"}, true},
	} {
		t.Run(strings.Join(tc.set, ","), func(t *testing.T) {
			docs := documents(t, render(t, tc.set...))
			role := clusterRole(t, docs, "cairn-manager")
			if got := grants(role.Rules, "", "pods/exec", "create"); got != tc.want {
				t.Errorf("pods/exec create granted: %v, want %v", got, tc.want)
			}
			for _, verb := range []string{"get", "update", "patch", "delete", "list"} {
				if grants(role.Rules, "", "pods/exec", verb) {
					t.Errorf("pods/exec %s granted", verb)
				}
			}
			var d appsv1.Deployment
			if err := yaml.UnmarshalStrict(docs["Deployment/cairn"], &d); err != nil {
				t.Fatal(err)
			}
			args := d.Spec.Template.Spec.Containers[0].Args
			if flag := fmt.Sprintf("--hooks-enabled=%v", tc.want); !slices.Contains(args, flag) {
				t.Errorf("manager args %v lack %s", args, flag)
			}
			timeout := "--default-hook-timeout=30s"
			if slices.Contains(tc.set, "hooks.defaultTimeout=2m") {
				timeout = "--default-hook-timeout=2m"
			}
			if !slices.Contains(args, timeout) {
				t.Errorf("manager args %v lack %s", args, timeout)
			}
		})
	}
}

// resourcesRole is config/rbac/resources_role.yaml's ClusterRole: what backups read and
// restores create, named.
func resourcesRole(t *testing.T) rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "resources_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &role); err != nil {
		t.Fatal(err)
	}
	return role
}

// TestRBACFilesAreConfigs: the chart's RBAC files are config/rbac's (make manifests copies
// them), so that the chart and kustomize grant the same.
func TestRBACFilesAreConfigs(t *testing.T) {
	for _, name := range []string{"role.yaml", "resources_role.yaml"} {
		chart, err := os.ReadFile(filepath.Join("files", "rbac", name))
		if err != nil {
			t.Fatal(err)
		}
		config, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(chart, config) {
			t.Errorf("files/rbac/%s differs from config/rbac/%s: run 'make manifests'", name, name)
		}
	}
}

// TestCustomResourceGroups: each group of rbac.customResourceGroups is one rule for every
// resource of the group, read-only in backupOnly.
func TestCustomResourceGroups(t *testing.T) {
	set := []string{"rbac.customResourceGroups[0]=example.com", "rbac.customResourceGroups[1]=stable.example.org"}
	for _, tc := range []struct {
		mode  string
		verbs []string
	}{
		{"full", []string{"create", "get", "list", "patch", "update"}},
		{"backupOnly", []string{"get", "list"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			role := clusterRole(t, documents(t, render(t, append(set, "rbac.mode="+tc.mode)...)), "cairn-manager")
			for _, group := range []string{"example.com", "stable.example.org"} {
				want := rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{"*"}, Verbs: tc.verbs}
				if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return equalRule(r, want) }) {
					t.Errorf("no rule %v in %v", want, role.Rules)
				}
			}
			var wildcards int
			for _, r := range role.Rules {
				if slices.Contains(r.Resources, "*") {
					wildcards++
				}
			}
			if want := 2 + map[string]int{"full": 1, "backupOnly": 0}[tc.mode]; wildcards != want { // + full mode's impersonation of extras
				t.Errorf("%d rules with resources *, want %d", wildcards, want)
			}
		})
	}
}

func equalRule(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.ResourceNames, b.ResourceNames) &&
		slices.Equal(a.NonResourceURLs, b.NonResourceURLs)
}

// TestStorageVolume: the filesystem location's volume is a claim, an emptyDir or a hostPath.
func TestStorageVolume(t *testing.T) {
	cases := []struct {
		name      string
		set       []string
		wantClaim bool
		volume    func(corev1.Volume) bool
		warning   bool
	}{
		{"claim", nil, true, func(v corev1.Volume) bool {
			return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "cairn-storage"
		}, false},
		{"emptyDir", []string{"storage.filesystem.persistence.enabled=false"}, false,
			func(v corev1.Volume) bool { return v.EmptyDir != nil }, true},
		{"hostPath", []string{"storage.filesystem.hostPath=/srv/cairn"}, false,
			func(v corev1.Volume) bool { return v.HostPath != nil && v.HostPath.Path == "/srv/cairn" }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs := documents(t, render(t, tc.set...))
			_, claim := docs["PersistentVolumeClaim/cairn-storage"]
			if claim != tc.wantClaim {
				t.Errorf("claim rendered: %v, want %v", claim, tc.wantClaim)
			}
			var d appsv1.Deployment
			if err := yaml.UnmarshalStrict(docs["Deployment/cairn"], &d); err != nil {
				t.Fatal(err)
			}
			if !tc.volume(storageVolume(d)) {
				t.Errorf("storage volume is %+v", storageVolume(d))
			}
			notes, err := helm(t, append([]string{"install", "cairn", ".", "--dry-run=client", "--namespace", "cairn-system"}, setArgs(tc.set)...)...)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(notes, "WARNING: the filesystem location"); got != tc.warning {
				t.Errorf("NOTES warn about an emptyDir: %v, want %v", got, tc.warning)
			}
		})
	}
}

func setArgs(set []string) []string {
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

// storageVolume is the Deployment's volume named storage (the filesystem location's).
func storageVolume(d appsv1.Deployment) corev1.Volume {
	for _, vol := range d.Spec.Template.Spec.Volumes {
		if vol.Name == "storage" {
			return vol
		}
	}
	return corev1.Volume{}
}

// lineDiff shows where two renderings part: the first differing line, with a few around it.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	from := max(0, i-3)
	var b strings.Builder
	fmt.Fprintf(&b, "first difference at line %d\n", i+1)
	for j := from; j < i+4; j++ {
		if j < len(w) {
			fmt.Fprintf(&b, "- %s\n", w[j])
		}
		if j < len(g) {
			fmt.Fprintf(&b, "+ %s\n", g[j])
		}
	}
	return b.String()
}

// TestChartObjectsNamesStayStrings: a location or schedule named like a number (valid for
// Kubernetes) reaches the manager as a name, not as a YAML number it would refuse.
func TestChartObjectsNamesStayStrings(t *testing.T) {
	out, err := helm(t, "template", "cairn", ".", "--namespace", "cairn-system",
		"--set-string", "storage.filesystem.locationName=2024", "--set-string", "schedules[0].name=0700", "--set", "schedules[0].schedule=@daily")
	if err != nil {
		t.Fatal(err)
	}
	docs := documents(t, out)
	for _, key := range []string{"BackupStorageLocation/2024", "Schedule/0700"} {
		if _, ok := docs[key]; !ok {
			t.Errorf("%s not among the chart's objects", key)
		}
	}
}

// TestEveryPartRendersValidObjects renders every optional part of the chart at once and decodes
// each object strictly into its Go type: a misspelt or misplaced field fails here, not at
// install.
func TestEveryPartRendersValidObjects(t *testing.T) {
	out, err := helm(t, "template", "cairn", ".", "--namespace", "cairn-system", "-f", filepath.Join("testdata", "everything.values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := documents(t, out)
	types := map[string]func() any{
		"Deployment":                       func() any { return &appsv1.Deployment{} },
		"DaemonSet":                        func() any { return &appsv1.DaemonSet{} },
		"Service":                          func() any { return &corev1.Service{} },
		"ServiceAccount":                   func() any { return &corev1.ServiceAccount{} },
		"Secret":                           func() any { return &corev1.Secret{} },
		"PersistentVolumeClaim":            func() any { return &corev1.PersistentVolumeClaim{} },
		"PodDisruptionBudget":              func() any { return &policyv1.PodDisruptionBudget{} },
		"ConfigMap":                        func() any { return &corev1.ConfigMap{} },
		"ClusterRole":                      func() any { return &rbacv1.ClusterRole{} },
		"ClusterRoleBinding":               func() any { return &rbacv1.ClusterRoleBinding{} },
		"Role":                             func() any { return &rbacv1.Role{} },
		"RoleBinding":                      func() any { return &rbacv1.RoleBinding{} },
		"CustomResourceDefinition":         func() any { return &apiextensionsv1.CustomResourceDefinition{} },
		"BackupStorageLocation":            func() any { return &cairnv1.BackupStorageLocation{} },
		"Schedule":                         func() any { return &cairnv1.Schedule{} },
		"ServiceMonitor":                   nil, // the Prometheus operator's kind: no Go type here
		"PrometheusRule":                   nil, // the same (dashboard_test.go reads it)
		"MutatingAdmissionPolicy":          func() any { return &admissionregistrationv1.MutatingAdmissionPolicy{} },
		"MutatingAdmissionPolicyBinding":   func() any { return &admissionregistrationv1.MutatingAdmissionPolicyBinding{} },
		"ValidatingAdmissionPolicy":        func() any { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
		"ValidatingAdmissionPolicyBinding": func() any { return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{} },
		"NetworkPolicy":                    func() any { return &networkingv1.NetworkPolicy{} },
	}
	kinds := map[string]int{}
	for key, doc := range docs {
		kind := strings.SplitN(key, "/", 2)[0]
		kinds[kind]++
		newObj, known := types[kind]
		if !known {
			t.Errorf("%s: a kind the test does not know", key)
			continue
		}
		if newObj == nil {
			continue
		}
		if err := yaml.UnmarshalStrict(doc, newObj()); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
	for kind, want := range map[string]int{"BackupStorageLocation": 3, "Schedule": 3, "Secret": 2, "ServiceMonitor": 1, "PrometheusRule": 1, "PersistentVolumeClaim": 1, "DaemonSet": 1, "NetworkPolicy": 2} {
		if kinds[kind] != want {
			t.Errorf("%d %s rendered, want %d", kinds[kind], kind, want)
		}
	}

	var kept cairnv1.Schedule
	if err := yaml.UnmarshalStrict(docs["Schedule/kept"], &kept); err != nil {
		t.Fatal(err)
	}
	if want := (cairnv1.RetentionPolicy{KeepLast: 3, Hourly: 24, Daily: 7, Weekly: 4, Monthly: 12, Yearly: 2}); kept.Spec.Retention == nil || *kept.Spec.Retention != want {
		t.Errorf("schedule kept: retention %+v, want %+v", kept.Spec.Retention, want)
	}

	var s3 cairnv1.BackupStorageLocation
	if err := yaml.Unmarshal(docs["BackupStorageLocation/s3"], &s3); err != nil {
		t.Fatal(err)
	}
	if s3.Spec.Credential == nil || s3.Spec.Credential.Name != "cairn-s3-credential" || s3.Spec.AccessMode != cairnv1.AccessModeReadOnly ||
		s3.Spec.Config[cairnv1.ConfigKeyEndpoint] != "https://s3.example.com" || s3.Spec.ObjectStorage.Prefix != "cluster-a" {
		t.Errorf("location s3: %+v", s3.Spec)
	}
	var minio cairnv1.BackupStorageLocation
	if err := yaml.Unmarshal(docs["BackupStorageLocation/minio"], &minio); err != nil {
		t.Fatal(err)
	}
	if minio.Spec.Credential == nil || minio.Spec.Credential.Name != "minio-creds" || minio.Spec.Credential.Key != "credentials" {
		t.Errorf("location minio: credential %+v, want the existing Secret", minio.Spec.Credential)
	}
	var secret corev1.Secret
	if err := yaml.Unmarshal(docs["Secret/cairn-s3-credential"], &secret); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(secret.StringData["cloud"], "aws_access_key_id = a") {
		t.Errorf("credential Secret: %q", secret.StringData)
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(docs["Deployment/cairn"], &d); err != nil {
		t.Fatal(err)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--restore-resource-priorities=namespaces,persistentvolumeclaims,secrets", "--zap-log-level=debug", "--zap-devel",
		"--backup-sync-period=5m", "--chart-objects=cairn-objects", "--download-bind-address=:9086", "--download-url-base=https://cairn-downloads.example.com/cairn"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	if d.Spec.Template.Spec.ServiceAccountName != "cairn-sa" || *d.Spec.Replicas != 2 {
		t.Errorf("serviceAccountName %q, replicas %d", d.Spec.Template.Spec.ServiceAccountName, *d.Spec.Replicas)
	}
	for _, want := range []string{"--repository-server-bind-address=:9445", "--node-agent-service-account=cairn-agent",
		"--repository-server-tls-secret=repo-tls",
		"--repository-maintenance-interval=6h", "--repository-maintenance-timeout=1h"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(docs["DaemonSet/cairn-node-agent"], &ds); err != nil {
		t.Fatal(err)
	}
	pod := ds.Spec.Template.Spec
	if !slices.Contains(pod.Containers[0].Args, "--repository-server=https://cairn-repository.cairn-system.svc:9445") ||
		pod.Volumes[0].HostPath == nil || pod.Volumes[0].HostPath.Path != "/var/lib/k0s/kubelet/pods" ||
		pod.ServiceAccountName != "cairn-agent" || pod.PriorityClassName != "system-node-critical" ||
		pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" ||
		ds.Spec.Template.Annotations["example.com/agent"] != "yes" || len(pod.ImagePullSecrets) != 1 ||
		pod.Containers[0].Resources.Limits.Memory().String() != "1Gi" {
		t.Errorf("node agent: args %q, pod %+v", pod.Containers[0].Args, pod)
	}
}

// TestDownloadServer: the download server's flags, port, Service port and signing key, on and
// off, with the chart's Secret or an existing one.
func TestDownloadServer(t *testing.T) {
	const keyFile = "--download-signing-key-file=/etc/cairn/download/signing-key"
	cases := []struct {
		name       string
		set        []string
		wantArgs   []string
		unwanted   []string
		wantPort   int32 // 0: no download port on the container or the Service
		wantSecret string
		wantOwnKey bool // the chart renders the Secret
	}{
		{"default", nil,
			[]string{"--backup-sync-period=1m", "--download-bind-address=:8086", keyFile}, []string{"--download-url-base"},
			8086, "cairn-download-signing-key", true},
		{"port and url base", []string{"downloadServer.port=9000", "downloadServer.urlBase=https://cairn-downloads.example.com", "backupSyncPeriod=0s"},
			[]string{"--backup-sync-period=0s", "--download-bind-address=:9000", "--download-url-base=https://cairn-downloads.example.com", keyFile}, nil,
			9000, "cairn-download-signing-key", true},
		{"existing secret", []string{"downloadServer.signingKey.existingSecret=my-key", "downloadServer.signingKey.key=hmac"},
			[]string{"--download-bind-address=:8086", "--download-signing-key-file=/etc/cairn/download/hmac"}, nil,
			8086, "my-key", false},
		{"off", []string{"downloadServer.enabled=false", "downloadServer.urlBase=https://unused.example.com"},
			[]string{"--download-bind-address=0"}, []string{"--download-signing-key-file", "--download-url-base"},
			0, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs := documents(t, render(t, tc.set...))
			var d appsv1.Deployment
			if err := yaml.UnmarshalStrict(docs["Deployment/cairn"], &d); err != nil {
				t.Fatal(err)
			}
			c := d.Spec.Template.Spec.Containers[0]
			for _, want := range tc.wantArgs {
				if !slices.Contains(c.Args, want) {
					t.Errorf("args %q lack %s", c.Args, want)
				}
			}
			for _, prefix := range tc.unwanted {
				if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, prefix) }) {
					t.Errorf("args %q have %s", c.Args, prefix)
				}
			}

			var containerPort int32
			for _, p := range c.Ports {
				if p.Name == "download" {
					containerPort = p.ContainerPort
				}
			}
			var svc corev1.Service
			if err := yaml.UnmarshalStrict(docs["Service/cairn-metrics"], &svc); err != nil {
				t.Fatal(err)
			}
			var servicePort int32
			for _, p := range svc.Spec.Ports {
				if p.Name == "download" && p.TargetPort.StrVal == "download" {
					servicePort = p.Port
				}
			}
			if containerPort != tc.wantPort || servicePort != tc.wantPort {
				t.Errorf("download port: container %d, Service %d, want %d", containerPort, servicePort, tc.wantPort)
			}

			var volume corev1.Volume
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == "download-signing-key" {
					volume = v
				}
			}
			var mount corev1.VolumeMount
			for _, m := range c.VolumeMounts {
				if m.Name == "download-signing-key" {
					mount = m
				}
			}
			gotSecret := ""
			if volume.Secret != nil {
				gotSecret = volume.Secret.SecretName
			}
			if gotSecret != tc.wantSecret {
				t.Errorf("signing key volume from Secret %q, want %q", gotSecret, tc.wantSecret)
			}
			if tc.wantSecret != "" && (!mount.ReadOnly || mount.MountPath != "/etc/cairn/download") {
				t.Errorf("signing key mounted %+v, want read-only at /etc/cairn/download", mount)
			}

			doc, rendered := docs["Secret/cairn-download-signing-key"]
			if rendered != tc.wantOwnKey {
				t.Fatalf("Secret cairn-download-signing-key rendered: %v, want %v", rendered, tc.wantOwnKey)
			}
			if rendered {
				var secret corev1.Secret
				if err := yaml.UnmarshalStrict(doc, &secret); err != nil {
					t.Fatal(err)
				}
				if key := secret.Data["signing-key"]; len(key) < 32 {
					t.Errorf("signing key of %d bytes, want at least 32 (internal/download.KeySize)", len(key))
				}
			}
		})
	}
}

// TestAdmissionPolicies: the chart renders config/admission's policies and bindings with its
// own ServiceAccount as the operator's identity, and none with admissionPolicies.enabled=false.
func TestAdmissionPolicies(t *testing.T) {
	names := []string{
		"MutatingAdmissionPolicy/" + cairnv1.RequesterPolicyName,
		"MutatingAdmissionPolicyBinding/" + cairnv1.RequesterPolicyName,
		"ValidatingAdmissionPolicy/" + cairnv1.RequesterImmutablePolicyName,
		"ValidatingAdmissionPolicyBinding/" + cairnv1.RequesterImmutablePolicyName,
	}
	for _, tt := range []struct {
		name     string
		set      []string
		operator string // "": no policies
	}{
		{"default", nil, "system:serviceaccount:cairn-system:cairn"},
		{"a ServiceAccount of its own name", []string{"serviceAccount.name=backup-operator"}, "system:serviceaccount:cairn-system:backup-operator"},
		{"off", []string{"admissionPolicies.enabled=false"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			docs := documents(t, render(t, tt.set...))
			if tt.operator == "" {
				for _, name := range names {
					if _, ok := docs[name]; ok {
						t.Errorf("%s rendered with admissionPolicies.enabled=false", name)
					}
				}
				return
			}
			// What internal/testenv installs for the same operator, from config/admission.
			want := map[string]any{}
			objs, err := testenv.AdmissionPolicies(tt.operator)
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range objs {
				want[obj.GetKind()+"/"+obj.GetName()] = obj.Object
			}
			if len(want) != len(names) {
				t.Fatalf("config/admission has %d objects, want %v", len(want), names)
			}
			for _, name := range names {
				doc, ok := docs[name]
				if !ok {
					t.Errorf("%s not rendered", name)
					continue
				}
				var got map[string]any
				if err := yaml.Unmarshal(doc, &got); err != nil {
					t.Fatal(err)
				}
				gotJSON, _ := yaml.Marshal(got)
				wantJSON, _ := yaml.Marshal(want[name])
				if string(gotJSON) != string(wantJSON) {
					t.Errorf("%s differs from config/admission's with operator %s:\n%s", name, tt.operator, lineDiff(string(wantJSON), string(gotJSON)))
				}
			}
		})
	}
}
