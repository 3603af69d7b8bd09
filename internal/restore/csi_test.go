package restore_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/restore"
)

var (
	vsGVR  = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	vscGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
	pvcGVR = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
)

// csiRestore is the restore the CSI tests run: it maps shop to shop-copy.
func csiRestore() *cairnv1.Restore {
	return &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1", UID: "uid-r1"},
		Spec: cairnv1.RestoreSpec{BackupName: "b1", NamespaceMapping: map[string]cairnv1.NamespaceName{"shop": "shop-copy"}}}
}

// backedUpSnapshot is the backup's VolumeSnapshot of shop/data and its content, as a CSI
// snapshotter leaves them: handle "" leaves the content without status.snapshotHandle, driver
// "" without spec.driver.
func backedUpSnapshot(handle, driver string) (vs, vsc *unstructured.Unstructured) {
	vs = &unstructured.Unstructured{Object: object("snapshot.storage.k8s.io/v1", "VolumeSnapshot", "shop", "data-x7k2p", map[string]any{
		"spec":   map[string]any{"source": map[string]any{"persistentVolumeClaimName": "data"}, "volumeSnapshotClassName": "csi-class"},
		"status": map[string]any{"readyToUse": true, "boundVolumeSnapshotContentName": "snapcontent-1"},
	})}
	spec := map[string]any{"deletionPolicy": "Delete", "volumeSnapshotClassName": "csi-class",
		"source": map[string]any{"volumeHandle": "vol-1"}, "volumeSnapshotRef": map[string]any{"namespace": "shop", "name": "data-x7k2p"}}
	if driver != "" {
		spec["driver"] = driver
	}
	vsc = &unstructured.Unstructured{Object: object("snapshot.storage.k8s.io/v1", "VolumeSnapshotContent", "", "snapcontent-1", map[string]any{"spec": spec})}
	if handle != "" {
		vsc.Object["status"] = map[string]any{"snapshotHandle": handle, "readyToUse": true}
	}
	return vs, vsc
}

