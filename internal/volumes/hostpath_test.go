package volumes

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestHostPath(t *testing.T) {
	const (
		dir = "/var/lib/kubelet/pods"
		uid = types.UID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
		pv  = "pvc-8c1d6a52-3f0e-4b7a-9d21-5e6f7a8b9c0d"
	)
	local := corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/ssd1"}}
	csi := corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "vol-0abc"}}
	tests := []struct {
		name    string
		dir     string
		uid     types.UID
		v       Volume
		pvName  string
		pv      corev1.PersistentVolumeSource
		want    string
		wantErr string
	}{
		{name: "an emptyDir", v: cacheVol, want: dir + "/" + string(uid) + "/volumes/kubernetes.io~empty-dir/cache"},
		{name: "an emptyDir ignores the persistent volume arguments", v: cacheVol, pvName: "..", pv: csi,
			want: dir + "/" + string(uid) + "/volumes/kubernetes.io~empty-dir/cache"},
		{name: "a local persistent volume", v: dataVol, pvName: "local-pv-1a2b3c", pv: local,
			want: dir + "/" + string(uid) + "/volumes/kubernetes.io~local-volume/local-pv-1a2b3c"},
		{name: "a CSI persistent volume", v: dataVol, pvName: pv, pv: csi,
			want: dir + "/" + string(uid) + "/volumes/kubernetes.io~csi/" + pv + "/mount"},
		{name: "an in-tree EBS volume, mounted through the CSI driver", v: dataVol, pvName: pv,
			pv:   corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-0abc"}},
			want: dir + "/" + string(uid) + "/volumes/kubernetes.io~csi/" + pv + "/mount"},
		{name: "an in-tree GCE disk, mounted through the CSI driver", v: dataVol, pvName: pv,
			pv:   corev1.PersistentVolumeSource{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "disk-1"}},
			want: dir + "/" + string(uid) + "/volumes/kubernetes.io~csi/" + pv + "/mount"},
		{name: "a kubelet root dir set elsewhere, with a trailing slash", dir: "/data/kubelet/pods/", v: cacheVol,
			want: "/data/kubelet/pods/" + string(uid) + "/volumes/kubernetes.io~empty-dir/cache"},
		{name: "a static pod's UID (a hash, not a UUID)", uid: "6d1c9b7e0e9b4a8c2f3d5e7a9b1c3d5e", v: cacheVol,
			want: dir + "/6d1c9b7e0e9b4a8c2f3d5e7a9b1c3d5e/volumes/kubernetes.io~empty-dir/cache"},

		{name: "a hostPath persistent volume", v: dataVol, pvName: "pv-host",
			pv:      corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/data"}},
			wantErr: "persistent volume pv-host (hostPath): hostPath volumes cannot be read from the kubelet's pods directory"},
		{name: "an NFS persistent volume", v: dataVol, pvName: "pv-nfs",
			pv:      corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nas", Path: "/export"}},
			wantErr: "persistent volume pv-nfs (nfs): nfs volumes cannot be read from the kubelet's pods directory"},
		{name: "a persistent volume with no source", v: dataVol, pvName: "pv-empty",
			wantErr: "persistent volume pv-empty has no source: it cannot be read from the kubelet's pods directory"},
		{name: "an unbound claim", v: dataVol, pv: csi,
			wantErr: "claim data-db-0 of volume data names no persistent volume: is it bound?"},
		{name: "a volume of no kind", v: Volume{Name: "data"}, wantErr: `volume data is of unknown kind ""`},
		{name: "a relative pods directory", dir: "var/lib/kubelet/pods", v: cacheVol,
			wantErr: `the kubelet's pods directory "var/lib/kubelet/pods" is not an absolute path`},

		{name: "hostile: pod UID climbing out", uid: "../../../etc", v: cacheVol, wantErr: `pod UID "../../../etc" is not a single path segment`},
		{name: "hostile: pod UID ..", uid: "..", v: cacheVol, wantErr: `pod UID ".." is not a single path segment`},
		{name: "hostile: pod UID .", uid: ".", v: cacheVol, wantErr: `pod UID "." is not a single path segment`},
		{name: "hostile: pod UID with a slash", uid: "a/b", v: cacheVol, wantErr: `pod UID "a/b" is not a single path segment`},
		{name: "hostile: pod UID absolute", uid: "/etc", v: cacheVol, wantErr: `pod UID "/etc" is not a single path segment`},
		{name: "hostile: empty pod UID", uid: "-", v: cacheVol, wantErr: "pod UID is empty"},
		{name: "hostile: volume name climbing out", v: Volume{Name: "../../x", Kind: EmptyDir}, wantErr: `volume name "../../x" is not a single path segment`},
		{name: "hostile: volume name ..", v: Volume{Name: "..", Kind: EmptyDir}, wantErr: `volume name ".." is not a single path segment`},
		{name: "hostile: empty volume name", v: Volume{Kind: EmptyDir}, wantErr: "volume name is empty"},
		{name: "hostile: volume name with a NUL", v: Volume{Name: "x\x00y", Kind: EmptyDir}, wantErr: `volume name "x\x00y" is not a single path segment`},
		{name: "hostile: persistent volume name climbing out", v: dataVol, pvName: "../../../../root", pv: csi,
			wantErr: `persistent volume name "../../../../root" is not a single path segment`},
		{name: "hostile: persistent volume name ..", v: dataVol, pvName: "..", pv: local, wantErr: `persistent volume name ".." is not a single path segment`},
		{name: "hostile: persistent volume name with a slash", v: dataVol, pvName: "a/b", pv: csi, wantErr: `persistent volume name "a/b" is not a single path segment`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, u := tt.dir, tt.uid
			if d == "" {
				d = dir
			}
			switch u {
			case "":
				u = uid
			case "-":
				u = ""
			}
			got, err := HostPath(d, u, tt.v, tt.pvName, tt.pv)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("HostPath = %q, %v; want the error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("HostPath = %q, %v; want %q", got, err, tt.want)
			}
			if !strings.HasPrefix(got, strings.TrimSuffix(d, "/")+"/"+string(u)+"/volumes/") {
				t.Errorf("HostPath = %q, outside the pod's volumes directory", got)
			}
		})
	}
}
