package nodeagent

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/volumes"
)

// errNotThereYet marks a volume directory the kubelet has not made yet: a restored pod's,
// between its scheduling and the start of its init containers.
type errNotThereYet struct{ error }

// Why a pod is refused when it is not the incarnation a PodVolumeBackup or PodVolumeRestore
// names (samePod): "pod <namespace>/<name> was replaced " and this.
const (
	backedUpPodReplaced = "by another of the same name"
	restoredPodReplaced = "after the restore created it: its volumes are not restored into the pod that has its name now"
)

// samePod refuses pod, found under the name of ref, when it is not the incarnation ref names
// (ref's UID; none is refused too): replaced, by hand or by its controller, saying so with
// replaced.
func samePod(ref cairnv1.PodReference, pod *corev1.Pod, replaced string) error {
	if ref.UID == "" || pod.UID != ref.UID {
		return fmt.Errorf("pod %s/%s was replaced %s", ref.Namespace, ref.Name, replaced)
	}
	return nil
}

// volumeDir is the directory on this node holding the volume of the pod ref, under PodsDir,
// checked to be that incarnation of the pod (same UID; samePod says why not with replaced)
// and to exist. The pod's spec says what
// backs the volume: a claim (and its PersistentVolume says where the kubelet mounts it), or an
// emptyDir.
func (a *Agent) volumeDir(ctx context.Context, ref cairnv1.PodReference, volume, replaced string) (volumeOnNode, error) {
	var pod corev1.Pod
	if err := a.Reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return volumeOnNode{}, fmt.Errorf("pod %s/%s is gone", ref.Namespace, ref.Name)
		}
		return volumeOnNode{}, fmt.Errorf("reading pod %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	if err := samePod(ref, &pod, replaced); err != nil {
		return volumeOnNode{}, err
	}
	v, err := podVolume(&pod, volume)
	if err != nil {
		return volumeOnNode{}, err
	}
	var pvName string
	var source corev1.PersistentVolumeSource
	var claim *corev1.PersistentVolumeClaim
	if v.Kind == volumes.PersistentVolumeClaim {
		var pvc corev1.PersistentVolumeClaim
		claim = &pvc
		if err := a.Reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: v.ClaimName}, &pvc); err != nil {
			return volumeOnNode{}, fmt.Errorf("reading claim %s/%s: %w", pod.Namespace, v.ClaimName, err)
		}
		if pvName = pvc.Spec.VolumeName; pvName != "" {
			var pv corev1.PersistentVolume
			if err := a.Reader.Get(ctx, client.ObjectKey{Name: pvName}, &pv); err != nil {
				return volumeOnNode{}, fmt.Errorf("reading persistent volume %s: %w", pvName, err)
			}
			source = pv.Spec.PersistentVolumeSource
		}
	}
	dir, err := volumes.HostPath(a.PodsDir, pod.UID, v, pvName, source)
	if err != nil {
		return volumeOnNode{}, err
	}
	info, err := os.Stat(dir)
	if os.IsNotExist(err) {
		return volumeOnNode{}, errNotThereYet{fmt.Errorf("volume %s of pod %s/%s is not at %s on node %s: %w", v.Name, pod.Namespace, pod.Name, dir, a.Node, err)}
	}
	if err != nil {
		return volumeOnNode{}, fmt.Errorf("volume %s of pod %s/%s at %s: %w", v.Name, pod.Namespace, pod.Name, dir, err)
	}
	if !info.IsDir() {
		return volumeOnNode{}, fmt.Errorf("volume %s of pod %s/%s at %s is not a directory", v.Name, pod.Namespace, pod.Name, dir)
	}
	return volumeOnNode{Dir: dir, Capacity: volumeCapacity(&pod, volume, claim, a.EmptyDirCapacity), User: podUser(&pod)}, nil
}

// podVolume is the volume named name of pod, as volumes.HostPath needs it: a claim (a
// persistentVolumeClaim volume, or a generic ephemeral volume, whose claim is
// <pod>-<volume>) or an emptyDir.
func podVolume(pod *corev1.Pod, name string) (volumes.Volume, error) {
	for _, v := range pod.Spec.Volumes {
		if v.Name != name {
			continue
		}
		switch {
		case v.PersistentVolumeClaim != nil:
			return volumes.Volume{Name: name, Kind: volumes.PersistentVolumeClaim, ClaimName: v.PersistentVolumeClaim.ClaimName}, nil
		case v.Ephemeral != nil:
			return volumes.Volume{Name: name, Kind: volumes.PersistentVolumeClaim, ClaimName: pod.Name + "-" + name}, nil
		case v.EmptyDir != nil:
			return volumes.Volume{Name: name, Kind: volumes.EmptyDir}, nil
		}
		return volumes.Volume{}, fmt.Errorf("volume %s of pod %s/%s is neither a claim nor an emptyDir", name, pod.Namespace, pod.Name)
	}
	return volumes.Volume{}, fmt.Errorf("pod %s/%s has no volume %s", pod.Namespace, pod.Name, name)
}
