package queue_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
)

// The bad-input table, part two: what a tenant or an administrator can get past the API
// server, run through the real reconcilers. Part one, what the API server refuses, is
// api/v1alpha1/validation_test.go; docs/validation.md says what is checked where.

// badInput is one case: an object created from raw JSON (so that it reaches the API server as
// written, including values a Go client cannot even hold), and where it must be stopped.
type badInput struct {
	// kind is Backup when empty.
	kind            string
	namespace, name string
	spec            string
	// refused: the API server refuses the object with want in its message. Otherwise the
	// backup ends FailedValidation with want in status.validationErrors.
	refused bool
	want    string
}

const (
	badInputTeam     = "badinput-team"
	badInputReadOnly = "badinput-readonly"
	badInputRelative = "badinput-relative"
)

var badInputs = []badInput{
	// The issue's own report: one tenant Backup whose ttl overflows Go's duration parser made
	// the manager's informer fail to list every Backup.
	{namespace: "default", name: "overflow-ttl", spec: `{"ttl":"9999999999999h"}`, refused: true,
		want: "ttl must be 0s (never expire) or a duration from 1s to 87600h"},
	{namespace: badInputTeam, name: "overflow-timeout", spec: `{"itemOperationTimeout":"2562048h"}`, refused: true,
		want: "itemOperationTimeout must be a duration from 1s to 87600h"},
	{namespace: badInputTeam, name: "tiny-ttl", spec: `{"ttl":"1ns"}`, refused: true,
		want: "ttl must be 0s (never expire) or a duration from 1s to 87600h"},
	{namespace: badInputTeam, name: "too-many-namespaces", spec: fmt.Sprintf(`{"excludedNamespaces":[%s]}`, strings.TrimSuffix(strings.Repeat(`"x",`, 101), ",")), refused: true,
		want: "spec.excludedNamespaces: Too many"},
	{kind: "BackupStorageLocation", namespace: OperatorNamespace, name: "climbing-prefix",
		spec: `{"provider":"filesystem","config":{"path":"/var/lib/cairn"},"objectStorage":{"prefix":"team-a/../team-b"}}`, refused: true,
		want: "objectStorage.prefix must not have a '.' or '..' path segment"},
	{kind: "BackupStorageLocation", namespace: OperatorNamespace, name: "overflow-frequency",
		spec: `{"provider":"filesystem","config":{"path":"/var/lib/cairn"},"validationFrequency":"9999999999999h"}`, refused: true,
		want: "validationFrequency must be 0s (off) or a duration from 1s to 87600h"},

	// Tenant tricks: a Backup outside the operator's namespace reaches only its own namespace.
	{namespace: badInputTeam, name: "tenant-kube-system", spec: `{"includedNamespaces":["kube-system"]}`,
		want: `a backup in namespace badinput-team may only back up its own namespace, not "kube-system"`},
	{namespace: badInputTeam, name: "tenant-star", spec: `{"includedNamespaces":["*"]}`,
		want: `may only back up its own namespace, not "*"`},
	{namespace: badInputTeam, name: "tenant-pattern", spec: `{"includedNamespaces":["badinput-*"]}`,
		want: `may only back up its own namespace, not "badinput-*"`},
	{namespace: badInputTeam, name: "tenant-own-and-other", spec: `{"includedNamespaces":["badinput-team","default"]}`,
		want: `may only back up its own namespace, not "default"`},
	{namespace: badInputTeam, name: "tenant-cluster", spec: `{"includeClusterResources":true}`,
		want: "spec.includeClusterResources: a backup in namespace badinput-team cannot include cluster-scoped resources"},
	{namespace: badInputTeam, name: "tenant-everything-wrong", spec: `{"includedNamespaces":["kube-system"],"includeClusterResources":true,"includedResources":["Secrets"],"storageLocation":"nowhere"}`,
		want: `spec.includedResources: "Secrets" must be lowercase`},

	// Label selectors: sizes are checked at admission, contents here.
	{namespace: OperatorNamespace, name: "selector-operator", spec: `{"labelSelector":{"matchExpressions":[{"key":"app","operator":"Maybe"}]}}`,
		want: `spec.labelSelector: "Maybe" is not a valid label selector operator`},
	{namespace: OperatorNamespace, name: "selector-key", spec: `{"labelSelector":{"matchExpressions":[{"key":"-bad-","operator":"Exists"}]}}`,
		want: `spec.labelSelector: key: Invalid value: "-bad-"`},
	{namespace: OperatorNamespace, name: "selector-in-empty", spec: `{"labelSelector":{"matchExpressions":[{"key":"app","operator":"In","values":[]}]}}`,
		want: "values set can't be empty"},
	{namespace: OperatorNamespace, name: "selector-exists-values", spec: `{"orLabelSelectors":[{},{},{"matchExpressions":[{"key":"app","operator":"Exists","values":["x"]}]}]}`,
		want: "spec.orLabelSelectors[2]: values: Invalid value"},
	{namespace: OperatorNamespace, name: "selector-value", spec: `{"labelSelector":{"matchLabels":{"app":"not valid!"}}}`,
		want: `Invalid value: "not valid!"`},
	{namespace: OperatorNamespace, name: "selector-long-value", spec: fmt.Sprintf(`{"labelSelector":{"matchLabels":{"app":%q}}}`, strings.Repeat("v", 64)),
		want: "must be no more than 63 bytes"},
	{namespace: OperatorNamespace, name: "selector-key-slashes", spec: `{"labelSelector":{"matchLabels":{"a/b/c":"x"}}}`,
		want: `key: Invalid value: "a/b/c"`},
	{namespace: OperatorNamespace, name: "selector-both", spec: `{"labelSelector":{},"orLabelSelectors":[{}]}`,
		want: "spec.labelSelector and spec.orLabelSelectors cannot be used together"},

	// Odd namespace and resource names.
	{namespace: OperatorNamespace, name: "namespace-capitals", spec: `{"includedNamespaces":["Team-A"]}`,
		want: `spec.includedNamespaces: "Team-A" is not a valid namespace name`},
	{namespace: OperatorNamespace, name: "namespace-underscore", spec: `{"excludedNamespaces":["ns_1"]}`,
		want: `spec.excludedNamespaces: "ns_1" is not a valid namespace name`},
	{namespace: OperatorNamespace, name: "namespace-bracket", spec: `{"includedNamespaces":["team-["]}`,
		want: `spec.includedNamespaces: "team-[" is not a valid wildcard pattern`},
	{namespace: OperatorNamespace, name: "resource-capitals", spec: `{"includedResources":["Deployments"]}`,
		want: `spec.includedResources: "Deployments" must be lowercase`},
	{namespace: OperatorNamespace, name: "resource-slash", spec: `{"includedResources":["apps/deployments"]}`,
		want: `spec.includedResources: "apps/deployments" is not a resource name`},
	{namespace: OperatorNamespace, name: "resource-space", spec: `{"excludedResources":[" secrets"]}`,
		want: `spec.excludedResources: " secrets" is not a resource name`},
	{namespace: OperatorNamespace, name: "resource-exclude-all", spec: `{"excludedResources":["*"]}`,
		want: `spec.excludedResources: "*" would exclude every resource`},

	// Storage locations that cannot take a backup.
	{namespace: badInputTeam, name: "location-missing", spec: `{"storageLocation":"nowhere"}`,
		want: `spec.storageLocation: storage location "nowhere" does not exist in namespace cairn-system`},
	{namespace: OperatorNamespace, name: "location-readonly", spec: fmt.Sprintf(`{"storageLocation":%q}`, badInputReadOnly),
		want: "storage location badinput-readonly is ReadOnly"},
	{namespace: OperatorNamespace, name: "location-unavailable", spec: fmt.Sprintf(`{"storageLocation":%q}`, badInputRelative),
		want: "storage location badinput-relative is not Available"},
}

