package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The round trip a user tries first with a real application: an application of many
// components (its own CRDs and custom resources, cluster RBAC, workloads, services of every
// type, policies), backed up with its cluster resources, deleted entirely, and restored;
// then deleted again and restored under another namespace name. Each restore must end
// Completed without errors, and every object must come back field by field as it was,
// but for what the API server sets and what docs/restore.md says Cairn changes.
var _ = Describe("A multi-component application's round trip", func() {
	It("comes back field by field after a full delete, in place and under a namespace mapping", func() {
		const (
			ns, copyNS = "e2e-rt-ledger", "e2e-rt-ledger-copy"
			backupName = "e2e-rt-ledger"
			inPlace    = "e2e-rt-ledger"
			mapped     = "e2e-rt-ledger-copy"
		)
		deleteApplication := func(namespaces ...string) {
			GinkgoHelper()
			for _, n := range namespaces {
				kubectlOK("delete", "namespace", n, "--ignore-not-found", "--wait", "--timeout=120s")
			}
			kubectlOK("delete", "customresourcedefinitions,clusterroles,clusterrolebindings,ingressclasses",
				"-l", "app.kubernetes.io/part-of=e2e-rt-ledger", "--ignore-not-found", "--wait", "--timeout=120s")
		}
		DeferCleanup(func() {
			for _, n := range []string{ns, copyNS} {
				_, _, _ = kubectl("delete", "namespace", n, "--wait=false", "--ignore-not-found")
			}
			_, _, _ = kubectl("delete", "customresourcedefinitions,clusterroles,clusterrolebindings,ingressclasses",
				"-l", "app.kubernetes.io/part-of=e2e-rt-ledger", "--wait=false", "--ignore-not-found")
			_, _, _ = kubectl("delete", "restore", inPlace, mapped, "-n", "cairn-system", "--wait=false", "--ignore-not-found")
			_, _, _ = kubectl("delete", "backup", backupName, "-n", "cairn-system", "--wait=false", "--ignore-not-found")
		})

		By("creating the application")
		createLedgerApplication(ns)

		By("backing it up with its cluster resources")
		stderr, err := kubectlStdin(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata:
  name: %s
  namespace: cairn-system
spec:
  includedNamespaces: [%s]
  includeClusterResources: true
`, backupName, ns), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitBackupPhase("cairn-system", backupName, "Completed")
		Expect(kubectlOK("get", "backup", backupName, "-n", "cairn-system", "-o", "jsonpath={.status.errors}")).To(Or(BeEmpty(), Equal("0")))
		var contents map[string][]string
		readGzipJSON(filepath.Join(storageDir, "backups", "cairn-system", backupName, backupName+"-resource-list.json.gz"), &contents)
		Expect(contents).To(HaveKey("customresourcedefinitions.apiextensions.k8s.io"))
		Expect(contents).NotTo(HaveKey("componentstatuses"), "served without create: never backed up")
		Expect(contents).NotTo(HaveKey("ipaddresses.networking.k8s.io"), "cluster-managed: never backed up")
		Expect(contents).NotTo(HaveKey("events.events.k8s.io"))
		originals := map[ledgerRef]map[string]any{}
		for _, ref := range ledgerObjects(ns) {
			originals[ref] = getObject(ref)
		}

		By("deleting all of it: the namespace, the CRDs and their resources, the cluster RBAC")
		deleteApplication(ns)

		By("restoring it in place, with the node ports and the ledgers' status")
		stderr, err = kubectlStdin(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata:
  name: %s
  namespace: cairn-system
spec:
  backupName: %s
  includeClusterResources: true
  preserveNodePorts: true
  restoreStatus:
    includedResources: [ledgers.e2e-rt.example.com]
`, inPlace, backupName), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitRestorePhase("cairn-system", inPlace, "Completed")
		expectRestoreWithoutErrors(inPlace)
		changes := restoreChanges{backup: backupName, restore: inPlace, preserveNodePorts: true,
			statusRestored: map[string]bool{"Ledger": true}}
		for ref, original := range originals {
			expectRestored(ref, ref, original, changes)
		}

		By("deleting it again, and restoring it into another namespace")
		deleteApplication(ns)
		stderr, err = kubectlStdin(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata:
  name: %s
  namespace: cairn-system
spec:
  backupName: %s
  includeClusterResources: true
  namespaceMapping:
    %s: %s
`, mapped, backupName, ns, copyNS), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitRestorePhase("cairn-system", mapped, "Completed")
		expectRestoreWithoutErrors(mapped)
		changes = restoreChanges{backup: backupName, restore: mapped, mapping: map[string]string{ns: copyNS}}
		for ref, original := range originals {
			expectRestored(ref, ref.mapped(changes.mapping), original, changes)
		}
		_, stderr, err = kubectl("get", "namespace", ns)
		Expect(err).To(HaveOccurred(), "nothing is restored into the original namespace")
		Expect(stderr).To(ContainSubstring("not found"))

		Expect(manager.log.String()).NotTo(MatchRegexp(`Reconciler error.*the object has been modified`),
			"an optimistic-lock conflict is requeued quietly")
	})
})

// ledgerRef names one object of the application as kubectl gets it.
type ledgerRef struct {
	resource, namespace, name string
}

func (r ledgerRef) String() string { return r.resource + " " + r.namespace + "/" + r.name }

// mapped is the object a restore with this namespace mapping makes of r.
func (r ledgerRef) mapped(mapping map[string]string) ledgerRef {
	if to := mapping[r.namespace]; to != "" {
		r.namespace = to
	}
	if r.resource == "namespace" {
		if to := mapping[r.name]; to != "" {
			r.name = to
		}
	}
	return r
}

// getObject is the object r as `kubectl get -o json` prints it.
func getObject(r ledgerRef) map[string]any {
	GinkgoHelper()
	args := []string{"get", r.resource, r.name, "-o", "json"}
	if r.namespace != "" {
		args = append(args, "-n", r.namespace)
	}
	var obj map[string]any
	Expect(json.Unmarshal([]byte(kubectlOK(args...)), &obj)).To(Succeed())
	return obj
}

// ledgerObjects are every object createLedgerApplication makes in ns (and the cluster-scoped
// ones), as kubectl names them.
func ledgerObjects(ns string) []ledgerRef {
	namespaced := map[string][]string{
		"ledgers.e2e-rt.example.com":             {"main", "archive"},
		"serviceaccounts":                        {"ledger-api", "ledger-worker"},
		"roles.rbac.authorization.k8s.io":        {"ledger-worker"},
		"rolebindings.rbac.authorization.k8s.io": {"ledger-worker"},
		"secrets":                                {"ledger-db", "ledger-registry", "ledger-tls"},
		"configmaps":                             {"ledger-config", "ledger-assets"},
		"deployments.apps":                       {"ledger-api", "ledger-worker"},
		"statefulsets.apps":                      {"ledger-db"},
		"jobs.batch":                             {"ledger-migrate"},
		"horizontalpodautoscalers.autoscaling":   {"ledger-api"},
		"poddisruptionbudgets.policy":            {"ledger-api", "ledger-db"},
		"ingresses.networking.k8s.io":            {"ledger"},
		"networkpolicies.networking.k8s.io":      {"default-deny", "ledger-api"},
		"services":                               {"ledger-api", "ledger-db", "ledger-nodeport", "ledger-public", "ledger-docs"},
	}
	refs := []ledgerRef{{resource: "namespace", name: ns}}
	for resource, names := range namespaced {
		for _, name := range names {
			refs = append(refs, ledgerRef{resource: resource, namespace: ns, name: name})
		}
	}
	return append(refs,
		ledgerRef{resource: "customresourcedefinitions.apiextensions.k8s.io", name: "ledgers.e2e-rt.example.com"},
		ledgerRef{resource: "customresourcedefinitions.apiextensions.k8s.io", name: "ledgerclasses.e2e-rt.example.com"},
		ledgerRef{resource: "ledgerclasses.e2e-rt.example.com", name: "e2e-rt-standard"},
		ledgerRef{resource: "clusterroles.rbac.authorization.k8s.io", name: "e2e-rt-ledger-reader"},
		ledgerRef{resource: "clusterrolebindings.rbac.authorization.k8s.io", name: "e2e-rt-ledger-reader"},
		ledgerRef{resource: "ingressclasses.networking.k8s.io", name: "e2e-rt-ledger"},
	)
}

// restoreChanges are what a restore documents changing (docs/restore.md, "What happens to
// each item"), besides what the API server sets.
type restoreChanges struct {
	backup, restore   string
	mapping           map[string]string
	preserveNodePorts bool
	// statusRestored are the kinds restoreStatus selects: their status is compared too.
	statusRestored map[string]bool
}

// assigned stands for a value the API server assigns anew to a restored object (a cluster IP,
// a node port, a job's controller uid): such a field must be there, whatever its value.
const assigned = "<assigned by the API server>"

// comparableObject is obj with what differs on every object the API server makes removed or
// replaced by assigned, and what the restore changes applied when it is the original
// (original true): the namespace mapped, Cairn's labels added, the documented fields cleared.
// Nothing else is touched, so every other field of a restored object must equal the
// original's.
func comparableObject(obj map[string]any, original bool, ch restoreChanges) map[string]any {
	obj = deepCopyJSON(obj)
	kind, _ := obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]any)
	// Set by the API server on every object it makes.
	for _, f := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"} {
		delete(md, f)
	}
	// Removed by the restore (and set again by the API server), unless restoreStatus selects it.
	if !ch.statusRestored[kind] {
		delete(obj, "status")
	}
	if !original {
		return obj
	}
	labels, _ := md["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		md["labels"] = labels
	}
	labels["cairn.dev/backup-name"] = ch.backup
	labels["cairn.dev/restore-name"] = ch.restore
	if ns, ok := md["namespace"].(string); ok && ch.mapping[ns] != "" {
		md["namespace"] = ch.mapping[ns]
	}
	spec, _ := obj["spec"].(map[string]any)
	switch kind {
	case "Namespace":
		if to := ch.mapping[md["name"].(string)]; to != "" {
			md["name"] = to
			labels["kubernetes.io/metadata.name"] = to // the API server's label, of the new name
		}
	case "Service":
		// The cluster IPs are assigned anew (not a headless service's "None"), and the node
		// ports too unless preserveNodePorts.
		if ip, _ := spec["clusterIP"].(string); ip != "" && ip != "None" {
			spec["clusterIP"] = assigned
			spec["clusterIPs"] = []any{assigned}
		}
		if !ch.preserveNodePorts {
			ports, _ := spec["ports"].([]any)
			for _, p := range ports {
				if pm, _ := p.(map[string]any); pm["nodePort"] != nil {
					pm["nodePort"] = assigned
				}
			}
			if spec["healthCheckNodePort"] != nil {
				spec["healthCheckNodePort"] = assigned
			}
		}
	case "Job":
		// The controller-uid labels of the selector and the pod template name the new job.
		selector, _ := spec["selector"].(map[string]any)
		matchLabels, _ := selector["matchLabels"].(map[string]any)
		template, _ := spec["template"].(map[string]any)
		templateMD, _ := template["metadata"].(map[string]any)
		templateLabels, _ := templateMD["labels"].(map[string]any)
		for _, l := range []map[string]any{matchLabels, templateLabels} {
			for _, key := range []string{"controller-uid", "batch.kubernetes.io/controller-uid"} {
				if _, ok := l[key]; ok {
					l[key] = assigned
				}
			}
		}
	case "RoleBinding", "ClusterRoleBinding":
		subjects, _ := obj["subjects"].([]any)
		for _, s := range subjects {
			sm, _ := s.(map[string]any)
			if ns, _ := sm["namespace"].(string); sm["kind"] == "ServiceAccount" && ch.mapping[ns] != "" {
				sm["namespace"] = ch.mapping[ns]
			}
		}
	}
	return obj
}

// restoredComparable is a restored object made comparable: the values the API server
// assigned anew, where the original had one, replaced by assigned.
func restoredComparable(restored, want map[string]any, ch restoreChanges) map[string]any {
	got := comparableObject(restored, false, ch)
	markAssigned(got, want)
	return got
}

// markAssigned replaces in got every value that want has as assigned, when got has a value
// there (a missing one stays missing, and the comparison fails).
func markAssigned(got, want any) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return
		}
		for k, wv := range w {
			gv, present := g[k]
			switch {
			case !present:
			case wv == assigned:
				if gv != nil && gv != "" && gv != "None" {
					g[k] = assigned
				}
			case isList(wv) && len(wv.([]any)) == 1 && wv.([]any)[0] == assigned:
				if gl, _ := gv.([]any); len(gl) == 1 {
					g[k] = []any{assigned}
				}
			default:
				markAssigned(gv, wv)
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return
		}
		for i := range w {
			markAssigned(g[i], w[i])
		}
	}
}

func isList(v any) bool {
	_, ok := v.([]any)
	return ok
}

func deepCopyJSON(obj map[string]any) map[string]any {
	b, err := json.Marshal(obj)
	Expect(err).NotTo(HaveOccurred())
	var out map[string]any
	Expect(json.Unmarshal(b, &out)).To(Succeed())
	return out
}

// expectRestored compares the object at ref, restored, with original field by field.
func expectRestored(originalRef, ref ledgerRef, original map[string]any, ch restoreChanges) {
	GinkgoHelper()
	want := comparableObject(original, true, ch)
	got := restoredComparable(getObject(ref), want, ch)
	wantJSON, err := json.MarshalIndent(want, "", "  ")
	Expect(err).NotTo(HaveOccurred())
	gotJSON, err := json.MarshalIndent(got, "", "  ")
	Expect(err).NotTo(HaveOccurred())
	Expect(string(gotJSON)).To(Equal(string(wantJSON)), "%s restored as %s by %s", originalRef, ref, ch.restore)
}

// expectRestoreWithoutErrors checks a Completed restore's status and results file: no errors
// and no warnings at all (every item created, or found identical).
func expectRestoreWithoutErrors(name string) {
	GinkgoHelper()
	Expect(kubectlOK("get", "restore", name, "-n", "cairn-system", "-o", "jsonpath={.status.phase} errors={.status.errors} warnings={.status.warnings}")).
		To(Equal("Completed errors= warnings="))
	var results struct {
		Warnings, Errors struct {
			Cluster    []string            `json:"cluster"`
			Namespaces map[string][]string `json:"namespaces"`
		}
	}
	readGzipJSON(filepath.Join(storageDir, "restores", "cairn-system", name, name+"-results.gz"), &results)
	Expect(results.Errors.Cluster).To(BeEmpty())
	Expect(results.Errors.Namespaces).To(BeEmpty())
	Expect(results.Warnings.Cluster).To(BeEmpty())
	Expect(results.Warnings.Namespaces).To(BeEmpty())
}

// createLedgerApplication creates the application: a ledger service with its own API (two
// CRDs, one namespaced with a status subresource, one cluster-scoped), cluster and namespace
// RBAC, two Deployments, a StatefulSet, a Job, an HPA, two PDBs, an Ingress with its
// IngressClass, NetworkPolicies, a Service of each type, Secrets of three types, ConfigMaps
// (one with binary data) and ServiceAccounts. Everything carries
// app.kubernetes.io/part-of=e2e-rt-ledger.
func createLedgerApplication(ns string) {
	GinkgoHelper()
	crds := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ledgers.e2e-rt.example.com
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  group: e2e-rt.example.com
  scope: Namespaced
  names: {plural: ledgers, singular: ledger, kind: Ledger, shortNames: [ldg]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Currency, type: string, jsonPath: .spec.currency}
    - {name: Balance, type: integer, jsonPath: .status.balance}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [currency]
            properties:
              currency: {type: string, enum: [EUR, USD, JPY]}
              retentionDays: {type: integer, minimum: 1, default: 30}
              class: {type: string}
              accounts:
                type: array
                items:
                  type: object
                  properties:
                    name: {type: string}
                    limit: {type: integer}
          status:
            type: object
            properties:
              balance: {type: integer}
              conditions:
                type: array
                items:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ledgerclasses.e2e-rt.example.com
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  group: e2e-rt.example.com
  scope: Cluster
  names: {plural: ledgerclasses, singular: ledgerclass, kind: LedgerClass}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`
	stderr, err := kubectlStdin(crds, "create", "-f", "-")
	Expect(err).NotTo(HaveOccurred(), stderr)
	kubectlOK("wait", "--for=condition=Established", "crd/ledgers.e2e-rt.example.com", "crd/ledgerclasses.e2e-rt.example.com", "--timeout=60s")

	app := strings.ReplaceAll(`apiVersion: v1
kind: Namespace
metadata:
  name: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger, team: ledger}
  annotations: {owner: ledger-team@example.com}
---
apiVersion: e2e-rt.example.com/v1
kind: LedgerClass
metadata:
  name: e2e-rt-standard
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
tier: standard
replication: {copies: 3, zones: [a, b]}
---
apiVersion: e2e-rt.example.com/v1
kind: Ledger
metadata:
  name: main
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  currency: EUR
  class: e2e-rt-standard
  accounts: [{name: cash, limit: 1000}, {name: bank, limit: 50000}]
---
apiVersion: e2e-rt.example.com/v1
kind: Ledger
metadata:
  name: archive
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  currency: JPY
  retentionDays: 3650
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-rt-ledger-reader
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
rules:
- apiGroups: [e2e-rt.example.com]
  resources: [ledgerclasses]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [nodes]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: e2e-rt-ledger-reader
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-rt-ledger-reader}
subjects:
- {kind: ServiceAccount, name: ledger-api, namespace: NS}
- {kind: Group, apiGroup: rbac.authorization.k8s.io, name: ledger-auditors}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: e2e-rt-ledger
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  controller: example.com/ingress-controller
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: ledger-api
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
automountServiceAccountToken: false
imagePullSecrets: [{name: ledger-registry}]
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: ledger-worker
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: ledger-worker
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
rules:
- apiGroups: [e2e-rt.example.com]
  resources: [ledgers, ledgers/status]
  verbs: [get, list, watch, update, patch]
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [ledger-config]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: ledger-worker
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ledger-worker}
subjects:
- {kind: ServiceAccount, name: ledger-worker, namespace: NS}
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: alice}
---
apiVersion: v1
kind: Secret
metadata:
  name: ledger-db
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
type: Opaque
stringData: {username: ledger, password: "s3cr3t with spaces"}
---
apiVersion: v1
kind: Secret
metadata:
  name: ledger-registry
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '{"auths":{"registry.example.com":{"auth":"bGVkZ2VyOnB3"}}}'
---
apiVersion: v1
kind: Secret
metadata:
  name: ledger-tls
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
type: kubernetes.io/tls
data: {tls.crt: Y2VydA==, tls.key: a2V5}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ledger-config
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
data:
  ledger.yaml: |
    currency: EUR
    audit: true
  LOG_LEVEL: info
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ledger-assets
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
binaryData: {logo.png: iVBORw0KGgo=}
immutable: true
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: ledger-api
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger, app.kubernetes.io/name: ledger-api}
spec:
  replicas: 2
  selector: {matchLabels: {app.kubernetes.io/name: ledger-api}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  template:
    metadata:
      labels: {app.kubernetes.io/name: ledger-api}
      annotations: {prometheus.io/scrape: "true"}
    spec:
      serviceAccountName: ledger-api
      securityContext: {runAsNonRoot: true, runAsUser: 1000}
      containers:
      - name: api
        image: registry.example.com/ledger/api:1.4.2
        args: [--config, /etc/ledger/ledger.yaml]
        ports: [{name: http, containerPort: 8080}]
        envFrom: [{configMapRef: {name: ledger-config}}]
        env:
        - name: DB_PASSWORD
          valueFrom: {secretKeyRef: {name: ledger-db, key: password}}
        resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 256Mi}}
        readinessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 5}
        volumeMounts: [{name: config, mountPath: /etc/ledger}, {name: tls, mountPath: /etc/tls, readOnly: true}]
      volumes:
      - {name: config, configMap: {name: ledger-config}}
      - {name: tls, secret: {secretName: ledger-tls}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: ledger-worker
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger, app.kubernetes.io/name: ledger-worker}
spec:
  replicas: 1
  selector: {matchLabels: {app.kubernetes.io/name: ledger-worker}}
  template:
    metadata:
      labels: {app.kubernetes.io/name: ledger-worker}
    spec:
      serviceAccountName: ledger-worker
      containers:
      - name: worker
        image: registry.example.com/ledger/worker:1.4.2
        command: [ledger-worker, --queue=settlements]
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ledger-db
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger, app.kubernetes.io/name: ledger-db}
spec:
  serviceName: ledger-db
  replicas: 3
  podManagementPolicy: Parallel
  selector: {matchLabels: {app.kubernetes.io/name: ledger-db}}
  template:
    metadata:
      labels: {app.kubernetes.io/name: ledger-db}
    spec:
      containers:
      - name: db
        image: registry.example.com/postgres:17
        ports: [{name: pg, containerPort: 5432}]
        env:
        - name: POSTGRES_PASSWORD
          valueFrom: {secretKeyRef: {name: ledger-db, key: password}}
        volumeMounts: [{name: data, mountPath: /var/lib/postgresql/data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: ledger-migrate
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  backoffLimit: 2
  ttlSecondsAfterFinished: 86400
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: registry.example.com/ledger/api:1.4.2
        args: [migrate, --to=latest]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: ledger-api
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: ledger-api}
  minReplicas: 2
  maxReplicas: 10
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 70}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: ledger-api
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  minAvailable: 1
  selector: {matchLabels: {app.kubernetes.io/name: ledger-api}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: ledger-db
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app.kubernetes.io/name: ledger-db}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ledger
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
  annotations: {example.com/rewrite-target: /}
spec:
  ingressClassName: e2e-rt-ledger
  tls: [{hosts: [ledger.example.com], secretName: ledger-tls}]
  rules:
  - host: ledger.example.com
    http:
      paths:
      - {path: /api, pathType: Prefix, backend: {service: {name: ledger-api, port: {name: http}}}}
      - {path: /docs, pathType: Exact, backend: {service: {name: ledger-docs, port: {number: 443}}}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: default-deny
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  podSelector: {}
  policyTypes: [Ingress, Egress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: ledger-api
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  podSelector: {matchLabels: {app.kubernetes.io/name: ledger-api}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress-system}}
    - podSelector: {matchLabels: {app.kubernetes.io/name: ledger-worker}}
    ports: [{protocol: TCP, port: 8080}]
---
apiVersion: v1
kind: Service
metadata:
  name: ledger-api
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  type: ClusterIP
  selector: {app.kubernetes.io/name: ledger-api}
  ports: [{name: http, port: 80, targetPort: http}]
  sessionAffinity: ClientIP
---
apiVersion: v1
kind: Service
metadata:
  name: ledger-db
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  clusterIP: None
  selector: {app.kubernetes.io/name: ledger-db}
  ports: [{name: pg, port: 5432}]
  publishNotReadyAddresses: true
---
apiVersion: v1
kind: Service
metadata:
  name: ledger-nodeport
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  type: NodePort
  selector: {app.kubernetes.io/name: ledger-api}
  ports: [{name: http, port: 80, targetPort: 8080}, {name: admin, port: 9090, targetPort: 9090, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata:
  name: ledger-public
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
  annotations: {example.com/load-balancer-scheme: internet-facing}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  selector: {app.kubernetes.io/name: ledger-api}
  ports: [{name: https, port: 443, targetPort: 8080}]
  loadBalancerSourceRanges: [203.0.113.0/24]
---
apiVersion: v1
kind: Service
metadata:
  name: ledger-docs
  namespace: NS
  labels: {app.kubernetes.io/part-of: e2e-rt-ledger}
spec:
  type: ExternalName
  externalName: docs.ledger.example.com
  ports: [{port: 443}]
`, "NS", ns)
	stderr, err = kubectlStdin(app, "create", "-f", "-")
	Expect(err).NotTo(HaveOccurred(), stderr)
	// A status only the ledgers' controller would write, restored with restoreStatus.
	kubectlOK("patch", "ledger", "main", "-n", ns, "--subresource=status", "--type=merge",
		"-p", `{"status":{"balance":51000,"conditions":[{"type":"Balanced","status":"True","reason":"Reconciled"}]}}`)
}