// restoredClaim is the claim shop/data prepared for shop-copy (as the built-in actions leave
// it), and the claim as backed up.
func restoredClaim() (prepared, original *unstructured.Unstructured) {
	original = &unstructured.Unstructured{Object: object("v1", "PersistentVolumeClaim", "shop", "data", map[string]any{
		"spec": map[string]any{"accessModes": []any{"ReadWriteOnce"}, "storageClassName": "csi-sc", "volumeName": "pv-data",
			"resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}},
	})}
	prepared = original.DeepCopy()
	prepared.SetNamespace("shop-copy")
	return prepared, original
}

func TestCSIRestoreActionExecute(t *testing.T) {
	rs := csiRestore()
	vsName, vscName := restore.SnapshotNames(rs, "shop-copy", "data")
	tests := []struct {
		name       string
		restorePVs bool
		handle     string
		driver     string
		noSnapshot bool // the backup holds no snapshot of the claim
		noContent  bool // the backup holds the snapshot but not its content
		existing   bool // the snapshot objects exist already (the item is retried)
		wantErr    string
		wantOp     bool
	}{
		{name: "a ready snapshot: the claim is made from it", restorePVs: true, handle: "snap-1", driver: "csi.example.com", wantOp: true},
		{name: "made already by an earlier attempt at the item", restorePVs: true, handle: "snap-1", driver: "csi.example.com", existing: true, wantOp: true},
		{name: "no snapshot of the claim in the backup", restorePVs: true, noSnapshot: true},
		{name: "the snapshot without its content", restorePVs: true, handle: "snap-1", driver: "csi.example.com", noContent: true},
		{name: "a content without a snapshot handle", restorePVs: true, driver: "csi.example.com", wantErr: "has no snapshot handle"},
		{name: "a content without a driver", restorePVs: true, handle: "snap-1", wantErr: "has no snapshot handle or driver"},
		{name: "restorePVs false", restorePVs: false, handle: "snap-1", driver: "csi.example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
			if tt.existing {
				a := restore.CSIRestoreAction{Dynamic: dyn}
				item, original := restoredClaim()
				vs, vsc := backedUpSnapshot(tt.handle, tt.driver)
				if _, err := a.Execute(context.Background(), csiInput(rs, item, original, tt.restorePVs, vs, vsc, nil)); err != nil {
					t.Fatal(err)
				}
			}
			vs, vsc := backedUpSnapshot(tt.handle, tt.driver)
			switch {
			case tt.noSnapshot:
				vs, vsc = nil, nil
			case tt.noContent:
				vsc = nil
			}
			var askedFor []string
			item, original := restoredClaim()
			before := original.DeepCopy()
			in := csiInput(rs, item, original, tt.restorePVs, vs, vsc, &askedFor)
			out, err := restore.CSIRestoreAction{Dynamic: dyn}.Execute(context.Background(), in)

			if !reflect.DeepEqual(original.Object, before.Object) {
				t.Errorf("the original claim was modified: %v", original.Object)
			}
			if tt.restorePVs && (len(askedFor) != 1 || askedFor[0] != "shop/data") {
				t.Errorf("asked for the snapshot of %v, want the claim as backed up (shop/data)", askedFor)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
				}
				if n := creates(dyn); n != 0 {
					t.Errorf("%d objects were created for a claim that fails", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if out.Skip {
				t.Fatalf("the claim was skipped: %s", out.SkipReason)
			}
			if !tt.wantOp {
				if out.OperationID != "" {
					t.Errorf("operation %q started, want none", out.OperationID)
				}
				if !reflect.DeepEqual(out.Item.Object, item.Object) {
					t.Errorf("the claim was changed: %v", out.Item.Object)
				}
				if n := creates(dyn); n != 0 {
					t.Errorf("%d objects were created, want none", n)
				}
				return
			}

			if out.OperationID != "shop-copy/data" {
				t.Errorf("operation ID %q, want the restored claim shop-copy/data", out.OperationID)
			}
			wantSource := map[string]any{"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": vsName}
			for _, field := range []string{"dataSource", "dataSourceRef"} {
				got, _, _ := unstructured.NestedMap(out.Item.Object, "spec", field)
				if !reflect.DeepEqual(got, wantSource) {
					t.Errorf("spec.%s = %v, want %v", field, got, wantSource)
				}
			}
			if _, found, _ := unstructured.NestedString(out.Item.Object, "spec", "volumeName"); found {
				t.Errorf("spec.volumeName is still set: the claim must get a new volume made from the snapshot")
			}
			if class, _, _ := unstructured.NestedString(out.Item.Object, "spec", "storageClassName"); class != "csi-sc" {
				t.Errorf("storageClassName = %q, want it kept", class)
			}

			content, err := dyn.Resource(vscGVR).Get(context.Background(), vscName, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the VolumeSnapshotContent: %v", err)
			}
			wantContent := map[string]any{
				"deletionPolicy":          "Retain",
				"driver":                  "csi.example.com",
				"source":                  map[string]any{"snapshotHandle": "snap-1"},
				"volumeSnapshotClassName": "csi-class",
				"volumeSnapshotRef": map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
					"namespace": "shop-copy", "name": vsName},
			}
			if got, _, _ := unstructured.NestedMap(content.Object, "spec"); !reflect.DeepEqual(got, wantContent) {
				t.Errorf("VolumeSnapshotContent spec = %v, want %v", got, wantContent)
			}
			snapshot, err := dyn.Resource(vsGVR).Namespace("shop-copy").Get(context.Background(), vsName, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the VolumeSnapshot in the target namespace: %v", err)
			}
			if got, _, _ := unstructured.NestedString(snapshot.Object, "spec", "source", "volumeSnapshotContentName"); got != vscName {
				t.Errorf("the VolumeSnapshot's content is %q, want %q", got, vscName)
			}
			for _, u := range []*unstructured.Unstructured{content, snapshot} {
				if l := u.GetLabels(); l[cairnv1.RestoreNameLabel] != "r1" || l[cairnv1.BackupNameLabel] != "b1" {
					t.Errorf("%s %s labels = %v, want the restore's and backup's", u.GetKind(), u.GetName(), l)
				}
			}
		})
	}
}

// csiInput is the input of the CSI restore action for the claim, the backup holding vs and
// vsc as its snapshot (nil: none); the claims asked about are appended to askedFor.
func csiInput(rs *cairnv1.Restore, item, original *unstructured.Unstructured, restorePVs bool, vs, vsc *unstructured.Unstructured, askedFor *[]string) restore.ActionInput {
	return restore.ActionInput{Item: item, Original: original,
		Options: restore.Options{BackupName: "b1", RestoreName: rs.Name, RestorePVs: restorePVs,
			NamespaceMapping: map[string]string{"shop": "shop-copy"}},
		Facts: restore.Facts{Restore: rs, SnapshotOf: func(namespace, claim string) (*unstructured.Unstructured, *unstructured.Unstructured) {
			if askedFor != nil {
				*askedFor = append(*askedFor, namespace+"/"+claim)
			}
			return vs, vsc
		}}}
}

// creates counts the creates the fake client served.
func creates(dyn *dynamicfake.FakeDynamicClient) int {
	n := 0
	for _, a := range dyn.Actions() {
		if a.GetVerb() == "create" {
			n++
		}
	}
	return n
}

func TestSnapshotNames(t *testing.T) {
	rs := csiRestore()
	other := csiRestore()
	other.UID = "uid-r1-again" // a restore of the same name, made again
	long := strings.Repeat("a", 199) + "-" + strings.Repeat("b", 53)
	dotted := strings.Repeat("c", 199) + "." + strings.Repeat("d", 53)
	vs, vsc := restore.SnapshotNames(rs, "shop-copy", "data")
	if vs2, vsc2 := restore.SnapshotNames(rs, "shop-copy", "data"); vs2 != vs || vsc2 != vsc {
		t.Errorf("names are not stable: %s %s, then %s %s", vs, vsc, vs2, vsc2)
	}
	if !strings.HasPrefix(vs, "data-restore-") || !strings.HasPrefix(vsc, "cairn-restore-") {
		t.Errorf("names %s %s do not say what they are", vs, vsc)
	}
	seen := map[string]string{}
	for _, tt := range []struct {
		name             string
		rs               *cairnv1.Restore
		namespace, claim string
	}{
		{"the claim", rs, "shop-copy", "data"},
		{"another claim", rs, "shop-copy", "logs"},
		{"the same claim in another namespace", rs, "shop-other", "data"},
		{"another restore of the same name", other, "shop-copy", "data"},
		{"a 253-character claim", rs, "shop-copy", long},
		{"a 253-character claim cut at a dot", rs, "shop-copy", dotted},
		{"a one-letter claim", rs, "shop-copy", "x"},
	} {
		vs, vsc := restore.SnapshotNames(tt.rs, tt.namespace, tt.claim)
		for _, n := range []string{vs, vsc} {
			if problems := validation.IsDNS1123Subdomain(n); len(problems) > 0 {
				t.Errorf("%s: %q is not a valid object name: %v", tt.name, n, problems)
			}
			if prev, dup := seen[n]; dup {
				t.Errorf("%s: %q is also the name for %s", tt.name, n, prev)
			}
			seen[n] = tt.name
		}
	}
}

func TestCSIRestoreActionProgress(t *testing.T) {
	claim := func(phase string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: object("v1", "PersistentVolumeClaim", "shop-copy", "data", nil)}
		if phase != "" {
			u.Object["status"] = map[string]any{"phase": phase}
		}
		return u
	}
	tests := []struct {
		name          string
		claim         *unstructured.Unstructured // nil: gone
		operationID   string
		getErr        error
		wantCompleted bool
		wantErr       string // OperationProgress.Err
		wantCallErr   bool   // Progress itself fails (tried again at the next poll)
	}{
		{name: "Bound", claim: claim("Bound"), operationID: "shop-copy/data", wantCompleted: true},
		{name: "Pending", claim: claim("Pending"), operationID: "shop-copy/data"},
		{name: "no status yet", claim: claim(""), operationID: "shop-copy/data"},
		{name: "Lost", claim: claim("Lost"), operationID: "shop-copy/data", wantErr: "lost its volume"},
		{name: "gone", operationID: "shop-copy/data", wantErr: "was deleted before it was bound"},
		{name: "the API server does not answer", claim: claim("Bound"), operationID: "shop-copy/data",
			getErr: apierrors.NewServiceUnavailable("etcd is down"), wantCallErr: true},
		{name: "a malformed operation ID", claim: claim("Bound"), operationID: "data", wantCallErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objects []runtime.Object
			if tt.claim != nil {
				objects = append(objects, tt.claim)
			}
			dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), objects...)
			if tt.getErr != nil {
				dyn.PrependReactor("get", "persistentvolumeclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, tt.getErr
				})
			}
			p, err := restore.CSIRestoreAction{Dynamic: dyn}.Progress(context.Background(), tt.operationID, csiRestore())
			if tt.wantCallErr {
				if err == nil {
					t.Fatalf("Progress = %+v, want an error", p)
				}
				return
			}
			if err != nil {
				t.Fatalf("Progress: %v", err)
			}
			if p.Completed != tt.wantCompleted {
				t.Errorf("completed = %v, want %v", p.Completed, tt.wantCompleted)
			}
			if (tt.wantErr == "") != (p.Err == "") || !strings.Contains(p.Err, tt.wantErr) {
				t.Errorf("Err = %q, want %q", p.Err, tt.wantErr)
			}
			if tt.wantErr == "" && !tt.wantCompleted && p.Description == "" {
				t.Errorf("a running operation says nothing of what it waits for")
			}
		})
	}
}