// createRawObject creates an object of kind from raw JSON.
func createRawObject(kind, namespace, name, spec string) error {
	u := &unstructured.Unstructured{}
	Expect(u.UnmarshalJSON([]byte(fmt.Sprintf(`{"apiVersion":"cairn.dev/v1alpha1","kind":%q,"metadata":{"name":%q,"namespace":%q},"spec":%s}`,
		kind, name, namespace, spec)))).To(Succeed())
	return K8sClient.Create(SuiteCtx, u)
}

var _ = Describe("Bad input", Ordered, func() {
	var store *storage.Filesystem

	BeforeAll(func() {
		var def *cairnv1.BackupStorageLocation
		store, def = CreateDefaultLocation("badinput-default")
		readOnly := FilesystemSpec(GinkgoT().TempDir())
		readOnly.AccessMode = cairnv1.AccessModeReadOnly
		for name, spec := range map[string]cairnv1.BackupStorageLocationSpec{
			badInputReadOnly: readOnly,
			badInputRelative: FilesystemSpec("relative/dir"), // passes admission, fails validation
		} {
			bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: OperatorNamespace}, Spec: spec}
			Expect(K8sClient.Create(SuiteCtx, bsl)).To(Succeed())
			DeferCleanup(func() { Expect(K8sClient.Delete(SuiteCtx, bsl)).To(Succeed()) })
		}
		EnsureNamespace(badInputTeam)
		CreateObject(ConfigMap(badInputTeam, "settings", nil))

		DeferCleanup(StartManager(controller.Config{ConcurrentBackups: 1}))
		EventuallyLocation(def, cairnv1.StorageLocationPhaseAvailable, "")
	})

	AfterAll(func() { DeleteAllBackups() })

	It("refuses each bad object at admission, or ends it in FailedValidation, with a clear message", func() {
		for _, c := range badInputs {
			kind := c.kind
			if kind == "" {
				kind = "Backup"
			}
			err := createRawObject(kind, c.namespace, c.name, c.spec)
			if c.refused {
				Expect(err).To(HaveOccurred(), c.name)
				Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", c.name, err)
				Expect(err.Error()).To(ContainSubstring(c.want), c.name)
				continue
			}
			Expect(err).NotTo(HaveOccurred(), c.name)
		}
		for _, c := range badInputs {
			if c.refused {
				continue
			}
			Eventually(func(g Gomega) {
				b := GetBackup(c.namespace, c.name)
				g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseFailedValidation), "%s: validationErrors %v", c.name, b.Status.ValidationErrors)
				g.Expect(strings.Join(b.Status.ValidationErrors, "\n")).To(ContainSubstring(c.want), c.name)
				g.Expect(len(b.Status.ValidationErrors)).To(BeNumerically("<=", cairnv1.MaxValidationErrors), c.name)
				for _, msg := range b.Status.ValidationErrors {
					g.Expect(len(msg)).To(BeNumerically("<=", cairnv1.MaxValidationErrorLength), c.name)
				}
			}).WithTimeout(30*time.Second).Should(Succeed(), c.name)
		}
	})

	It("still serves ordinary backups created after all of them, a max-size one included", func() {
		CreateBackup(badInputTeam, "ordinary", cairnv1.BackupSpec{})
		Eventually(func() cairnv1.BackupPhase { return GetBackup(badInputTeam, "ordinary").Status.Phase }).
			WithTimeout(60 * time.Second).Should(Equal(cairnv1.BackupPhaseCompleted))
		CommittedEntries(store, badInputTeam, "ordinary")

		// The largest spec admission lets through is served too (its unknown names are warnings).
		Expect(createRawObject("Backup", OperatorNamespace, "max-size", maxSizeSpec())).To(Succeed())
		Eventually(func(g Gomega) {
			b := GetBackup(OperatorNamespace, "max-size")
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted), "validationErrors %v, failureReason %q", b.Status.ValidationErrors, b.Status.FailureReason)
		}).WithTimeout(60 * time.Second).Should(Succeed())
	})
})

