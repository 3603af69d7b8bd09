package podvolume

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/testenv"
	"github.com/cairn-backup/cairn/internal/velerofmt"
)

// pvb is a completed Velero PodVolumeBackup of volume of pod shop/db-0.
func pvb(pod, volume, uploader, snapshot string) velerofmt.PodVolumeBackup {
	var p velerofmt.PodVolumeBackup
	p.Spec.Pod.Namespace, p.Spec.Pod.Name = "shop", pod
	p.Spec.Volume, p.Spec.UploaderType = volume, uploader
	p.Status.Phase, p.Status.SnapshotID = "Completed", snapshot
	return p
}

func TestVeleroRestoredVolumes(t *testing.T) {
	source, tags := "snapshot-pod-volume/kopia/shop/db-0/", map[string]string{"ns": "shop", "pod": "db-0"}
	for _, tc := range []struct {
		name    string
		copied  []velerofmt.PodVolumeBackup
		want    map[string]Snapshot
		refused []string
	}{
		{
			name:   "kopia: read from Velero's repository of the pod's namespace in the backup's location, only a snapshot of that pod",
			copied: []velerofmt.PodVolumeBackup{pvb("db-0", "data", "kopia", "k1"), pvb("db-0", "wal", "kopia", "k2")},
			want: map[string]Snapshot{
				"data": {Pod: cairnv1.PodReference{Namespace: "shop", Name: "db-0"}, Volume: "data", SnapshotID: "k1", Source: source, SourceTags: tags,
					Repository: cairnv1.RepositoryReference{StorageLocation: "velero", Namespace: "shop"}},
				"wal": {Pod: cairnv1.PodReference{Namespace: "shop", Name: "db-0"}, Volume: "wal", SnapshotID: "k2", Source: source, SourceTags: tags,
					Repository: cairnv1.RepositoryReference{StorageLocation: "velero", Namespace: "shop"}},
			},
		},
		{
			name:    "restic: refused, naming the volume, the uploader and the snapshot",
			copied:  []velerofmt.PodVolumeBackup{pvb("db-0", "data", "kopia", "k1"), pvb("db-0", "old", "", "r1")},
			want:    map[string]Snapshot{"data": {Pod: cairnv1.PodReference{Namespace: "shop", Name: "db-0"}, Volume: "data", SnapshotID: "k1", Source: source, SourceTags: tags, Repository: cairnv1.RepositoryReference{StorageLocation: "velero", Namespace: "shop"}}},
			refused: []string{"volume old was copied by Velero's restic uploader (snapshot r1), whose repositories Cairn cannot read"},
		},
		{
			name:   "another pod's record is not this pod's",
			copied: []velerofmt.PodVolumeBackup{pvb("web-0", "data", "kopia", "k9")},
			want:   map[string]Snapshot{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, refused := veleroRestoredVolumes(tc.copied, "shop", "db-0", "velero")
			if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(refused, tc.refused) {
				t.Errorf("veleroRestoredVolumes = %+v, %q\nwant %+v, %q", got, refused, tc.want, tc.refused)
			}
		})
	}
}

// readable answers Readable with err.
type readable struct{ err error }

func (r readable) Readable(context.Context, cairnv1.RepositoryReference) error { return r.err }

