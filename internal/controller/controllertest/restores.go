package controllertest

// Restores and what they created.

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

// DeleteAllRestores removes every restore and waits until they are gone (their files go with
// the test's temporary directories).
func DeleteAllRestores() {
	GinkgoHelper()
	deleteAll(&cairnv1.RestoreList{}, cairnv1.RestoreDataFinalizer)
}

// OwnersRestoreStatus is a restore's status as its phase owners wrote it (OwnersConditions).
func OwnersRestoreStatus(s cairnv1.RestoreStatus) cairnv1.RestoreStatus {
	s.Conditions = OwnersConditions(s.Conditions)
	return s
}

func GetRestore(namespace, name string) *cairnv1.Restore {
	GinkgoHelper()
	var rs cairnv1.Restore
	Expect(K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: namespace, Name: name}, &rs)).To(Succeed())
	return &rs
}

// CreateRestore creates a Restore.
func CreateRestore(namespace, name string, spec cairnv1.RestoreSpec) {
	GinkgoHelper()
	Expect(K8sClient.Create(SuiteCtx, &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: spec})).To(Succeed())
}

// GetUnstructured reads an object, or nil when there is none.
func GetUnstructured(gvk schema.GroupVersionKind, namespace, name string) *unstructured.Unstructured {
	GinkgoHelper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err := K8sClient.Get(SuiteCtx, client.ObjectKey{Namespace: namespace, Name: name}, u)
	if apierrors.IsNotFound(err) {
		return nil
	}
	Expect(err).NotTo(HaveOccurred())
	return u
}

// RestoredList reads a restore's resource list from storage.
func RestoredList(store storage.ObjectStore, namespace, name string) restore.ResourceList {
	GinkgoHelper()
	var list restore.ResourceList
	GunzipJSON(store, storage.Layout{}.Restore(namespace, name).ResourceList, &list)
	return list
}

// WaitRestore waits until a restore reaches phase and returns it.
func WaitRestore(namespace, name string, phase cairnv1.RestorePhase) *cairnv1.Restore {
	GinkgoHelper()
	var rs *cairnv1.Restore
	Eventually(func(g Gomega) {
		rs = GetRestore(namespace, name)
		g.Expect(rs.Status.Phase).To(Equal(phase), "failureReason %q, validationErrors %v", rs.Status.FailureReason, rs.Status.ValidationErrors)
	}).WithTimeout(60 * time.Second).Should(Succeed())
	return rs
}
