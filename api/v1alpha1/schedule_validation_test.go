package v1alpha1_test

import (
	"os"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

var _ = Describe("Schedule CRD", func() {
	It("lets the template be edited: the next runs use it", func() {
		s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("s"), Namespace: "default"},
			Spec: cairnv1.ScheduleSpec{Schedule: "@daily", Template: cairnv1.BackupSpec{IncludedResources: []string{"configmaps"}}}}
		Expect(k8sClient.Create(ctx, s)).To(Succeed())
		Expect(mergePatch(s, `{"spec":{"schedule":"CRON_TZ=Europe/Paris 0 3 * * *","template":{"includedResources":["secrets"],"storageLocation":"other"},"paused":true}}`)).To(Succeed())
		var got cairnv1.Schedule
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(s), &got)).To(Succeed())
		Expect(got.Spec.Template.IncludedResources).To(Equal([]string{"secrets"}))
		Expect(got.Spec.Template.StorageLocation).To(Equal("other"))
		Expect(got.Spec.Schedule).To(Equal("CRON_TZ=Europe/Paris 0 3 * * *"))
	})

	It("checks the template's fields as a Backup's", func() {
		err := createRaw("Schedule", "", `{"schedule":"@daily","template":{"storageLocation":"Not A Name"}}`)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("spec.template.storageLocation"))
	})

	It("refuses an empty schedule", func() {
		err := createRaw("Schedule", "", `{"schedule":""}`)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("spec.schedule"))
	})

	It("refuses a name that leaves no room for the backups' timestamps", func() {
		Expect(createRaw("Schedule", longName(185), `{"schedule":"@daily"}`)).To(Succeed())
		err := createRaw("Schedule", longName(186), `{"schedule":"@daily"}`)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("at most 185 characters"))
	})

	It("takes a retention policy, and no ttl with it", func() {
		Expect(createRaw("Schedule", "", `{"schedule":"@hourly","retention":{"keepLast":3,"hourly":24,"daily":7,"weekly":4,"monthly":12,"yearly":2}}`)).To(Succeed())
		Expect(createRaw("Schedule", "", `{"schedule":"@hourly","retention":{"daily":7},"template":{"ttl":"0s"}}`)).
			To(MatchError(ContainSubstring("spec.retention and spec.template.ttl cannot be set together")))
		Expect(createRaw("Schedule", "", `{"schedule":"@hourly","template":{"ttl":"24h"}}`)).To(Succeed())
	})

	DescribeTable("refuses a retention policy out of bounds",
		func(retention, want string) {
			err := createRaw("Schedule", "", `{"schedule":"@hourly","retention":`+retention+`}`)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(want))
		},
		Entry("a negative count", `{"daily":-1}`, "spec.retention.daily"),
		Entry("a count above 10000", `{"hourly":10001}`, "spec.retention.hourly"),
		Entry("not a number", `{"weekly":"4"}`, "spec.retention.weekly"),
		Entry("nothing kept", `{}`, "spec.retention keeps no backup"),
		Entry("only zeros", `{"keepLast":0,"yearly":0}`, "spec.retention keeps no backup"),
	)

	It("shows schedule, paused, last and next backup and age in kubectl get", func() {
		data, err := os.ReadFile("../../config/crd/bases/cairn.dev_schedules.yaml")
		Expect(err).NotTo(HaveOccurred())
		var crd apiextensionsv1.CustomResourceDefinition
		Expect(yaml.Unmarshal(data, &crd)).To(Succeed())
		var names []string
		for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
			if c.Priority == 0 {
				names = append(names, c.Name)
			}
		}
		Expect(names).To(Equal([]string{"Schedule", "Paused", "Last Backup", "Next Backup", "Age"}))
	})
})
