package hooks

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestRestoreExecFromAnnotations(t *testing.T) {
	const execDefault = cairnv1.DefaultRestoreExecTimeout
	tests := []struct {
		name        string
		annotations map[string]string
		want        *RestoreExec
		wantErr     string
	}{
		{name: "none", annotations: map[string]string{"post.hook.backup.cairn.dev/command": "/x"}},
		{name: "a container without a command is no hook", annotations: map[string]string{"post.hook.restore.cairn.dev/container": "db"}},
		{
			name: "Cairn's, every key",
			annotations: map[string]string{
				"post.hook.restore.cairn.dev/container": "db", "post.hook.restore.cairn.dev/command": `["/bin/sh","-c","reindex"]`,
				"post.hook.restore.cairn.dev/on-error": "Continue", "post.hook.restore.cairn.dev/exec-timeout": "2m",
				"post.hook.restore.cairn.dev/wait-timeout": "10m", "post.hook.restore.cairn.dev/wait-for-ready": "true",
			},
			want: &RestoreExec{Hook: Hook{Name: "annotation post.hook.restore.cairn.dev", Phase: Post, Container: "db", Command: []string{"/bin/sh", "-c", "reindex"},
				OnError: cairnv1.HookErrorModeContinue, Timeout: 2 * time.Minute}, WaitTimeout: 10 * time.Minute, WaitForReady: true},
		},
		{
			name:        "Velero's, defaults",
			annotations: map[string]string{"post.hook.restore.velero.io/command": "/reindex"},
			want:        &RestoreExec{Hook: Hook{Name: "annotation post.hook.restore.velero.io", Phase: Post, Command: []string{"/reindex"}, OnError: cairnv1.HookErrorModeFail, Timeout: execDefault}},
		},
		{
			name: "Cairn's win over Velero's, never mixed key by key",
			annotations: map[string]string{"post.hook.restore.cairn.dev/command": "/cairn", "post.hook.restore.velero.io/command": "/velero",
				"post.hook.restore.velero.io/wait-for-ready": "true", "post.hook.restore.velero.io/container": "v"},
			want: &RestoreExec{Hook: Hook{Name: "annotation post.hook.restore.cairn.dev", Phase: Post, Command: []string{"/cairn"}, OnError: cairnv1.HookErrorModeFail, Timeout: execDefault}},
		},
		{name: "bad JSON", annotations: map[string]string{"post.hook.restore.cairn.dev/command": `["a"`}, wantErr: "annotation post.hook.restore.cairn.dev/command: \"[\\\"a\\\"\" is not a JSON array of strings"},
		{name: "an unknown on-error", annotations: map[string]string{"post.hook.restore.velero.io/command": "x", "post.hook.restore.velero.io/on-error": "Retry"}, wantErr: "annotation post.hook.restore.velero.io/on-error: \"Retry\" is neither Continue nor Fail"},
		{name: "a bad exec timeout", annotations: map[string]string{"post.hook.restore.cairn.dev/command": "x", "post.hook.restore.cairn.dev/exec-timeout": "30"}, wantErr: "annotation post.hook.restore.cairn.dev/exec-timeout: \"30\" is not a duration"},
		{name: "a day-long exec timeout", annotations: map[string]string{"post.hook.restore.cairn.dev/command": "x", "post.hook.restore.cairn.dev/exec-timeout": "24h"}, wantErr: "is not from 1s to 1h0m0s"},
		{name: "a negative wait timeout", annotations: map[string]string{"post.hook.restore.cairn.dev/command": "x", "post.hook.restore.cairn.dev/wait-timeout": "-1m"}, wantErr: "annotation post.hook.restore.cairn.dev/wait-timeout: \"-1m\" is not from 1s to 87600h0m0s"},
		{name: "a bad wait-for-ready", annotations: map[string]string{"post.hook.restore.velero.io/command": "x", "post.hook.restore.velero.io/wait-for-ready": "yes please"}, wantErr: "annotation post.hook.restore.velero.io/wait-for-ready: \"yes please\" is neither true nor false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RestoreExecFromAnnotations(tt.annotations)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestRestoreInitFromAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        *corev1.Container
		wantErr     string
	}{
		{name: "none", annotations: map[string]string{"init.hook.restore.cairn.dev/container-name": "x"}},
		{
			name:        "Velero's, every key",
			annotations: map[string]string{"init.hook.restore.velero.io/container-image": "busybox:1", "init.hook.restore.velero.io/container-name": "migrate", "init.hook.restore.velero.io/command": `["/bin/sh","-c","ls /data"]`},
			want:        &corev1.Container{Name: "migrate", Image: "busybox:1", Command: []string{"/bin/sh", "-c", "ls /data"}},
		},
		{
			name:        "Cairn's, the image's entrypoint and the default name",
			annotations: map[string]string{"init.hook.restore.cairn.dev/container-image": " tool:2 "},
			want:        &corev1.Container{Name: DefaultInitHookContainer, Image: "tool:2"},
		},
		{
			name: "Cairn's win over Velero's",
			annotations: map[string]string{"init.hook.restore.cairn.dev/container-image": "cairn", "init.hook.restore.cairn.dev/command": "/c",
				"init.hook.restore.velero.io/container-image": "velero", "init.hook.restore.velero.io/container-name": "v"},
			want: &corev1.Container{Name: DefaultInitHookContainer, Image: "cairn", Command: []string{"/c"}},
		},
		{name: "a command without an image", annotations: map[string]string{"init.hook.restore.velero.io/command": "/x"}, wantErr: "annotation init.hook.restore.velero.io/container-image: an init hook needs an image"},
		{name: "bad JSON", annotations: map[string]string{"init.hook.restore.cairn.dev/container-image": "i", "init.hook.restore.cairn.dev/command": "[1]"}, wantErr: "annotation init.hook.restore.cairn.dev/command"},
		{name: "a name that is no container name", annotations: map[string]string{"init.hook.restore.cairn.dev/container-image": "i", "init.hook.restore.cairn.dev/container-name": "Migrate_1"}, wantErr: "annotation init.hook.restore.cairn.dev/container-name: \"Migrate_1\" is not a container name"},
		{name: "an empty name", annotations: map[string]string{"init.hook.restore.cairn.dev/container-image": "i", "init.hook.restore.cairn.dev/container-name": ""}, wantErr: "is not a container name: 1 to 63 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RestoreInitFromAnnotations(tt.annotations)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestSelectRestore(t *testing.T) {
	spec := &cairnv1.RestoreHooks{Resources: []cairnv1.RestoreResourceHookSpec{
		{Name: "db", IncludedNamespaces: []string{"shop-*"}, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			PostHooks: []cairnv1.RestoreResourceHook{
				{Init: &cairnv1.InitRestoreHook{InitContainers: []corev1.Container{{Name: "migrate", Image: "m"}, {Name: "check", Image: "c"}}}},
				{Exec: &cairnv1.RestoreExecHook{Container: "db", Command: []string{"/reindex"}, WaitTimeout: &metav1.Duration{Duration: time.Minute}, WaitForReady: ptr.To(true)}},
				{Exec: &cairnv1.RestoreExecHook{Command: []string{"/warm"}, OnError: cairnv1.HookErrorModeContinue, ExecTimeout: &metav1.Duration{Duration: 5 * time.Second}}},
			}},
		{Name: "all", PostHooks: []cairnv1.RestoreResourceHook{{Init: &cairnv1.InitRestoreHook{InitContainers: []corev1.Container{{Name: "seed", Image: "s"}}}}}},
		{Name: "not-pods", IncludedResources: []string{"deployments.apps"}, PostHooks: []cairnv1.RestoreResourceHook{{Exec: &cairnv1.RestoreExecHook{Command: []string{"/never"}}}}},
		{Name: "excluded", ExcludedNamespaces: []string{"shop-eu"}, PostHooks: []cairnv1.RestoreResourceHook{{Exec: &cairnv1.RestoreExecHook{Command: []string{"/not-in-eu"}}}}},
		{Name: "bad", LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}},
			PostHooks: []cairnv1.RestoreResourceHook{{Exec: &cairnv1.RestoreExecHook{Command: []string{"/bad"}}}}},
	}}
	pod := func(ns string, labels, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: labels, Annotations: annotations}}
	}
	names := func(cs []corev1.Container) (out []string) {
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	commands := func(hs []RestoreExec) (out []string) {
		for _, h := range hs {
			out = append(out, h.Name+":"+strings.Join(h.Command, " "))
		}
		return out
	}
	tests := []struct {
		name      string
		pod       *corev1.Pod
		spec      *cairnv1.RestoreHooks
		wantInit  []string
		wantExec  []string
		wantErrs  int
		checkExec func(t *testing.T, hs []RestoreExec)
	}{
		{name: "no spec, no annotations", pod: pod("shop-eu", nil, nil)},
		{
			name: "the selecting specs, in order; a bad selector is an error, the rest apply", pod: pod("shop-us", map[string]string{"app": "db"}, nil), spec: spec,
			wantInit: []string{"migrate", "check", "seed"},
			wantExec: []string{"spec db postHooks[1]:/reindex", "spec db postHooks[2]:/warm", "spec excluded postHooks[0]:/not-in-eu"},
			wantErrs: 2, // the bad selector, once for init and once for exec
			checkExec: func(t *testing.T, hs []RestoreExec) {
				if hs[0].Container != "db" || hs[0].WaitTimeout != time.Minute || !hs[0].WaitForReady || hs[0].OnError != cairnv1.HookErrorModeFail || hs[0].Timeout != cairnv1.DefaultRestoreExecTimeout {
					t.Errorf("first hook %+v", hs[0])
				}
				if hs[1].Container != "" || hs[1].WaitTimeout != 0 || hs[1].WaitForReady || hs[1].OnError != cairnv1.HookErrorModeContinue || hs[1].Timeout != 5*time.Second {
					t.Errorf("second hook %+v", hs[1])
				}
			},
		},
		{name: "another namespace, other labels", pod: pod("shop-eu", map[string]string{"app": "web"}, nil), spec: spec, wantInit: []string{"seed"}, wantErrs: 2},
		{
			name: "annotations take the place of the specs' hooks of their kind only",
			pod:  pod("shop-us", map[string]string{"app": "db"}, map[string]string{"post.hook.restore.velero.io/command": "/mine"}), spec: spec,
			wantInit: []string{"migrate", "check", "seed"}, wantExec: []string{"annotation post.hook.restore.velero.io:/mine"}, wantErrs: 1,
		},
		{
			name: "an unreadable annotation applies nothing in its place",
			pod:  pod("shop-us", map[string]string{"app": "db"}, map[string]string{"init.hook.restore.cairn.dev/command": "/x"}), spec: spec,
			wantExec: []string{"spec db postHooks[1]:/reindex", "spec db postHooks[2]:/warm", "spec excluded postHooks[0]:/not-in-eu"}, wantErrs: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			init, initErrs := SelectRestoreInit(tt.pod, tt.spec)
			exec, execErrs := SelectRestoreExec(tt.pod, tt.spec)
			if got := names(init); !reflect.DeepEqual(got, tt.wantInit) {
				t.Errorf("init %v, want %v", got, tt.wantInit)
			}
			if got := commands(exec); !reflect.DeepEqual(got, tt.wantExec) {
				t.Errorf("exec %v, want %v", got, tt.wantExec)
			}
			if n := len(initErrs) + len(execErrs); n != tt.wantErrs {
				t.Errorf("%d errors (%v %v), want %d", n, initErrs, execErrs, tt.wantErrs)
			}
			if tt.checkExec != nil {
				tt.checkExec(t, exec)
			}
		})
	}
}

