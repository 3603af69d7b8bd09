// Package volumes decides which pod volumes a backup copies, and where on a node their data is
// read (DESIGN.md section 16): which of a pod's volumes are selected by its annotations or by
// the backup's defaultVolumesToFsBackup, which are skipped and why, which pod copies a claim
// that several pods mount, and the path of a volume under the kubelet's pods directory. The
// backup run, which creates a PodVolumeBackup per copied volume and names each skipped one in
// its log, and the node agent, which reads the volume from that path, both use it. Its
// functions are pure: they read the objects they are given and never call the API server.
package volumes

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The pod annotations that choose volumes, each a comma-separated list of volume names. Cairn
// reads Velero's too, so pods annotated for Velero are backed up the same way.
const (
	VolumesAnnotation        = "backup.cairn.dev/backup-volumes"
	ExcludesAnnotation       = "backup.cairn.dev/backup-volumes-excludes"
	VeleroVolumesAnnotation  = "backup.velero.io/backup-volumes"
	VeleroExcludesAnnotation = "backup.velero.io/backup-volumes-excludes"
)

// Kind is what holds a copied volume's data.
type Kind string

const (
	// PersistentVolumeClaim is a volume backed by a claim: a persistentVolumeClaim volume, or
	// a generic ephemeral volume (whose claim the pod owns).
	PersistentVolumeClaim Kind = "PersistentVolumeClaim"
	// EmptyDir is an emptyDir volume, on the node's disk or in memory.
	EmptyDir Kind = "EmptyDir"
)

// Volume is a pod volume a backup copies.
type Volume struct {
	// Name is the volume's name in the pod's spec.
	Name string
	Kind Kind
	// ClaimName is the PersistentVolumeClaim in the pod's namespace holding the data; empty
	// for an emptyDir.
	ClaimName string
	// ReadOnly reports that the pod cannot write the volume: the claim is referenced
	// readOnly, or every container that mounts the volume mounts it readOnly.
	ReadOnly bool
}

// Skipped is a pod volume a backup does not copy, with the reason for the backup's log.
type Skipped struct {
	// Volume is the volume's name, or the name an annotation lists when the pod has no such
	// volume.
	Volume string
	Reason string
}

// Select returns which of a pod's volumes a backup copies, in the order of the pod's spec, and
// the volumes it considered and does not copy, each with a reason.
//
// A volume is selected when the pod's backup-volumes annotation (Cairn's or Velero's: the
// union of both) lists it, or, with defaultAll (the backup's defaultVolumesToFsBackup), every
// volume of the pod is. A volume the backup-volumes-excludes annotation (Cairn's or Velero's)
// lists is never copied, in either mode, even when backup-volumes lists it too: an exclusion is
// always the last word. (Velero reads only one of the two annotations, depending on the mode,
// so an opt-in backup there copies a volume both list; in Cairn an excluded volume is never
// copied, whichever backup runs.)
//
// Of the selected volumes, those backed by a PersistentVolumeClaim (a persistentVolumeClaim or
// generic ephemeral volume) and emptyDir volumes are copied; every other type (hostPath,
// secret, configMap, projected, downwardAPI, csi, nfs, ...) is skipped, as is a claim that the
// pod's containers use as a raw block device. The backup holds the Secrets and ConfigMaps
// themselves. Every name an annotation lists that the pod has no volume of is skipped too, so a
// typo shows in the backup's log. A pod that is not Runnable has nothing copied: each volume it
// would have copied is skipped with Runnable's reason. Dedupe then decides which pod copies a
// claim that several pods mount.
func Select(pod *corev1.Pod, defaultAll bool) (toCopy []Volume, skipped []Skipped) {
	included := listed(pod, VolumesAnnotation, VeleroVolumesAnnotation)
	excluded := listed(pod, ExcludesAnnotation, VeleroExcludesAnnotation)
	blockDevices := blockDeviceVolumes(pod)
	runnable, notRunnable := Runnable(pod)
	has := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		has[v.Name] = true
		if !defaultAll && !slices.Contains(included.names, v.Name) {
			continue
		}
		if annotation, ok := excluded.by[v.Name]; ok {
			skipped = append(skipped, Skipped{Volume: v.Name, Reason: "excluded by the pod's annotation " + annotation})
			continue
		}
		vol, reason := copiable(pod, v, blockDevices)
		switch {
		case reason != "":
			skipped = append(skipped, Skipped{Volume: v.Name, Reason: reason})
		case !runnable:
			skipped = append(skipped, Skipped{Volume: v.Name, Reason: notRunnable})
		default:
			toCopy = append(toCopy, vol)
		}
	}
	for _, name := range slices.Concat(included.names, excluded.names) {
		if !has[name] {
			has[name] = true // reported once, whichever annotations list it
			skipped = append(skipped, Skipped{Volume: name, Reason: fmt.Sprintf("the pod has no volume named %q", name)})
		}
	}
	return toCopy, skipped
}