func TestCSIRestoreActionCancel(t *testing.T) {
	rs := csiRestore()
	vsName, vscName := restore.SnapshotNames(rs, "shop-copy", "data")
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	a := restore.CSIRestoreAction{Dynamic: dyn}
	item, original := restoredClaim()
	vs, vsc := backedUpSnapshot("snap-1", "csi.example.com")
	out, err := a.Execute(context.Background(), csiInput(rs, item, original, true, vs, vsc, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(pvcGVR).Namespace("shop-copy").Create(context.Background(), out.Item, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another claim's snapshot objects, which this cancel must leave alone.
	other, otherOriginal := restoredClaim()
	other.SetName("logs")
	otherOriginal.SetName("logs")
	if _, err := a.Execute(context.Background(), csiInput(rs, other, otherOriginal, true, vs, vsc, nil)); err != nil {
		t.Fatal(err)
	}
	otherVS, otherVSC := restore.SnapshotNames(rs, "shop-copy", "logs")

	for attempt := 1; attempt <= 2; attempt++ {
		if err := a.Cancel(context.Background(), out.OperationID, rs); err != nil {
			t.Fatalf("Cancel, attempt %d: %v", attempt, err)
		}
	}
	if _, err := dyn.Resource(vsGVR).Namespace("shop-copy").Get(context.Background(), vsName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the VolumeSnapshot is still there (%v)", err)
	}
	if _, err := dyn.Resource(vscGVR).Get(context.Background(), vscName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the VolumeSnapshotContent is still there (%v)", err)
	}
	if _, err := dyn.Resource(pvcGVR).Namespace("shop-copy").Get(context.Background(), "data", metav1.GetOptions{}); err != nil {
		t.Errorf("the restored claim is gone: a cancel leaves restored objects (%v)", err)
	}
	if _, err := dyn.Resource(vsGVR).Namespace("shop-copy").Get(context.Background(), otherVS, metav1.GetOptions{}); err != nil {
		t.Errorf("another claim's VolumeSnapshot was deleted (%v)", err)
	}
	if _, err := dyn.Resource(vscGVR).Get(context.Background(), otherVSC, metav1.GetOptions{}); err != nil {
		t.Errorf("another claim's VolumeSnapshotContent was deleted (%v)", err)
	}

	if err := a.Cancel(context.Background(), "data", rs); err == nil {
		t.Errorf("Cancel of a malformed operation ID succeeded")
	}
	dyn.PrependReactor("delete", "volumesnapshots", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if err := a.Cancel(context.Background(), "shop-copy/logs", rs); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Cancel with the API server failing = %v, want its error (the operation's error says the cancel failed)", err)
	}
}
