package volumes

import (
	"errors"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The kubelet's volume plugins' directory names under <pods dir>/<pod UID>/volumes/ (the
// plugin's name with "/" escaped as "~").
const (
	emptyDirPlugin = "kubernetes.io~empty-dir"
	localPlugin    = "kubernetes.io~local-volume"
	csiPlugin      = "kubernetes.io~csi"
)

// HostPath returns the directory on the node where the kubelet has mounted a pod's volume,
// under the kubelet's pods directory, for the node agent to read: for an emptyDir,
// <dir>/<pod UID>/volumes/kubernetes.io~empty-dir/<volume>; for a claim, the path depends on
// the plugin of its PersistentVolume, named pvName, whose spec's source pv is:
// kubernetes.io~local-volume/<pvName> for a local volume, kubernetes.io~csi/<pvName>/mount for
// a CSI volume (and for the in-tree cloud disk types Kubernetes now mounts through their CSI
// drivers). Other PersistentVolumes, hostPath ones included (their data is not under the pods
// directory but at their path on some node), are an error. pvName and pv are ignored for an
// emptyDir.
//
// The pod UID and the names are checked to be single path segments, so the result is always
// inside kubeletPodsDir, whatever an API object holds.
func HostPath(kubeletPodsDir string, podUID types.UID, v Volume, pvName string, pv corev1.PersistentVolumeSource) (string, error) {
	if !path.IsAbs(kubeletPodsDir) {
		return "", fmt.Errorf("the kubelet's pods directory %q is not an absolute path", kubeletPodsDir)
	}
	if err := segment("pod UID", string(podUID)); err != nil {
		return "", err
	}
	if err := segment("volume name", v.Name); err != nil {
		return "", err
	}
	volumes := path.Join(kubeletPodsDir, string(podUID), "volumes")
	switch v.Kind {
	case EmptyDir:
		return path.Join(volumes, emptyDirPlugin, v.Name), nil
	case PersistentVolumeClaim:
	default:
		return "", fmt.Errorf("volume %s is of unknown kind %q", v.Name, v.Kind)
	}
	if pvName == "" {
		return "", fmt.Errorf("claim %s of volume %s names no persistent volume: is it bound?", v.ClaimName, v.Name)
	}
	if err := segment("persistent volume name", pvName); err != nil {
		return "", err
	}
	switch {
	case pv.Local != nil:
		return path.Join(volumes, localPlugin, pvName), nil
	case pv.CSI != nil, mountedThroughCSI(pv):
		return path.Join(volumes, csiPlugin, pvName, "mount"), nil
	}
	t := sourceType(pv)
	if t == "" {
		return "", fmt.Errorf("persistent volume %s has no source: it cannot be read from the kubelet's pods directory", pvName)
	}
	return "", fmt.Errorf("persistent volume %s (%s): %s volumes cannot be read from the kubelet's pods directory", pvName, t, t)
}

// mountedThroughCSI reports an in-tree volume type whose CSI migration is on and locked since
// Kubernetes 1.26 (the in-tree code is gone): the kubelet mounts it with the CSI driver, under
// the CSI plugin's directory.
func mountedThroughCSI(pv corev1.PersistentVolumeSource) bool {
	return pv.AWSElasticBlockStore != nil || pv.GCEPersistentDisk != nil || pv.AzureDisk != nil ||
		pv.AzureFile != nil || pv.Cinder != nil || pv.VsphereVolume != nil
}

// segment checks that s, the what of a path, is one path segment: not empty, not "." or "..",
// with no "/" (nor a NUL, which no path may hold).
func segment(what, s string) error {
	switch {
	case s == "":
		return errors.New(what + " is empty")
	case s == "." || s == ".." || strings.ContainsAny(s, "/\x00"):
		return fmt.Errorf("%s %q is not a single path segment", what, s)
	}
	return nil
}
