package v1alpha1_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// A PodVolumeRestore's binding to the pod the restore created (DESIGN.md section 20): the pod's
// UID is recorded after the create, may move to a replacement by the same controller only
// before a node is set, and is never unset; the controller, once recorded, stays.
var _ = Describe("PodVolumeRestore CRD", func() {
	const uidMessage = "spec.pod.uid, once set, changes only before spec.node is set, and is never unset"
	newPVR := func() *cairnv1.PodVolumeRestore {
		GinkgoHelper()
		p := &cairnv1.PodVolumeRestore{
			ObjectMeta: metav1.ObjectMeta{Name: uniqueName("pvr"), Namespace: "default"},
			Spec: cairnv1.PodVolumeRestoreSpec{Pod: cairnv1.PodReference{Namespace: "team-a", Name: "app2"}, Volume: "data",
				Repository: cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "team-a"}, SnapshotID: "k1"},
		}
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		return p
	}
	update := func(p *cairnv1.PodVolumeRestore, change func(*cairnv1.PodVolumeRestoreSpec)) error {
		patch := client.MergeFrom(p.DeepCopy())
		change(&p.Spec)
		return k8sClient.Patch(ctx, p, patch)
	}
	rs := &cairnv1.ControllerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "app-7d4f", UID: "rs-1"}

	It("records the pod's UID and controller, moves to the controller's replacement before a node is set, and keeps them once bound", func() {
		p := newPVR()
		Expect(update(p, func(s *cairnv1.PodVolumeRestoreSpec) { s.Pod.UID = "p-1" })).To(Succeed())
		Expect(update(p, func(s *cairnv1.PodVolumeRestoreSpec) { s.PodController = rs })).To(Succeed())
		Expect(update(p, func(s *cairnv1.PodVolumeRestoreSpec) { s.Pod.UID = "p-2" })).To(Succeed(), "the replacement, before a node is set")
		Expect(update(p, func(s *cairnv1.PodVolumeRestoreSpec) { s.Node = "node-a" })).To(Succeed())
		Expect(update(p, func(s *cairnv1.PodVolumeRestoreSpec) { s.Pod.UID = "p-3" })).To(MatchError(ContainSubstring(uidMessage)))
	})

	It("never unsets the pod's UID or its controller, nor changes the controller", func() {
		p := newPVR()
		Expect(update(p, func(s *cairnv1.PodVolumeRestoreSpec) { s.Pod.UID, s.PodController = "p-1", rs })).To(Succeed())
		Expect(update(p, func(s *cairnv1.PodVolumeRestoreSpec) { s.Pod.UID = "" })).To(MatchError(ContainSubstring(uidMessage)))
		Expect(update(p, func(s *cairnv1.PodVolumeRestoreSpec) {
			s.PodController = &cairnv1.ControllerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "mine", UID: "rs-2"}
		})).To(MatchError(ContainSubstring("spec.podController cannot change once set")))
		Expect(update(p, func(s *cairnv1.PodVolumeRestoreSpec) { s.PodController = nil })).To(MatchError(ContainSubstring("spec.podController cannot be unset")))
	})
})
