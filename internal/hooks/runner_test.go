package hooks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilexec "k8s.io/utils/exec"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// fakeExecutor runs each command as a script: "sleep" waits for ctx (ignoring it when
// ignoreCtx), "exit N" exits N, "print N" writes N bytes to stdout and stderr.
type fakeExecutor struct {
	mu        sync.Mutex
	calls     []string
	ignoreCtx bool
}

func (f *fakeExecutor) Exec(ctx context.Context, namespace, pod, container string, command []string, stdout, stderr io.Writer) error {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("%s/%s/%s:%s", namespace, pod, container, strings.Join(command, " ")))
	f.mu.Unlock()
	switch command[0] {
	case "sleep":
		if f.ignoreCtx {
			time.Sleep(time.Hour)
		}
		<-ctx.Done()
		return ctx.Err()
	case "exit":
		var code int
		_, _ = fmt.Sscan(command[1], &code)
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	case "print":
		var n int
		_, _ = fmt.Sscan(command[1], &n)
		for i := range n {
			_, _ = fmt.Fprint(stdout, i%10)
		}
		_, _ = io.WriteString(stderr, "warning\n")
	}
	return nil
}

// snapshot is the calls so far (an abandoned command's goroutine may still be running).
func (f *fakeExecutor) snapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func runningPod(containers ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, Image: "i"})
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	}
	return pod
}

func newRunner(exec Executor, pods ...*corev1.Pod) *Runner {
	b := fake.NewClientBuilder()
	for _, p := range pods {
		b = b.WithObjects(p)
	}
	return &Runner{Executor: exec, Pods: b.Build()}
}

func hook(name string, onError cairnv1.HookErrorMode, timeout time.Duration, container string, command ...string) Hook {
	return Hook{Name: name, Phase: Pre, Container: container, Command: command, OnError: onError, Timeout: timeout}
}

var aBackup = &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "b"}}

func TestRunAllRunsInOrderAndDefaultsToTheFirstContainer(t *testing.T) {
	exec := &fakeExecutor{}
	r := newRunner(exec, runningPod("app", "sidecar"))
	rep := r.RunAll(context.Background(), aBackup, "ns", "p", []Hook{
		hook("one", cairnv1.HookErrorModeFail, time.Second, "", "true"),
		hook("two", cairnv1.HookErrorModeFail, time.Second, "sidecar", "print", "3"),
	})
	if rep.Attempted != 2 || rep.Failed != 0 || rep.Failure != "" {
		t.Fatalf("report %+v", rep)
	}
	if got := strings.Join(exec.snapshot(), ","); got != "ns/p/app:true,ns/p/sidecar:print 3" {
		t.Fatalf("calls %s", got)
	}
	o := rep.Outcomes[1]
	if o.ExitCode != 0 || o.Stdout != "012" || o.Stderr != "warning\n" {
		t.Fatalf("outcome %+v", o)
	}
	for _, want := range []string{"Hook two succeeded", "pod ns/p", "container sidecar", `command ["print" "3"]`, "exit code 0", `stdout: "012"`} {
		if !strings.Contains(o.Message(), want) {
			t.Errorf("message %q lacks %q", o.Message(), want)
		}
	}
}

func TestFailStopsTheRestContinueDoesNot(t *testing.T) {
	exec := &fakeExecutor{}
	r := newRunner(exec, runningPod("app"))
	rep := r.RunAll(context.Background(), aBackup, "ns", "p", []Hook{
		hook("soft", cairnv1.HookErrorModeContinue, time.Second, "", "exit", "3"),
		hook("hard", cairnv1.HookErrorModeFail, time.Second, "", "exit", "4"),
		hook("never", cairnv1.HookErrorModeFail, time.Second, "", "true"),
	})
	if rep.Attempted != 2 || rep.Failed != 2 || len(exec.snapshot()) != 2 {
		t.Fatalf("report %+v, calls %v", rep, exec.snapshot())
	}
	if !strings.Contains(rep.Failure, "hook hard failed in pod ns/p: the command exited with code 4") {
		t.Fatalf("failure %q", rep.Failure)
	}
	if rep.Outcomes[0].ExitCode != 3 || rep.Outcomes[1].ExitCode != 4 {
		t.Fatalf("exit codes %d %d", rep.Outcomes[0].ExitCode, rep.Outcomes[1].ExitCode)
	}
}

func TestMissingContainerOrPodFailsAtOnce(t *testing.T) {
	pending := runningPod("app")
	pending.Name = "pending"
	pending.Status.Phase = corev1.PodPending
	stopped := runningPod("app", "side")
	stopped.Name = "stopped"
	stopped.Status.ContainerStatuses[1].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
	tests := []struct {
		name, pod, container, want string
	}{
		{"no such container", "p", "nope", `container "nope" is not in pod ns/p`},
		{"no such pod", "gone", "app", "pod ns/gone is gone"},
		{"a pod not running", "pending", "app", "pod ns/pending is Pending, not Running"},
		{"a container not running", "stopped", "side", `container "side" of pod ns/stopped is not running`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exec := &fakeExecutor{}
			r := newRunner(exec, runningPod("app"), pending, stopped)
			start := time.Now()
			rep := r.RunAll(context.Background(), aBackup, "ns", tt.pod, []Hook{hook("h", cairnv1.HookErrorModeFail, time.Hour, tt.container, "sleep")})
			if time.Since(start) > time.Second {
				t.Fatalf("took %s: it waited", time.Since(start))
			}
			if len(exec.snapshot()) != 0 || rep.Attempted != 1 || rep.Failed != 1 || !strings.Contains(rep.Failure, tt.want) {
				t.Fatalf("report %+v, calls %v, want %q", rep, exec.snapshot(), tt.want)
			}
		})
	}
}

