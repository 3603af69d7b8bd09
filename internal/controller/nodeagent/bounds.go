package nodeagent

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/cairn-backup/cairn/internal/podvolume"
)

// volumeOnNode is a pod volume as a copy needs it: where it is on this node, and the bounds of
// a restore into it (DESIGN.md section 20: the node's, never the tenant's).
type volumeOnNode struct {
	Dir string
	// Capacity is the most a restore may write into it: the claim's capacity, the emptyDir's
	// sizeLimit, or the agent's EmptyDirCapacity.
	Capacity int64
	// User is the user the pod's containers run as, when the spec says so.
	User *int64
}

// volumeCapacity is what a restore may write into the volume named volume of pod: its claim's
// capacity (or request, while the claim has no status yet), an emptyDir's sizeLimit, else
// emptyDirDefault. 0 means no bound.
func volumeCapacity(pod *corev1.Pod, volume string, claim *corev1.PersistentVolumeClaim, emptyDirDefault int64) int64 {
	if claim != nil {
		if q, ok := claim.Status.Capacity[corev1.ResourceStorage]; ok && !q.IsZero() {
			return q.Value()
		}
		if q, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			return q.Value()
		}
		return 0
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == volume && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && !v.EmptyDir.SizeLimit.IsZero() {
			return v.EmptyDir.SizeLimit.Value()
		}
	}
	return emptyDirDefault
}

// podUser is the one user every application container of pod runs as (the restore helper
// aside), from the containers' security contexts or the pod's; nil when they differ or the
// spec leaves it to the image.
func podUser(pod *corev1.Pod) *int64 {
	var podLevel *int64
	if sc := pod.Spec.SecurityContext; sc != nil {
		podLevel = sc.RunAsUser
	}
	var user *int64
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name == podvolume.RestoreHelperContainer {
				continue
			}
			u := podLevel
			if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
				u = c.SecurityContext.RunAsUser
			}
			switch {
			case u == nil:
				return nil
			case user == nil:
				user = u
			case *user != *u:
				return nil
			}
		}
	}
	return user
}
