package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// A node runs at most MaxCopies copies at once; the others stay New, saying why, and start
// once a slot is free.
func TestCopiesWaitForAFreeSlot(t *testing.T) {
	const n, limit = 5, 2
	var objs []client.Object
	for i := range n {
		objs = append(objs, &cairnv1.PodVolumeBackup{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pvb-%d", i), Namespace: "cairn-system"},
			Spec:       cairnv1.PodVolumeBackupSpec{Node: "node-a"},
		})
	}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).
		WithStatusSubresource(&cairnv1.PodVolumeBackup{}).WithObjects(objs...).Build()
	a := &Agent{Client: c, Reader: c, Node: "node-a", MaxCopies: limit, Clock: clock.RealClock{}}
	release := make(chan struct{})
	var running, peak atomic.Int32
	k := backups(a)
	k.work = func(ctx context.Context, _ *cairnv1.PodVolumeBackup, _ *progress) (outcome, error) {
		now := running.Add(1)
		for old := peak.Load(); now > old && !peak.CompareAndSwap(old, now); old = peak.Load() {
		}
		defer running.Add(-1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return outcome{}, nil
	}
	cp := &copies[*cairnv1.PodVolumeBackup]{agent: a, kind: k}
	reconcile := func(i int) ctrl.Result {
		t.Helper()
		res, err := cp.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "cairn-system", Name: fmt.Sprintf("pvb-%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	get := func(i int) cairnv1.PodVolumeStatus {
		t.Helper()
		var pvb cairnv1.PodVolumeBackup
		if err := c.Get(t.Context(), types.NamespacedName{Namespace: "cairn-system", Name: fmt.Sprintf("pvb-%d", i)}, &pvb); err != nil {
			t.Fatal(err)
		}
		return pvb.Status
	}
	for i := range n {
		res := reconcile(i)
		s := get(i)
		switch {
		case i < limit && s.Phase != cairnv1.PodVolumePhaseInProgress:
			t.Fatalf("copy %d: phase %q, want InProgress", i, s.Phase)
		case i >= limit && (s.Phase != "" || !strings.Contains(s.Message, "waiting for a free copy slot on node node-a") || res.RequeueAfter != slotWait):
			t.Fatalf("copy %d: phase %q, message %q, requeue %v: want it waiting for a slot", i, s.Phase, s.Message, res.RequeueAfter)
		}
	}
	close(release)
	// Each round starts what the slots freed by the last allow.
	for range n {
		a.copies.Wait()
		for i := limit; i < n; i++ {
			if get(i).Phase == "" {
				reconcile(i)
			}
		}
	}
	a.copies.Wait()
	for i := range n {
		if s := get(i); s.Phase != cairnv1.PodVolumePhaseCompleted {
			t.Fatalf("copy %d: phase %q (%s), want Completed", i, s.Phase, s.Message)
		}
	}
	if peak.Load() > limit {
		t.Fatalf("%d copies ran at once, limit %d", peak.Load(), limit)
	}
}