// veleroPod is the pod shop/db-0 with emptyDir volumes data and wal, as backed up.
func veleroPod(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-0"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "db", Image: "db:1"}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "wal", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// A pod of a Velero backup whose volumes Velero's kopia file-system backup copied is restored
// through Cairn's own volume restore: the restore helper first, and one PodVolumeRestore per
// volume naming Velero's repository of the pod's namespace in the backup's location, the
// snapshot, and the source the snapshot must be of; the pod (under a namespace mapping) is
// one async operation. A repository whose password is not known, or a restic volume, is an
// error of the pod, which is not made.
func TestRestoreActionRestoresVeleroCopiedVolumes(t *testing.T) {
	copied := map[string][]velerofmt.PodVolumeBackup{"shop/db-0": {pvb("db-0", "data", "kopia", "k1"), pvb("db-0", "wal", "kopia", "k2")}}
	facts := func(rs *cairnv1.Restore) restore.Facts {
		return restore.Facts{Restore: rs, BackupLocation: "velero", VeleroVolumes: func(_ context.Context, namespace, name string) ([]velerofmt.PodVolumeBackup, error) {
			return velerofmt.CopiedVolumes(copied[namespace+"/"+name], namespace, name), nil
		}}
	}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "from-velero", UID: "r-uid"}}
	original := veleroPod(t)
	mapped := original.DeepCopy()
	mapped.SetNamespace("shop-restored")

	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).Build()
	a := RestoreAction{Client: c, Reader: c, Namespace: "cairn-system", HelperImage: "cairn/manager:1", Repositories: readable{}}
	out, err := a.Execute(context.Background(), restore.ActionInput{Item: mapped.DeepCopy(), Original: original, Facts: facts(rs)})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if out.OperationID != "shop-restored/db-0" {
		t.Errorf("operation %q, want shop-restored/db-0", out.OperationID)
	}
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(out.Item.Object, &pod); err != nil {
		t.Fatal(err)
	}
	if !waitsForData(&pod) || !strings.Contains(strings.Join(pod.Spec.InitContainers[0].Args, " "), "--volumes=data,wal") {
		t.Errorf("init containers %v: the restore helper must wait for data and wal first", pod.Spec.InitContainers)
	}
	var pvrs cairnv1.PodVolumeRestoreList
	if err := c.List(context.Background(), &pvrs, client.InNamespace("cairn-system")); err != nil {
		t.Fatal(err)
	}
	got := map[string]cairnv1.PodVolumeRestoreSpec{}
	for _, p := range pvrs.Items {
		got[p.Spec.Volume] = p.Spec
	}
	for volume, id := range map[string]string{"data": "k1", "wal": "k2"} {
		s := got[volume]
		want := cairnv1.PodVolumeRestoreSpec{
			Pod: cairnv1.PodReference{Namespace: "shop-restored", Name: "db-0"}, Volume: volume,
			SourcePod:  &cairnv1.PodReference{Namespace: "shop", Name: "db-0"},
			Repository: cairnv1.RepositoryReference{StorageLocation: "velero", Namespace: "shop"}, SnapshotID: id,
			SnapshotSource: "snapshot-pod-volume/kopia/shop/db-0/", SnapshotTags: map[string]string{"ns": "shop", "pod": "db-0"},
		}
		if !reflect.DeepEqual(s, want) {
			t.Errorf("PodVolumeRestore of %s: %+v\nwant %+v", volume, s, want)
		}
	}
	if len(pvrs.Items) != 2 {
		t.Errorf("%d PodVolumeRestores, want 2", len(pvrs.Items))
	}

	t.Run("a repository whose password is not known is an error of the pod, naming the volume", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).Build()
		a := RestoreAction{Client: c, Reader: c, Namespace: "cairn-system", HelperImage: "cairn/manager:1",
			Repositories: readable{errors.New("storage location velero has no spec.velero.repositoryPasswordSecretRef")}}
		_, err := a.Execute(context.Background(), restore.ActionInput{Item: original.DeepCopy(), Original: original, Facts: facts(rs)})
		if err == nil || !strings.Contains(err.Error(), "the data of volume data cannot be restored: storage location velero has no spec.velero.repositoryPasswordSecretRef") {
			t.Errorf("Execute = %v", err)
		}
		var pvrs cairnv1.PodVolumeRestoreList
		_ = c.List(context.Background(), &pvrs)
		if len(pvrs.Items) != 0 {
			t.Errorf("%d PodVolumeRestores made for a pod that is not restored", len(pvrs.Items))
		}
	})

	t.Run("a volume restic copied is an error of the pod, naming it", func(t *testing.T) {
		copied["shop/db-0"] = append(copied["shop/db-0"], pvb("db-0", "old", "restic", "r1"))
		_, err := a.Execute(context.Background(), restore.ActionInput{Item: original.DeepCopy(), Original: original, Facts: facts(rs)})
		if err == nil || !strings.Contains(err.Error(), "volume old was copied by Velero's restic uploader (snapshot r1)") {
			t.Errorf("Execute = %v", err)
		}
	})

	t.Run("a pod Velero copied no volume of is restored as it is", func(t *testing.T) {
		other := original.DeepCopy()
		other.SetName("web-0")
		out, err := a.Execute(context.Background(), restore.ActionInput{Item: other.DeepCopy(), Original: other, Facts: facts(rs)})
		if err != nil || out.OperationID != "" || len(out.Item.Object["spec"].(map[string]any)["volumes"].([]any)) != 2 {
			t.Errorf("Execute = %v, %v", out, err)
		}
	})
}