// maxSizeSpec is a valid administrator's spec at every list limit of the CRD: 100 namespace
// patterns of 63 characters included and excluded, 100 resource names of 253 characters
// included and excluded, 20 orLabelSelectors of 20 matchLabels and 20 matchExpressions each.
func maxSizeSpec() string {
	names := func(width int) string {
		items := make([]string, 100)
		for i := range items {
			s := fmt.Sprintf("n%d-", i)
			items[i] = fmt.Sprintf("%q", s+strings.Repeat("a", width-len(s)))
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	labels := make([]string, 20)
	expressions := make([]string, 20)
	for i := range labels {
		labels[i] = fmt.Sprintf(`"key-%d":"value"`, i)
		expressions[i] = fmt.Sprintf(`{"key":"expr-%d","operator":"In","values":["a","b","c"]}`, i)
	}
	selector := fmt.Sprintf(`{"matchLabels":{%s},"matchExpressions":[%s]}`, strings.Join(labels, ","), strings.Join(expressions, ","))
	selectors := strings.TrimSuffix(strings.Repeat(selector+",", 20), ",")
	return fmt.Sprintf(`{"includedNamespaces":%s,"excludedNamespaces":%s,"includedResources":%s,"excludedResources":%s,"orLabelSelectors":[%s]}`,
		names(63), names(63), names(253), names(253), selectors)
}
