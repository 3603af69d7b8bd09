package nodeagent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/cairn-backup/cairn/internal/podvolume"
)

func TestVolumeCapacity(t *testing.T) {
	gi := resource.MustParse("1Gi")
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "limited", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &gi}}},
		{Name: "open", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}}}
	bound := &corev1.PersistentVolumeClaim{
		Spec:   corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		Status: corev1.PersistentVolumeClaimStatus{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
	}
	pending := &corev1.PersistentVolumeClaim{
		Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("3Gi")}}},
	}
	for _, tt := range []struct {
		name   string
		volume string
		claim  *corev1.PersistentVolumeClaim
		want   int64
	}{
		{"an emptyDir's sizeLimit", "limited", nil, 1 << 30},
		{"an emptyDir without one: the agent's bound", "open", nil, 5 << 30},
		{"a bound claim: its capacity", "data", bound, 2 << 30},
		{"a claim not bound yet: its request", "data", pending, 3 << 30},
		{"a claim asking for nothing: no bound", "data", &corev1.PersistentVolumeClaim{}, 0},
	} {
		if got := volumeCapacity(pod, tt.volume, tt.claim, 5<<30); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestPodUser(t *testing.T) {
	as := func(uid int64) *corev1.SecurityContext { return &corev1.SecurityContext{RunAsUser: ptr.To(uid)} }
	helper := corev1.Container{Name: podvolume.RestoreHelperContainer, SecurityContext: as(65532)}
	for _, tt := range []struct {
		name string
		pod  corev1.PodSpec
		want *int64
	}{
		{"the pod's", corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)},
			InitContainers: []corev1.Container{helper}, Containers: []corev1.Container{{Name: "app"}}}, ptr.To[int64](1000)},
		{"every container's, the same", corev1.PodSpec{Containers: []corev1.Container{{Name: "a", SecurityContext: as(7)}, {Name: "b", SecurityContext: as(7)}}}, ptr.To[int64](7)},
		{"containers that differ", corev1.PodSpec{Containers: []corev1.Container{{Name: "a", SecurityContext: as(7)}, {Name: "b", SecurityContext: as(8)}}}, nil},
		{"one left to its image", corev1.PodSpec{Containers: []corev1.Container{{Name: "a", SecurityContext: as(7)}, {Name: "b"}}}, nil},
		{"a container over the pod's", corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)},
			Containers: []corev1.Container{{Name: "a", SecurityContext: as(0)}}}, ptr.To[int64](0)},
		{"nothing said", corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}, nil},
	} {
		got := podUser(&corev1.Pod{Spec: tt.pod})
		if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