func TestATimeoutCutsTheCommandOff(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		t.Run(fmt.Sprintf("executor ignores its context: %v", ignore), func(t *testing.T) {
			exec := &fakeExecutor{ignoreCtx: ignore}
			r := newRunner(exec, runningPod("app"))
			start := time.Now()
			rep := r.RunAll(context.Background(), aBackup, "ns", "p", []Hook{
				hook("slow", cairnv1.HookErrorModeContinue, 200*time.Millisecond, "", "sleep"),
				hook("next", cairnv1.HookErrorModeFail, time.Second, "", "true"),
			})
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("took %s", took)
			}
			if rep.Attempted != 2 || rep.Failed != 1 || rep.Failure != "" {
				t.Fatalf("report %+v", rep)
			}
			o := rep.Outcomes[0]
			if !strings.Contains(o.Err.Error(), "timed out after 200ms: the command was abandoned") || o.ExitCode != -1 {
				t.Fatalf("outcome %+v", o)
			}
		})
	}
}

func TestCancelStopsWaitingWithinTwoSeconds(t *testing.T) {
	exec := &fakeExecutor{ignoreCtx: true}
	r := newRunner(exec, runningPod("app"))
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(100*time.Millisecond, func() { cancel(errors.New("backup cancel requested")) })
	start := time.Now()
	rep := r.RunAll(ctx, aBackup, "ns", "p", []Hook{
		hook("long", cairnv1.HookErrorModeContinue, time.Hour, "", "sleep"),
		hook("after", cairnv1.HookErrorModeContinue, time.Hour, "", "true"),
	})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %s", took)
	}
	if rep.Attempted != 1 || rep.Failed != 1 || len(exec.snapshot()) != 1 {
		t.Fatalf("report %+v, calls %v", rep, exec.snapshot())
	}
	if !strings.Contains(rep.Outcomes[0].Err.Error(), "abandoned: the backup was stopped (backup cancel requested)") {
		t.Fatalf("error %v", rep.Outcomes[0].Err)
	}
}

func TestOutputTailIsBounded(t *testing.T) {
	exec := &fakeExecutor{}
	r := newRunner(exec, runningPod("app"))
	r.OutputTail = 16
	rep := r.RunAll(context.Background(), aBackup, "ns", "p", []Hook{hook("loud", cairnv1.HookErrorModeFail, time.Second, "", "print", "100000")})
	o := rep.Outcomes[0]
	if o.Stdout != "…"+"4567890123456789" {
		t.Fatalf("stdout %q", o.Stdout)
	}
	r.OutputTail = 0
	rep = r.RunAll(context.Background(), aBackup, "ns", "p", []Hook{hook("loud", cairnv1.HookErrorModeFail, time.Second, "", "print", "100000")})
	if n := len(rep.Outcomes[0].Stdout); n != DefaultOutputTail+len("…") {
		t.Fatalf("stdout of %d bytes", n)
	}
}

func TestTailKeepsTheLastBytes(t *testing.T) {
	tests := []struct {
		writes []string
		want   string
	}{
		{[]string{"ab", "cd"}, "abcd"},
		{[]string{"abcd"}, "abcd"},
		{[]string{"abcde"}, "…bcde"},
		{[]string{"ab", "cdef"}, "…cdef"},
		{[]string{"abc", "de", "f"}, "…cdef"},
	}
	for _, tt := range tests {
		tl := &tail{limit: 4}
		for _, w := range tt.writes {
			_, _ = tl.Write([]byte(w))
		}
		if tl.String() != tt.want {
			t.Errorf("%q: %q, want %q", tt.writes, tl.String(), tt.want)
		}
	}
}

func TestDeniedOrDisabledFailsEveryHookWithoutAnExec(t *testing.T) {
	exec := &fakeExecutor{}
	r := newRunner(exec, runningPod("app"))
	r.Access = func(_ context.Context, _ client.Object, namespace string) (string, error) {
		return fmt.Sprintf("Forbidden: alice may not create pods/exec in namespace %s", namespace), nil
	}
	rep := r.RunAll(context.Background(), aBackup, "ns", "p", []Hook{
		hook("a", cairnv1.HookErrorModeContinue, time.Second, "", "true"),
		hook("b", cairnv1.HookErrorModeFail, time.Second, "", "true"),
	})
	if len(exec.snapshot()) != 0 || rep.Attempted != 2 || rep.Failed != 2 || !strings.Contains(rep.Failure, "hook b failed in pod ns/p: Forbidden: alice may not create pods/exec in namespace ns") {
		t.Fatalf("report %+v", rep)
	}
	r.Access, r.Disabled = nil, "hooks are disabled"
	rep = r.RunAll(context.Background(), aBackup, "ns", "p", []Hook{hook("a", cairnv1.HookErrorModeFail, time.Second, "", "true")})
	if len(exec.snapshot()) != 0 || !strings.Contains(rep.Failure, "hooks are disabled") {
		t.Fatalf("report %+v", rep)
	}
}
