package hooks

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/restore"
)

var created = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// restoredPod is a pod created at created whose containers are in the states given: "running",
// "ready" (running and Ready), or "waiting".
func restoredPod(phase corev1.PodPhase, containers ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-0", CreationTimestamp: metav1.NewTime(created)},
		Status: corev1.PodStatus{Phase: phase}}
	for _, c := range containers {
		name, state, _ := strings.Cut(c, "=")
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: name, Image: "i"})
		st := corev1.ContainerStatus{Name: name}
		switch state {
		case "running":
			st.State.Running = &corev1.ContainerStateRunning{}
		case "ready":
			st.State.Running, st.Ready = &corev1.ContainerStateRunning{}, true
		case "waiting":
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		}
		if state != "" {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, st)
		}
	}
	return pod
}

func restoreExecHook(name, container string, onError cairnv1.HookErrorMode, wait time.Duration, ready bool) RestoreExec {
	return RestoreExec{Hook: Hook{Name: name, Phase: Post, Container: container, Command: []string{"true"}, OnError: onError, Timeout: time.Second},
		WaitTimeout: wait, WaitForReady: ready}
}

func TestPlanRestoreExec(t *testing.T) {
	const fail, cont = cairnv1.HookErrorModeFail, cairnv1.HookErrorModeContinue
	tests := []struct {
		name     string
		pod      *corev1.Pod
		hooks    []RestoreExec
		after    time.Duration
		wantWait string
		// wantFail names the hooks that fail without running, with what their error says.
		wantFail map[int]string
	}{
		{name: "running: run", pod: restoredPod(corev1.PodRunning, "db=running"), hooks: []RestoreExec{restoreExecHook("a", "", fail, 0, false)}},
		{name: "initialising: wait", pod: restoredPod(corev1.PodPending, "db=waiting"), hooks: []RestoreExec{restoreExecHook("a", "db", fail, 0, false)}, wantWait: `container "db" to run`},
		{name: "no status yet: wait", pod: restoredPod(corev1.PodPending, "db"), hooks: []RestoreExec{restoreExecHook("a", "db", fail, 0, true)}, wantWait: `container "db" to run and be Ready`},
		{name: "running but not Ready: wait for ready", pod: restoredPod(corev1.PodRunning, "db=running"), hooks: []RestoreExec{restoreExecHook("a", "db", fail, 0, true)}, wantWait: `container "db" to be Ready`},
		{name: "Ready: run", pod: restoredPod(corev1.PodRunning, "db=ready"), hooks: []RestoreExec{restoreExecHook("a", "db", fail, 0, true)}},
		{name: "waitTimeout not passed: wait", pod: restoredPod(corev1.PodPending, "db=waiting"), hooks: []RestoreExec{restoreExecHook("a", "db", fail, time.Minute, false)}, after: 59 * time.Second, wantWait: `container "db" to run`},
		{
			name: "waitTimeout passed: fails", pod: restoredPod(corev1.PodPending, "db=waiting"), hooks: []RestoreExec{restoreExecHook("a", "db", fail, time.Minute, false)}, after: time.Minute,
			wantFail: map[int]string{0: `waited 1m0s (its waitTimeout) for container "db" to run`},
		},
		{
			name: "a missing container fails at once, whatever else waits", pod: restoredPod(corev1.PodPending, "db=waiting"),
			hooks:    []RestoreExec{restoreExecHook("a", "sidecar", fail, 0, false), restoreExecHook("b", "db", fail, 0, false)},
			wantFail: map[int]string{0: `container "sidecar" is not in pod shop/db-0`},
		},
		{
			name: "a missing container of a Continue hook waits for the rest", pod: restoredPod(corev1.PodPending, "db=waiting"),
			hooks:    []RestoreExec{restoreExecHook("a", "sidecar", cont, 0, false), restoreExecHook("b", "db", fail, 0, false)},
			wantWait: `container "db" to run`, wantFail: map[int]string{0: `container "sidecar" is not in pod shop/db-0`},
		},
		{
			name: "a failure after a waiting hook waits for it", pod: restoredPod(corev1.PodPending, "db=waiting"),
			hooks:    []RestoreExec{restoreExecHook("a", "db", fail, 0, false), restoreExecHook("b", "sidecar", fail, 0, false)},
			wantWait: `container "db" to run`, wantFail: map[int]string{1: `container "sidecar" is not in pod shop/db-0`},
		},
		{
			name: "an ended pod fails every hook at once", pod: restoredPod(corev1.PodFailed, "db=waiting"),
			hooks:    []RestoreExec{restoreExecHook("a", "db", fail, 0, false), restoreExecHook("b", "db", cont, 0, false)},
			wantFail: map[int]string{0: "pod shop/db-0 has ended (Failed)", 1: "pod shop/db-0 has ended (Failed)"},
		},
		{
			name: "each hook waits for its own container", pod: restoredPod(corev1.PodRunning, "db=ready", "cache=running"),
			hooks:    []RestoreExec{restoreExecHook("a", "db", fail, 0, true), restoreExecHook("b", "cache", fail, 0, true)},
			wantWait: `container "cache" to be Ready`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := PlanRestoreExec(tt.pod, tt.hooks, created.Add(tt.after))
			if plan.Wait != tt.wantWait {
				t.Errorf("wait %q, want %q", plan.Wait, tt.wantWait)
			}
			for i, err := range plan.Failures {
				want, failing := tt.wantFail[i]
				switch {
				case failing && (err == nil || !strings.Contains(err.Error(), want)):
					t.Errorf("hook %d: %v, want %q", i, err, want)
				case !failing && err != nil:
					t.Errorf("hook %d fails: %v", i, err)
				}
			}
		})
	}
}