func TestWithInitHooks(t *testing.T) {
	hooks := []corev1.Container{{Name: "migrate"}, {Name: "check"}}
	withInit := func(names ...string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
		for _, n := range names {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: n})
		}
		return p
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		hooks   []corev1.Container
		want    []string
		wantErr string
	}{
		{name: "after the helper, before the pod's own", pod: withInit("cairn-restore-wait", "own"), hooks: hooks, want: []string{"cairn-restore-wait", "migrate", "check", "own"}},
		{name: "no helper: first", pod: withInit("own"), hooks: hooks, want: []string{"migrate", "check", "own"}},
		{name: "no init containers", pod: withInit(), hooks: hooks, want: []string{"migrate", "check"}},
		{name: "the helper name elsewhere is not the helper", pod: withInit("own", "cairn-restore-wait"), hooks: hooks, want: []string{"migrate", "check", "own", "cairn-restore-wait"}},
		{name: "a name the pod has", pod: withInit("own"), hooks: []corev1.Container{{Name: "app"}}, wantErr: `init hook container "app": the pod already has a container of that name`},
		{name: "two hooks of one name", pod: withInit(), hooks: []corev1.Container{{Name: "x"}, {Name: "x"}}, wantErr: `init hook container "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WithInitHooks(tt.pod, "cairn-restore-wait", tt.hooks)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			var names []string
			for _, c := range got {
				names = append(names, c.Name)
			}
			if err != nil || !reflect.DeepEqual(names, tt.want) {
				t.Fatalf("got %v, %v; want %v", names, err, tt.want)
			}
		})
	}
}