func TestCopyVeleroPassword(t *testing.T) {
	secret := func(data map[string]string, copies string) *corev1.Secret {
		s := &corev1.Secret{Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		if copies != "" {
			s.Annotations = map[string]string{VeleroPasswordsAnnotation: copies}
		}
		return s
	}
	for _, tc := range []struct {
		name       string
		secret     *corev1.Secret
		changed    bool
		err        string
		wantCopies string
		wantVelero string
		wantOthers map[string]string
	}{
		{name: "first copy: set and recorded", secret: secret(map[string]string{"default_shop": "cairn-made"}, ""), changed: true,
			wantCopies: "velero_shop", wantVelero: "static-passw0rd", wantOthers: map[string]string{"default_shop": "cairn-made"}},
		{name: "the same copy again: nothing changes", secret: secret(map[string]string{"velero_shop": "static-passw0rd"}, "velero_shop"),
			wantCopies: "velero_shop", wantVelero: "static-passw0rd"},
		{name: "a changed Velero password replaces the copy", secret: secret(map[string]string{"velero_shop": "old"}, "velero_ledger,velero_shop"), changed: true,
			wantCopies: "velero_ledger,velero_shop", wantVelero: "static-passw0rd"},
		{name: "a password Cairn made is never replaced", secret: secret(map[string]string{"velero_shop": "cairn-made"}, "velero_ledger"),
			err: "already holds the password of a repository Cairn made", wantCopies: "velero_ledger", wantVelero: "cairn-made"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed, err := copyVeleroPassword(tc.secret, "velero_shop", "static-passw0rd")
			if changed != tc.changed || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("copyVeleroPassword = %v, %v; want %v, %q", changed, err, tc.changed, tc.err)
			}
			if got := tc.secret.Annotations[VeleroPasswordsAnnotation]; got != tc.wantCopies {
				t.Errorf("copies %q, want %q", got, tc.wantCopies)
			}
			if got := string(tc.secret.Data["velero_shop"]); got != tc.wantVelero {
				t.Errorf("velero_shop = %q, want %q", got, tc.wantVelero)
			}
			for k, v := range tc.wantOthers {
				if string(tc.secret.Data[k]) != v {
					t.Errorf("%s = %q, want %q", k, tc.secret.Data[k], v)
				}
			}
		})
	}
}

// TestCairnPassword: a repository Cairn makes takes the password it made before, and never one
// copied from a Velero location of the same name.
func TestCairnPassword(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret corev1.Secret
		want   string
		err    string
	}{
		{name: "none yet", secret: corev1.Secret{}},
		{name: "one Cairn made", secret: corev1.Secret{Data: map[string][]byte{"default_shop": []byte("cairn-made")}}, want: "cairn-made"},
		{name: "another key copied from Velero", want: "cairn-made", secret: corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{VeleroPasswordsAnnotation: "velero_shop"}},
			Data:       map[string][]byte{"default_shop": []byte("cairn-made"), "velero_shop": []byte("static-passw0rd")}}},
		{name: "this key copied from Velero", err: "holds the password of a Velero repository", secret: corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{VeleroPasswordsAnnotation: "velero_ledger,default_shop"}},
			Data:       map[string][]byte{"default_shop": []byte("static-passw0rd")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cairnPassword(&tc.secret, "default_shop")
			if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("cairnPassword = %q, %v; want %q, %q", got, err, tc.want, tc.err)
			}
		})
	}
}