// The exec hook operation over a fake executor: it waits while the pod starts, then runs the
// hooks once; a pod whose hooks changed meanwhile, or that is gone, fails.
func TestRestoreExecActionProgress(t *testing.T) {
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r"}, Spec: cairnv1.RestoreSpec{
		Hooks: &cairnv1.RestoreHooks{Resources: []cairnv1.RestoreResourceHookSpec{{Name: "db", PostHooks: []cairnv1.RestoreResourceHook{
			{Exec: &cairnv1.RestoreExecHook{Container: "db", Command: []string{"/reindex"}, WaitForReady: new(true)}},
			{Exec: &cairnv1.RestoreExecHook{Container: "db", Command: []string{"exit", "3"}, OnError: cairnv1.HookErrorModeContinue}},
		}}}}}}
	pod := restoredPod(corev1.PodPending, "db=waiting")
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		t.Fatal(err)
	}
	exec := &fakeExecutor{}
	c := fake.NewClientBuilder().WithObjects(pod).Build()
	a := RestoreExecAction{Runner: &Runner{Executor: exec, Pods: c}}
	out, err := a.Execute(context.Background(), restore.ActionInput{Item: &unstructured.Unstructured{Object: obj}, Facts: restore.Facts{Restore: rs}})
	if err != nil || !strings.HasPrefix(out.OperationID, "shop/db-0#") || len(out.Errors) != 0 {
		t.Fatalf("execute: %+v, %v", out, err)
	}
	p, err := a.Progress(context.Background(), out.OperationID, rs)
	if err != nil || p.Completed || p.Err != "" || !strings.Contains(p.Description, `wait: container "db" to run`) || len(exec.snapshot()) != 0 {
		t.Fatalf("while the pod starts: %+v, %v, calls %v", p, err, exec.snapshot())
	}
	if err := c.Status().Update(context.Background(), withVersion(t, c, restoredPod(corev1.PodRunning, "db=ready"))); err != nil {
		t.Fatal(err)
	}
	p, err = a.Progress(context.Background(), out.OperationID, rs)
	if err != nil || !p.Completed || p.Err != "" {
		t.Fatalf("once Ready: %+v, %v", p, err)
	}
	if calls := exec.snapshot(); fmt.Sprint(calls) != "[shop/db-0/db:/reindex shop/db-0/db:exit 3]" {
		t.Fatalf("calls %v", calls)
	}
	var result backup.OperationHooks
	if err := json.Unmarshal(p.Result, &result); err != nil || *result.Hooks != (backup.HookCounts{Attempted: 2, Failed: 1}) || result.Continued != 1 {
		t.Fatalf("result %s", p.Result)
	}
	if !strings.Contains(p.Description, "failed and continued") || !strings.Contains(p.Description, "exited with code 3") ||
		!strings.Contains(p.Description, `Hook spec db postHooks[0] succeeded (pod shop/db-0, container db, command ["/reindex"]`) {
		t.Fatalf("description %q", p.Description)
	}

	// The pod's annotations edited after the restore: its hooks are not those restored.
	edited := withVersion(t, c, restoredPod(corev1.PodRunning, "db=ready"))
	edited.Annotations = map[string]string{"post.hook.restore.cairn.dev/command": "/something-else"}
	if err := c.Update(context.Background(), edited); err != nil {
		t.Fatal(err)
	}
	if p, _ := a.Progress(context.Background(), out.OperationID, rs); !strings.Contains(p.Err, "the pod's hooks changed after it was restored") {
		t.Fatalf("edited: %+v", p)
	}
	// Gone: every hook fails at once, named; a Fail hook fails the operation.
	if err := c.Delete(context.Background(), edited); err != nil {
		t.Fatal(err)
	}
	p, _ = a.Progress(context.Background(), out.OperationID, rs)
	if !strings.Contains(p.Err, "hook spec db postHooks[0] failed in pod shop/db-0: pod shop/db-0 is gone") {
		t.Fatalf("gone: %+v", p)
	}
	if p, _ := a.Progress(context.Background(), "shop/db-0", rs); !strings.Contains(p.Err, "names no pod") {
		t.Fatalf("malformed: %+v", p)
	}
}

func withVersion(t *testing.T, c client.Client, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	var live corev1.Pod
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), &live); err != nil {
		t.Fatal(err)
	}
	pod.ResourceVersion = live.ResourceVersion
	return pod
}