// Runnable reports whether the node agent can read a pod's volumes now: the pod is Running and
// not being deleted. Otherwise the reason says what the pod is; the backup logs it as a warning
// and goes on without the pod's volumes, never waiting for the pod.
func Runnable(pod *corev1.Pod) (ok bool, reason string) {
	switch {
	case pod.Status.Phase == "":
		return false, "pod has no phase yet, not Running"
	case pod.Status.Phase != corev1.PodRunning:
		return false, fmt.Sprintf("pod is %s, not Running", pod.Status.Phase)
	case pod.DeletionTimestamp != nil:
		return false, "pod is Terminating, not Running"
	}
	return true, ""
}

// names is the volume names some annotations list, in order and without repeats, and which
// annotation listed each first.
type names struct {
	names []string
	by    map[string]string
}

// listed reads the comma-separated lists of the pod's annotations keys, in order: spaces
// around a name are trimmed and empty names ignored.
func listed(pod *corev1.Pod, keys ...string) names {
	n := names{by: map[string]string{}}
	for _, key := range keys {
		for name := range strings.SplitSeq(pod.Annotations[key], ",") {
			name = strings.TrimSpace(name)
			if _, seen := n.by[name]; name == "" || seen {
				continue
			}
			n.names = append(n.names, name)
			n.by[name] = key
		}
	}
	return n
}

// copiable returns the Volume a backup copies for v, or why it does not copy a volume of that
// type.
func copiable(pod *corev1.Pod, v corev1.Volume, blockDevices map[string]bool) (Volume, string) {
	vol := Volume{Name: v.Name, ReadOnly: mountedReadOnly(pod, v.Name)}
	switch {
	case v.PersistentVolumeClaim != nil:
		vol.Kind, vol.ClaimName = PersistentVolumeClaim, v.PersistentVolumeClaim.ClaimName
		vol.ReadOnly = vol.ReadOnly || v.PersistentVolumeClaim.ReadOnly
	case v.Ephemeral != nil:
		// The ephemeral volume controller names the claim it creates for the pod this way.
		vol.Kind, vol.ClaimName = PersistentVolumeClaim, pod.Name+"-"+v.Name
	case v.EmptyDir != nil:
		return Volume{Name: v.Name, Kind: EmptyDir, ReadOnly: vol.ReadOnly}, ""
	default:
		if t := sourceType(v.VolumeSource); t != "" {
			return Volume{}, t + " volumes are not copied"
		}
		return Volume{}, "volumes with no source are not copied"
	}
	if blockDevices[v.Name] {
		return Volume{}, fmt.Sprintf("claim %s is used as a raw block device, which holds no files to copy", vol.ClaimName)
	}
	return vol, ""
}

// mountedReadOnly reports whether at least one container mounts the volume, and every one
// that does mounts it readOnly.
func mountedReadOnly(pod *corev1.Pod, volume string) bool {
	mounted := false
	for _, mounts := range containerMounts(pod) {
		for _, m := range mounts {
			if m.Name == volume {
				if !m.ReadOnly {
					return false
				}
				mounted = true
			}
		}
	}
	return mounted
}

// containerMounts returns the volume mounts of each of the pod's containers: init, regular
// and ephemeral.
func containerMounts(pod *corev1.Pod) [][]corev1.VolumeMount {
	var all [][]corev1.VolumeMount
	for _, c := range pod.Spec.InitContainers {
		all = append(all, c.VolumeMounts)
	}
	for _, c := range pod.Spec.Containers {
		all = append(all, c.VolumeMounts)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		all = append(all, c.VolumeMounts)
	}
	return all
}

// blockDeviceVolumes returns the volumes the pod's containers use as raw block devices
// (volumeDevices): their claims are in Block mode, with no filesystem to read.
func blockDeviceVolumes(pod *corev1.Pod) map[string]bool {
	block := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		for _, d := range c.VolumeDevices {
			block[d.Name] = true
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, d := range c.VolumeDevices {
			block[d.Name] = true
		}
	}
	return block
}

// sourceType returns the API name of the type set in a VolumeSource or PersistentVolumeSource
// ("hostPath", "nfs", ...), or "" when none is. Both are one-of structs of pointers whose JSON
// names are the types' names, so reading them here names every type, including ones added to
// the API after this code.
func sourceType(source any) string {
	v := reflect.ValueOf(source)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return ""
}
