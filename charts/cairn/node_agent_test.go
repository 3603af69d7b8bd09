package cairn_test

// The node agent's part of the chart (DESIGN.md section 16, docs/volumes.md): its DaemonSet,
// the manager's flags and port for the blob proxy, the repository Service, and none of it with
// nodeAgent.enabled=false. rbac_test.go asks a real API server what its RBAC grants.

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// decodeDoc decodes the rendered object key (kind/name) strictly into obj; false if there is none.
func decodeDoc(t *testing.T, docs map[string][]byte, key string, obj any) bool {
	t.Helper()
	doc, ok := docs[key]
	if !ok {
		return false
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return true
}

// nodeAgentCase is one rendering of the chart with the node agent on, and the names and flags
// it must have.
type nodeAgentCase struct {
	name           string
	set            []string
	fullname       string
	serviceAccount string
	chartSA        bool // the chart renders the node agent's ServiceAccount
	port           int32
	podsDir        string // the hostPath
	managerArgs    []string
	agentArgs      []string // all of them, in order
	gomemlimit     string
	tlsSecret      string // the Secret of the blob proxy's certificate
}

func TestNodeAgent(t *testing.T) {
	cases := []nodeAgentCase{
		{name: "default", fullname: "cairn", serviceAccount: "cairn-node-agent", chartSA: true, port: 8445,
			podsDir: "/var/lib/kubelet/pods", gomemlimit: "200MiB",
			tlsSecret: "cairn-repository-tls",
			managerArgs: []string{"--repository-server-bind-address=:8445", "--node-agent-service-account=cairn-node-agent",
				"--repository-server-tls-secret=cairn-repository-tls", "--repository-server-service=cairn-repository",
				"--repository-password-secret=cairn-repository-passwords", "--repository-maintenance-interval=1h", "--repository-maintenance-timeout=30m"},
			agentArgs: []string{"node-agent", "--namespace=cairn-system", "--node-name=$(NODE_NAME)", "--pods-dir=/host/pods",
				"--repository-server=https://cairn-repository.cairn-system.svc:8445",
				"--repository-server-ca-file=/etc/cairn/repository-ca/ca.crt", "--token-file=/var/run/secrets/cairn/repository/token",
				"--repository-password-secret=cairn-repository-passwords", "--health-probe-bind-address=:8083", "--metrics-bind-address=:8082",
				"--restore-parallelism=2", "--max-concurrent-copies=2", "--empty-dir-restore-capacity=50Gi", "--zap-log-level=info"}},
		{name: "values", fullname: "backup", serviceAccount: "agent", chartSA: true, port: 9445,
			set: []string{"fullnameOverride=backup", "nodeAgent.repositoryServer.port=9445", "nodeAgent.kubeletDir=/var/lib/k0s/kubelet/",
				"nodeAgent.serviceAccount.name=agent", "nodeAgent.gomemlimit=1GiB", "logLevel=debug",
				"repositoryMaintenance.interval=6h", "repositoryMaintenance.timeout=2h",
				"nodeAgent.maxConcurrentCopies=4", "nodeAgent.emptyDirRestoreCapacity=8Gi", "nodeAgent.repositoryServer.tls.existingSecret=my-tls"},
			podsDir: "/var/lib/k0s/kubelet/pods", gomemlimit: "1GiB", tlsSecret: "my-tls",
			managerArgs: []string{"--repository-server-bind-address=:9445", "--node-agent-service-account=agent",
				"--repository-server-tls-secret=my-tls", "--repository-server-service=backup-repository",
				"--repository-password-secret=backup-repository-passwords", "--repository-maintenance-interval=6h", "--repository-maintenance-timeout=2h"},
			agentArgs: []string{"node-agent", "--namespace=cairn-system", "--node-name=$(NODE_NAME)", "--pods-dir=/host/pods",
				"--repository-server=https://backup-repository.cairn-system.svc:9445",
				"--repository-server-ca-file=/etc/cairn/repository-ca/ca.crt", "--token-file=/var/run/secrets/cairn/repository/token",
				"--repository-password-secret=backup-repository-passwords", "--health-probe-bind-address=:8083", "--metrics-bind-address=:8082",
				"--restore-parallelism=2", "--max-concurrent-copies=4", "--empty-dir-restore-capacity=8Gi", "--zap-log-level=debug"}},
		{name: "an existing ServiceAccount", fullname: "cairn", serviceAccount: "existing", chartSA: false, port: 8445,
			set:     []string{"nodeAgent.serviceAccount.create=false", "nodeAgent.serviceAccount.name=existing"},
			podsDir: "/var/lib/kubelet/pods", gomemlimit: "200MiB", tlsSecret: "cairn-repository-tls",
			managerArgs: []string{"--repository-server-bind-address=:8445", "--node-agent-service-account=existing"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs := documents(t, render(t, tc.set...))
			var d appsv1.Deployment
			if !decodeDoc(t, docs, "Deployment/"+tc.fullname, &d) {
				t.Fatalf("no Deployment %s", tc.fullname)
			}
			manager := d.Spec.Template.Spec.Containers[0]
			for _, want := range tc.managerArgs {
				if !slices.Contains(manager.Args, want) {
					t.Errorf("manager args %q lack %s", manager.Args, want)
				}
			}
			if p := containerPort(manager, "repository"); p != tc.port {
				t.Errorf("manager's repository port %d, want %d", p, tc.port)
			}
			// A restored pod's helper is the manager's own image.
			if want := "--restore-helper-image=" + manager.Image; !slices.Contains(manager.Args, want) {
				t.Errorf("manager args %q lack %s", manager.Args, want)
			}

			var ds appsv1.DaemonSet
			if !decodeDoc(t, docs, "DaemonSet/"+tc.fullname+"-node-agent", &ds) {
				t.Fatalf("no DaemonSet %s-node-agent", tc.fullname)
			}
			checkNodeAgentPod(t, tc, ds, manager)
			checkRepositoryCA(t, ds.Spec.Template.Spec, tc.tlsSecret)

			// The agent's pods are not the manager's: the Deployment, its PodDisruptionBudget
			// and its Services select component=manager only.
			agentPods := labels.Set(ds.Spec.Template.Labels)
			if selects(d.Spec.Selector.MatchLabels, agentPods) {
				t.Errorf("the manager's Deployment selects the node agent's pods %v", agentPods)
			}
			var svc corev1.Service
			if !decodeDoc(t, docs, "Service/"+tc.fullname+"-repository", &svc) {
				t.Fatalf("no Service %s-repository", tc.fullname)
			}
			if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != tc.port ||
				svc.Spec.Ports[0].TargetPort.StrVal != "repository" {
				t.Errorf("Service %s-repository: %+v", tc.fullname, svc.Spec)
			}
			if !selects(svc.Spec.Selector, labels.Set(d.Spec.Template.Labels)) || selects(svc.Spec.Selector, agentPods) {
				t.Errorf("Service %s-repository selects %v: want the manager's pods only", tc.fullname, svc.Spec.Selector)
			}

			_, sa := docs["ServiceAccount/"+tc.serviceAccount]
			if sa != tc.chartSA {
				t.Errorf("ServiceAccount %s rendered: %v, want %v", tc.serviceAccount, sa, tc.chartSA)
			}
			checkNodeAgentRBAC(t, docs, tc.fullname+"-node-agent", tc.serviceAccount, tc.fullname+"-repository-passwords")
		})
	}
}

// checkNodeAgentPod checks the node agent's pod: the manager's image, its flags, and the least
// privilege that reads every volume.
func checkNodeAgentPod(t *testing.T, tc nodeAgentCase, ds appsv1.DaemonSet, manager corev1.Container) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != manager.Image || len(c.Command) != 0 {
		t.Errorf("image %s command %q: want the manager's image %s and its entrypoint", c.Image, c.Command, manager.Image)
	}
	if tc.agentArgs != nil && !slices.Equal(c.Args, tc.agentArgs) {
		t.Errorf("args\n%q\nwant\n%q", c.Args, tc.agentArgs)
	}
	if pod.ServiceAccountName != tc.serviceAccount || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("serviceAccountName %q, automount %v: want %s with its token", pod.ServiceAccountName, pod.AutomountServiceAccountToken, tc.serviceAccount)
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("the pod shares the node's namespaces")
	}

	env := map[string]corev1.EnvVar{}
	for _, v := range c.Env {
		env[v.Name] = v
	}
	if v := env["NODE_NAME"]; v.ValueFrom == nil || v.ValueFrom.FieldRef == nil || v.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME is %+v, want the fieldRef spec.nodeName", v)
	}
	if env["GOMEMLIMIT"].Value != tc.gomemlimit || env["TMPDIR"].Value != "/tmp" {
		t.Errorf("GOMEMLIMIT %q, TMPDIR %q; want %s and /tmp", env["GOMEMLIMIT"].Value, env["TMPDIR"].Value, tc.gomemlimit)
	}
	if containerPort(c, "metrics") != 8082 || containerPort(c, "probes") != 8083 {
		t.Errorf("ports %+v, want metrics 8082 and probes 8083", c.Ports)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.LivenessProbe.HTTPGet.Port.StrVal != "probes" ||
		c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port.StrVal != "probes" {
		t.Errorf("probes: liveness %+v, readiness %+v", c.LivenessProbe, c.ReadinessProbe)
	}

	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no securityContext")
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("privileged")
	case sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot:
		t.Errorf("runAsUser %v runAsNonRoot %v: want root, which an added capability needs", sc.RunAsUser, sc.RunAsNonRoot)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("the root filesystem is writable")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"DAC_OVERRIDE", "CHOWN", "FOWNER"}):
		t.Errorf("capabilities %+v, want all dropped but DAC_OVERRIDE, CHOWN and FOWNER", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccompProfile %+v", sc.SeccompProfile)
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	if len(volumes) != 4 || len(mounts) != 4 {
		t.Errorf("volumes %v, mounts %v: want pods, repository-token, repository-ca and tmp only", pod.Volumes, c.VolumeMounts)
	}
	pods, m := volumes["pods"], mounts["pods"]
	if pods.HostPath == nil || pods.HostPath.Path != tc.podsDir {
		t.Errorf("volume pods %+v, want the hostPath %s", pods.VolumeSource, tc.podsDir)
	}
	if m.MountPath != "/host/pods" || m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("mount of pods %+v, want /host/pods read-write (restores write) with HostToContainer propagation", m)
	}
	token, m := volumes["repository-token"], mounts["repository-token"]
	if token.Projected == nil || len(token.Projected.Sources) != 1 || token.Projected.Sources[0].ServiceAccountToken == nil {
		t.Fatalf("volume repository-token %+v, want a projected ServiceAccount token", token.VolumeSource)
	}
	sat := token.Projected.Sources[0].ServiceAccountToken
	if sat.Audience != "cairn-repository" || sat.ExpirationSeconds == nil || *sat.ExpirationSeconds != 3600 ||
		m.MountPath+"/"+sat.Path != "/var/run/secrets/cairn/repository/token" || !m.ReadOnly {
		t.Errorf("repository token %+v mounted %+v: want audience cairn-repository, 1h, at the --token-file", sat, m)
	}
	tmp, m := volumes["tmp"], mounts["tmp"]
	if tmp.EmptyDir == nil || tmp.EmptyDir.Medium != corev1.StorageMediumMemory || tmp.EmptyDir.SizeLimit == nil ||
		tmp.EmptyDir.SizeLimit.String() != "64Mi" || m.MountPath != "/tmp" {
		t.Errorf("volume tmp %+v mounted at %s, want an in-memory emptyDir of 64Mi at /tmp", tmp.VolumeSource, m.MountPath)
	}
}

