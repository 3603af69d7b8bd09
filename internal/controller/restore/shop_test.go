package restore_test

import (
	"strings"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// The cluster the restore specs back up and restore ("shop" and its kin), and how they compare
// what was restored with its original.

// comparable is an object without what the API server, the restore or the cluster's
// controllers set: identity and bookkeeping metadata, Cairn's labels, status, and the fields
// named in drop (dotted paths), so that a restored object can be compared field by field
// with its original.
func comparable(u *unstructured.Unstructured, drop ...string) map[string]any {
	GinkgoHelper()
	Expect(u).NotTo(BeNil())
	obj := u.DeepCopy().Object
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "namespace"} {
		unstructured.RemoveNestedField(obj, "metadata", f)
	}
	unstructured.RemoveNestedField(obj, "metadata", "labels", cairnv1.BackupNameLabel)
	unstructured.RemoveNestedField(obj, "metadata", "labels", cairnv1.RestoreNameLabel)
	if labels, _, _ := unstructured.NestedMap(obj, "metadata", "labels"); len(labels) == 0 {
		unstructured.RemoveNestedField(obj, "metadata", "labels")
	}
	unstructured.RemoveNestedField(obj, "status")
	for _, path := range drop {
		unstructured.RemoveNestedField(obj, strings.Split(path, ".")...)
	}
	return obj
}

var (
	cmGVK                    = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	secretGVK                = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	saGVK                    = schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}
	serviceGVK               = schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	pvcGVK                   = schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}
	pvGVK                    = schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolume"}
	deployGVK                = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	roleGVK                  = schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}
	rbGVK                    = schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"}
	widgetGVK                = schema.GroupVersionKind{Group: "restore.example.com", Version: "v1", Kind: "Widget"}
	crdGVK                   = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
	nsGVK                    = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	widgetsName              = "widgets.restore.example.com"
	volumeSnapshotContentGVK = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshotContent"}
)

// shopObjects are the objects of the "shop" namespace the round trips back up, by GVK and name.
var shopObjects = []struct {
	gvk  schema.GroupVersionKind
	name string
	// drop are fields a restore resets or the cluster assigns, left out of the comparison.
	drop []string
}{
	{cmGVK, "settings", nil},
	{secretGVK, "creds", nil},
	{saGVK, "app", nil},
	{roleGVK, "reader", nil},
	{rbGVK, "reader-app", nil},
	{deployGVK, "web", []string{"metadata.annotations"}},
	{serviceGVK, "web", []string{"spec.clusterIP", "spec.clusterIPs"}},
	{serviceGVK, "edge", []string{"spec.clusterIP", "spec.clusterIPs", "spec.ports"}},
	{pvcGVK, "data-retain", []string{"metadata.annotations"}}, // the bind annotations are stripped
	{widgetGVK, "blue", nil},
}

// widgetCRD is a CRD with a status subresource, namespaced.
func widgetCRD() *unstructured.Unstructured {
	GinkgoHelper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: widgetsName},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "restore.example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(crdGVK)
	return u
}

func createWidget(namespace, name, color string) {
	GinkgoHelper()
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(widgetGVK)
	w.SetNamespace(namespace)
	w.SetName(name)
	Expect(unstructured.SetNestedField(w.Object, color, "spec", "color")).To(Succeed())
	Eventually(func() error { return K8sClient.Create(SuiteCtx, w) }).Should(Succeed()) // the CRD may be new
	Expect(unstructured.SetNestedField(w.Object, "ready", "status", "state")).To(Succeed())
	Expect(K8sClient.Status().Update(SuiteCtx, w)).To(Succeed())
}

// createShop fills the namespace ns with what the round trips back up.
func createShop(ns string) {
	GinkgoHelper()
	EnsureNamespace(ns)
	CreateObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings", Labels: map[string]string{"tier": "web"}},
		Data: map[string]string{"color": "blue", "size": "3"}})
	CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"password": []byte("s3cret")}})
	CreateObject(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}}})
	CreateObject(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}})
	CreateObject(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader-app"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "app", Namespace: ns}}})
	labels := map[string]string{"app": "web"}
	CreateObject(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: labels}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			ServiceAccountName: "app", Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}}},
	}})
	CreateObject(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: corev1.ServiceSpec{
		Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}})
	CreateObject(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Selector: labels,
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}})
	for _, p := range []struct {
		name   string
		policy corev1.PersistentVolumeReclaimPolicy
	}{{"retain", corev1.PersistentVolumeReclaimRetain}, {"delete", corev1.PersistentVolumeReclaimDelete}} {
		pv := "pv-" + ns + "-" + p.name
		CreateObject(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv}, Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: p.policy,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + pv}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: "data-" + p.name},
		}})
		CreateObject(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-" + p.name,
			Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"}}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: pv,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}})
	}
	createWidget(ns, "blue", "blue")
}

// snapshot reads the shop objects of ns.
func snapshot(ns string) map[string]*unstructured.Unstructured {
	GinkgoHelper()
	out := map[string]*unstructured.Unstructured{}
	for _, o := range shopObjects {
		out[o.gvk.Kind+"/"+o.name] = GetUnstructured(o.gvk, ns, o.name)
	}
	return out
}

// expectShopRestored compares every shop object in ns with its original, field by field.
func expectShopRestored(originals map[string]*unstructured.Unstructured, ns, restoreName string, extra map[string][]string) {
	GinkgoHelper()
	for _, o := range shopObjects {
		o.drop = append(append([]string(nil), o.drop...), extra[o.gvk.Kind+"/"+o.name]...)
		restored := GetUnstructured(o.gvk, ns, o.name)
		Expect(restored).NotTo(BeNil(), "%s %s/%s was not restored", o.gvk.Kind, ns, o.name)
		Expect(restored.GetLabels()).To(HaveKeyWithValue(cairnv1.RestoreNameLabel, restoreName))
		Expect(restored.GetLabels()).To(HaveKey(cairnv1.BackupNameLabel))
		want := comparable(originals[o.gvk.Kind+"/"+o.name], o.drop...)
		got := comparable(restored, o.drop...)
		if o.gvk == rbGVK {
			// The subject's namespace is mapped with the items.
			unstructured.RemoveNestedField(want, "subjects")
			subjects, _, _ := unstructured.NestedSlice(restored.Object, "subjects")
			Expect(subjects).To(HaveLen(1))
			Expect(subjects[0]).To(HaveKeyWithValue("namespace", ns))
			unstructured.RemoveNestedField(got, "subjects")
		}
		Expect(got).To(Equal(want), "%s %s/%s differs from its original", o.gvk.Kind, ns, o.name)
	}
}
