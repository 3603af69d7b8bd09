package volumes

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// PodVolumes is what Select decided for one pod.
type PodVolumes struct {
	Pod     *corev1.Pod
	Copy    []Volume
	Skipped []Skipped
}

// Dedupe returns the pods' selections with each claim copied once, however many pods (or
// volumes of one pod) mount it: the first pod copies it, the others skip it with a reason naming
// that pod. Pods are taken in a stable order, so a backup run again picks the same pod: Runnable
// pods first, then the oldest (creationTimestamp), then by name. Claims are told apart by
// namespace, so pods of several namespaces may be passed together. EmptyDir volumes belong to
// their pod and are all kept. The result is in the order of pods; pods is not modified.
func Dedupe(pods []PodVolumes) []PodVolumes {
	order := make([]int, len(pods))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return copiesFirst(pods[i].Pod, pods[j].Pod) })

	type claim struct{ namespace, name string }
	type copier struct{ pod, volume string }
	copiedBy := map[claim]copier{}
	deduped := make([]PodVolumes, len(pods))
	for _, i := range order {
		p := pods[i]
		d := PodVolumes{Pod: p.Pod, Skipped: slices.Clone(p.Skipped)}
		for _, v := range p.Copy {
			if v.Kind != PersistentVolumeClaim {
				d.Copy = append(d.Copy, v)
				continue
			}
			key := claim{namespace: p.Pod.Namespace, name: v.ClaimName}
			first, copied := copiedBy[key]
			switch {
			case !copied:
				copiedBy[key] = copier{pod: p.Pod.Name, volume: v.Name}
				d.Copy = append(d.Copy, v)
			case first.pod == p.Pod.Name:
				d.Skipped = append(d.Skipped, Skipped{Volume: v.Name,
					Reason: fmt.Sprintf("claim %s is copied from this pod's volume %s", v.ClaimName, first.volume)})
			default:
				d.Skipped = append(d.Skipped, Skipped{Volume: v.Name,
					Reason: fmt.Sprintf("claim %s is copied from pod %s", v.ClaimName, first.pod)})
			}
		}
		deduped[i] = d
	}
	return deduped
}

// copiesFirst orders the pods that mount one claim: a Runnable pod before one that is not,
// then the oldest, then by name.
func copiesFirst(a, b *corev1.Pod) int {
	aRuns, _ := Runnable(a)
	bRuns, _ := Runnable(b)
	if aRuns != bRuns {
		if aRuns {
			return -1
		}
		return 1
	}
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Namespace, b.Namespace))
}
