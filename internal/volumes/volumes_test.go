package volumes

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The volumes of a typical pod, one of each type a user meets.
var (
	data      = corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}}
	cache     = corev1.Volume{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	shm       = corev1.Volume{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}
	scratch   = corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}
	hostLogs  = corev1.Volume{Name: "logs", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}}}
	tls       = corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db-tls"}}}
	config    = corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}
	token     = corev1.Volume{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}
	podInfo   = corev1.Volume{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}}
	inlineCSI = corev1.Volume{Name: "secrets-store", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io"}}}
	share     = corev1.Volume{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nas", Path: "/export"}}}
	disk      = corev1.Volume{Name: "disk", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "vm-disk"}}}
)

var (
	dataVol  = Volume{Name: "data", Kind: PersistentVolumeClaim, ClaimName: "data-db-0"}
	cacheVol = Volume{Name: "cache", Kind: EmptyDir}
)

// podSpec is a pod named db-0 in namespace shop, Running, with these annotations and volumes,
// each mounted read-write by its one container.
func podSpec(annotations map[string]string, volumes ...corev1.Volume) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "shop", Annotations: annotations},
		Spec:       corev1.PodSpec{Volumes: volumes, Containers: []corev1.Container{{Name: "db"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, v := range volumes {
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	return pod
}

func optIn(list string) map[string]string { return map[string]string{VolumesAnnotation: list} }

func TestSelect(t *testing.T) {
	deleted := metav1.Now()
	tests := []struct {
		name        string
		pod         *corev1.Pod
		defaultAll  bool
		wantCopy    []Volume
		wantSkipped []Skipped
	}{
		{name: "a pod without annotations, no default: nothing", pod: podSpec(nil, data, cache)},
		{name: "opted in: a claim and an emptyDir, in the pod's order", pod: podSpec(optIn("cache,data"), data, cache),
			wantCopy: []Volume{dataVol, cacheVol}},
		{name: "opted in for one volume of two", pod: podSpec(optIn("data"), data, cache), wantCopy: []Volume{dataVol}},
		{name: "spaces trimmed, empty names ignored", pod: podSpec(optIn(" data , ,cache,"), data, cache),
			wantCopy: []Volume{dataVol, cacheVol}},
		{name: "an empty annotation selects nothing", pod: podSpec(optIn(""), data)},
		{name: "Velero's annotation is read", pod: podSpec(map[string]string{VeleroVolumesAnnotation: "data"}, data, cache),
			wantCopy: []Volume{dataVol}},
		{name: "Cairn's and Velero's annotations add up, a volume named in both is copied once",
			pod:      podSpec(map[string]string{VolumesAnnotation: "data", VeleroVolumesAnnotation: "cache,data"}, data, cache),
			wantCopy: []Volume{dataVol, cacheVol}},
		{name: "an annotation naming a volume the pod lacks", pod: podSpec(optIn("data,dta"), data),
			wantCopy: []Volume{dataVol}, wantSkipped: []Skipped{{Volume: "dta", Reason: `the pod has no volume named "dta"`}}},
		{name: "a missing volume named by both annotations is reported once",
			pod:         podSpec(map[string]string{VolumesAnnotation: "dta", VeleroVolumesAnnotation: "dta"}, data),
			wantSkipped: []Skipped{{Volume: "dta", Reason: `the pod has no volume named "dta"`}}},
		{name: "opted in for volumes that are not copied: each named with its type",
			pod: podSpec(optIn("logs,tls,config,kube-api-access-x7k2p,podinfo,secrets-store,share"), hostLogs, tls, config, token, podInfo, inlineCSI, share),
			wantSkipped: []Skipped{
				{Volume: "logs", Reason: "hostPath volumes are not copied"},
				{Volume: "tls", Reason: "secret volumes are not copied"},
				{Volume: "config", Reason: "configMap volumes are not copied"},
				{Volume: "kube-api-access-x7k2p", Reason: "projected volumes are not copied"},
				{Volume: "podinfo", Reason: "downwardAPI volumes are not copied"},
				{Volume: "secrets-store", Reason: "csi volumes are not copied"},
				{Volume: "share", Reason: "nfs volumes are not copied"},
			}},
		{name: "a volume with no source", pod: podSpec(optIn("odd"), corev1.Volume{Name: "odd"}),
			wantSkipped: []Skipped{{Volume: "odd", Reason: "volumes with no source are not copied"}}},
		{name: "default: every claim and emptyDir, the others skipped by type", defaultAll: true,
			pod:      podSpec(nil, data, config, cache, token),
			wantCopy: []Volume{dataVol, cacheVol},
			wantSkipped: []Skipped{
				{Volume: "config", Reason: "configMap volumes are not copied"},
				{Volume: "kube-api-access-x7k2p", Reason: "projected volumes are not copied"},
			}},
		{name: "default on a pod with no volumes", defaultAll: true, pod: podSpec(nil)},
		{name: "default minus Cairn's excludes", defaultAll: true,
			pod:         podSpec(map[string]string{ExcludesAnnotation: "cache"}, data, cache),
			wantCopy:    []Volume{dataVol},
			wantSkipped: []Skipped{{Volume: "cache", Reason: "excluded by the pod's annotation " + ExcludesAnnotation}}},
		{name: "default minus Velero's excludes", defaultAll: true,
			pod:         podSpec(map[string]string{VeleroExcludesAnnotation: " cache "}, data, cache),
			wantCopy:    []Volume{dataVol},
			wantSkipped: []Skipped{{Volume: "cache", Reason: "excluded by the pod's annotation " + VeleroExcludesAnnotation}}},
		{name: "default minus both excludes annotations", defaultAll: true,
			pod:      podSpec(map[string]string{ExcludesAnnotation: "cache", VeleroExcludesAnnotation: "data"}, data, cache),
			wantCopy: nil,
			wantSkipped: []Skipped{
				{Volume: "data", Reason: "excluded by the pod's annotation " + VeleroExcludesAnnotation},
				{Volume: "cache", Reason: "excluded by the pod's annotation " + ExcludesAnnotation},
			}},
		{name: "opted in and excluded: the exclusion wins", pod: podSpec(map[string]string{VolumesAnnotation: "data,cache", ExcludesAnnotation: "cache"}, data, cache),
			wantCopy:    []Volume{dataVol},
			wantSkipped: []Skipped{{Volume: "cache", Reason: "excluded by the pod's annotation " + ExcludesAnnotation}}},
		{name: "opted in with Velero's annotation and excluded with Cairn's: the exclusion wins",
			pod:         podSpec(map[string]string{VeleroVolumesAnnotation: "data", ExcludesAnnotation: "data"}, data),
			wantSkipped: []Skipped{{Volume: "data", Reason: "excluded by the pod's annotation " + ExcludesAnnotation}}},
		{name: "default, opted in and excluded: the exclusion wins", defaultAll: true,
			pod:         podSpec(map[string]string{VolumesAnnotation: "data", ExcludesAnnotation: "data"}, data),
			wantSkipped: []Skipped{{Volume: "data", Reason: "excluded by the pod's annotation " + ExcludesAnnotation}}},
		{name: "no default: excluding a volume not opted in says nothing", pod: podSpec(map[string]string{ExcludesAnnotation: "cache"}, data, cache)},
		{name: "an exclusion naming a volume the pod lacks", defaultAll: true,
			pod:         podSpec(map[string]string{ExcludesAnnotation: "cahce"}, cache),
			wantCopy:    []Volume{cacheVol},
			wantSkipped: []Skipped{{Volume: "cahce", Reason: `the pod has no volume named "cahce"`}}},
		{name: "an emptyDir in memory is copied", pod: podSpec(optIn("shm"), shm), wantCopy: []Volume{{Name: "shm", Kind: EmptyDir}}},
		{name: "a generic ephemeral volume is copied from the claim made for the pod", pod: podSpec(optIn("scratch"), scratch),
			wantCopy: []Volume{{Name: "scratch", Kind: PersistentVolumeClaim, ClaimName: "db-0-scratch"}}},
		{name: "a claim used as a raw block device is not copied", pod: blockDevice(podSpec(optIn("disk,data"), data, disk), "disk"),
			wantCopy:    []Volume{dataVol},
			wantSkipped: []Skipped{{Volume: "disk", Reason: "claim vm-disk is used as a raw block device, which holds no files to copy"}}},
		{name: "a claim referenced readOnly", pod: podSpec(optIn("data"), corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0", ReadOnly: true}}}),
			wantCopy: []Volume{{Name: "data", Kind: PersistentVolumeClaim, ClaimName: "data-db-0", ReadOnly: true}}},
		{name: "every container mounts it readOnly", pod: mounts(podSpec(optIn("data,cache"), data, cache), true, true),
			wantCopy: []Volume{{Name: "data", Kind: PersistentVolumeClaim, ClaimName: "data-db-0", ReadOnly: true}, {Name: "cache", Kind: EmptyDir, ReadOnly: true}}},
		{name: "one container of two writes it", pod: mounts(podSpec(optIn("data,cache"), data, cache), true, false),
			wantCopy: []Volume{dataVol, cacheVol}},
		{name: "an init container writes it", pod: initWriter(mounts(podSpec(optIn("data"), data), true)),
			wantCopy: []Volume{dataVol}},
		{name: "no container mounts it", pod: unmounted(podSpec(optIn("data"), data)), wantCopy: []Volume{dataVol}},
		{name: "a Pending pod: nothing copied, a warning per volume, other reasons kept",
			pod: phase(podSpec(optIn("data,cache,tls,dta"), data, cache, tls), corev1.PodPending),
			wantSkipped: []Skipped{
				{Volume: "data", Reason: "pod is Pending, not Running"},
				{Volume: "cache", Reason: "pod is Pending, not Running"},
				{Volume: "tls", Reason: "secret volumes are not copied"},
				{Volume: "dta", Reason: `the pod has no volume named "dta"`},
			}},
		{name: "a Succeeded pod, by default", defaultAll: true, pod: phase(podSpec(nil, data), corev1.PodSucceeded),
			wantSkipped: []Skipped{{Volume: "data", Reason: "pod is Succeeded, not Running"}}},
		{name: "a Failed pod", pod: phase(podSpec(optIn("cache"), cache), corev1.PodFailed),
			wantSkipped: []Skipped{{Volume: "cache", Reason: "pod is Failed, not Running"}}},
		{name: "a Running pod being deleted", pod: func() *corev1.Pod {
			p := podSpec(optIn("data"), data)
			p.DeletionTimestamp = &deleted
			return p
		}(), wantSkipped: []Skipped{{Volume: "data", Reason: "pod is Terminating, not Running"}}},
		{name: "an excluded volume of a Pending pod is reported as excluded", defaultAll: true,
			pod:         phase(podSpec(map[string]string{ExcludesAnnotation: "data"}, data), corev1.PodPending),
			wantSkipped: []Skipped{{Volume: "data", Reason: "excluded by the pod's annotation " + ExcludesAnnotation}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotCopy, gotSkipped := Select(tt.pod, tt.defaultAll)
			if !reflect.DeepEqual(gotCopy, tt.wantCopy) {
				t.Errorf("copy = %+v\nwant   %+v", gotCopy, tt.wantCopy)
			}
			if !reflect.DeepEqual(gotSkipped, tt.wantSkipped) {
				t.Errorf("skipped = %+v\nwant      %+v", gotSkipped, tt.wantSkipped)
			}
		})
	}
}

func TestRunnable(t *testing.T) {
	deleted := metav1.Now()
	tests := []struct {
		name       string
		phase      corev1.PodPhase
		deleting   bool
		wantOK     bool
		wantReason string
	}{
		{name: "Running", phase: corev1.PodRunning, wantOK: true},
		{name: "Pending: scheduling, pulling images or running init containers", phase: corev1.PodPending, wantReason: "pod is Pending, not Running"},
		{name: "Succeeded: a finished Job's pod", phase: corev1.PodSucceeded, wantReason: "pod is Succeeded, not Running"},
		{name: "Failed", phase: corev1.PodFailed, wantReason: "pod is Failed, not Running"},
		{name: "Unknown: its node is unreachable", phase: corev1.PodUnknown, wantReason: "pod is Unknown, not Running"},
		{name: "just created, no phase yet", wantReason: "pod has no phase yet, not Running"},
		{name: "Running but being deleted", phase: corev1.PodRunning, deleting: true, wantReason: "pod is Terminating, not Running"},
		{name: "Pending and being deleted", phase: corev1.PodPending, deleting: true, wantReason: "pod is Pending, not Running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := phase(podSpec(nil), tt.phase)
			if tt.deleting {
				pod.DeletionTimestamp = &deleted
			}
			ok, reason := Runnable(pod)
			if ok != tt.wantOK || reason != tt.wantReason {
				t.Errorf("Runnable = %v, %q; want %v, %q", ok, reason, tt.wantOK, tt.wantReason)
			}
		})
	}
}

func phase(pod *corev1.Pod, p corev1.PodPhase) *corev1.Pod {
	pod.Status.Phase = p
	return pod
}

// mounts gives the pod one container per readOnly value, each mounting all its volumes,
// readOnly or not.
func mounts(pod *corev1.Pod, readOnly ...bool) *corev1.Pod {
	pod.Spec.Containers = nil
	for _, ro := range readOnly {
		c := corev1.Container{Name: "c"}
		for _, v := range pod.Spec.Volumes {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name, ReadOnly: ro})
		}
		pod.Spec.Containers = append(pod.Spec.Containers, c)
	}
	return pod
}

// initWriter adds an init container mounting the pod's first volume read-write.
func initWriter(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: "init",
		VolumeMounts: []corev1.VolumeMount{{Name: pod.Spec.Volumes[0].Name, MountPath: "/init"}}})
	return pod
}

func unmounted(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.Containers[0].VolumeMounts = nil
	return pod
}

// blockDevice makes the pod's container use the volume as a raw block device.
func blockDevice(pod *corev1.Pod, volume string) *corev1.Pod {
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume })
	c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: volume, DevicePath: "/dev/xvda"})
	return pod
}