// checkRepositoryCA checks that the agent verifies the blob proxy with the ca.crt of its TLS
// Secret, mounted alone (never the key), at the --repository-server-ca-file.
func checkRepositoryCA(t *testing.T, pod corev1.PodSpec, secret string) {
	t.Helper()
	c := pod.Containers[0]
	var vol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == "repository-ca" {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != secret ||
		!slices.Equal(vol.Secret.Items, []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}) {
		t.Fatalf("volume repository-ca %+v, want the item ca.crt alone of Secret %s", vol, secret)
	}
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == "repository-ca" {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly || !slices.Contains(c.Args, "--repository-server-ca-file="+mount.MountPath+"/ca.crt") {
		t.Errorf("mount of repository-ca %+v, args %q: want it read-only at the --repository-server-ca-file", mount, c.Args)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--repository-server=") && !strings.HasPrefix(a, "--repository-server=https://") {
			t.Errorf("%s: want https", a)
		}
	}
}

// checkNodeAgentRBAC checks that the node agent's Role and ClusterRole are bound to its
// ServiceAccount, and that the one Secret it may read is the one the manager and the agent are
// told about.
func checkNodeAgentRBAC(t *testing.T, docs map[string][]byte, name, serviceAccount, passwordSecret string) {
	t.Helper()
	var role rbacv1.Role
	if !decodeDoc(t, docs, "Role/"+name, &role) {
		t.Fatalf("no Role %s", name)
	}
	var secretRules int
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "secrets") {
			secretRules++
			if !slices.Equal(r.ResourceNames, []string{passwordSecret}) || !slices.Equal(r.Verbs, []string{"get"}) {
				t.Errorf("Role %s's rule on Secrets %+v, want get of %s only", name, r, passwordSecret)
			}
		}
	}
	if secretRules != 1 {
		t.Errorf("Role %s has %d rules on Secrets, want 1", name, secretRules)
	}
	for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
		var b rbacv1.RoleBinding // the same fields as a ClusterRoleBinding
		if !decodeDoc(t, docs, kind+"/"+name, &b) {
			t.Errorf("no %s %s", kind, name)
			continue
		}
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: "cairn-system"}}
		if !slices.Equal(b.Subjects, want) || b.RoleRef.Name != name {
			t.Errorf("%s %s binds %s to %v, want %s to %v", kind, name, b.RoleRef.Name, b.Subjects, name, want)
		}
	}
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// selects says whether the selector (matchLabels) matches the labels.
func selects(selector map[string]string, l labels.Set) bool {
	return labels.SelectorFromSet(selector).Matches(l)
}

// TestNodeAgentDisabled: nodeAgent.enabled=false renders no DaemonSet, repository Service or
// node agent RBAC, turns the manager's blob proxy off, and the notes say volume data is off.
func TestNodeAgentDisabled(t *testing.T) {
	set := []string{"nodeAgent.enabled=false"}
	out := render(t, set...)
	docs := documents(t, out)
	for key, doc := range docs {
		if strings.HasPrefix(key, "DaemonSet/") || strings.Contains(key, "node-agent") || key == "Service/cairn-repository" ||
			strings.Contains(string(doc), "app.kubernetes.io/component: node-agent") {
			t.Errorf("%s rendered with nodeAgent.enabled=false", key)
		}
	}
	var d appsv1.Deployment
	if !decodeDoc(t, docs, "Deployment/cairn", &d) {
		t.Fatal("no Deployment")
	}
	c := d.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--repository-server-bind-address=0", "--repository-password-secret=cairn-repository-passwords",
		"--repository-maintenance-interval=1h", "--repository-maintenance-timeout=30m"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	if slices.ContainsFunc(c.Args, func(a string) bool {
		return strings.HasPrefix(a, "--node-agent-service-account") || strings.HasPrefix(a, "--restore-helper-image")
	}) {
		t.Errorf("args %q name a node agent ServiceAccount or a restore helper: with no node agent, no volume data is restored", c.Args)
	}
	if p := containerPort(c, "repository"); p != 0 {
		t.Errorf("a repository port %d", p)
	}
	notes, err := helm(t, append([]string{"install", "cairn", ".", "--dry-run=client", "--namespace", "cairn-system"}, setArgs(set)...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notes, "The node agent is off") {
		t.Errorf("the notes do not say the node agent is off:\n%s", notes)
	}
}

// TestNodeAgentWithoutRBAC: rbac.create=false leaves the node agent's RBAC out too, not its
// ServiceAccount.
func TestNodeAgentWithoutRBAC(t *testing.T) {
	docs := documents(t, render(t, "rbac.create=false"))
	for _, key := range []string{"Role/cairn-node-agent", "RoleBinding/cairn-node-agent", "ClusterRole/cairn-node-agent", "ClusterRoleBinding/cairn-node-agent"} {
		if _, ok := docs[key]; ok {
			t.Errorf("%s rendered with rbac.create=false", key)
		}
	}
	for _, key := range []string{"ServiceAccount/cairn-node-agent", "DaemonSet/cairn-node-agent"} {
		if _, ok := docs[key]; !ok {
			t.Errorf("no %s with rbac.create=false", key)
		}
	}
}

// TestRepositoryPortClash: a repository port that is another of the manager's ports fails the
// install with a message naming the value.
func TestRepositoryPortClash(t *testing.T) {
	for _, set := range [][]string{
		{"nodeAgent.repositoryServer.port=8080"},
		{"nodeAgent.repositoryServer.port=8081"},
		{"nodeAgent.repositoryServer.port=8086"},
		{"nodeAgent.repositoryServer.port=9000", "downloadServer.port=9000"},
	} {
		_, err := helm(t, append([]string{"template", "cairn", "."}, setArgs(set)...)...)
		if err == nil || !strings.Contains(err.Error(), "nodeAgent.repositoryServer.port") {
			t.Errorf("%v: %v, want an error naming nodeAgent.repositoryServer.port", set, err)
		}
	}
	if _, err := helm(t, "template", "cairn", ".", "--set", "nodeAgent.repositoryServer.port=8086", "--set", "downloadServer.enabled=false"); err != nil {
		t.Errorf("the download server's port, with the download server off: %v", err)
	}
}
