package hooks

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

const defaultTimeout = 30 * time.Second

func TestFromAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		phase       Phase
		want        *Hook
		wantErr     string
	}{
		{name: "none", annotations: map[string]string{"other": "x"}, phase: Pre},
		{name: "a container without a command is no hook", annotations: map[string]string{"pre.hook.backup.cairn.dev/container": "db"}, phase: Pre},
		{
			name:        "Cairn's, a JSON array, every key",
			annotations: map[string]string{"pre.hook.backup.cairn.dev/container": "db", "pre.hook.backup.cairn.dev/command": `["/bin/sh","-c","sync"]`, "pre.hook.backup.cairn.dev/on-error": "Continue", "pre.hook.backup.cairn.dev/timeout": "2m"},
			phase:       Pre,
			want:        &Hook{Name: "annotation pre.hook.backup.cairn.dev", Phase: Pre, Container: "db", Command: []string{"/bin/sh", "-c", "sync"}, OnError: cairnv1.HookErrorModeContinue, Timeout: 2 * time.Minute},
		},
		{
			name:        "a single command, defaults",
			annotations: map[string]string{"post.hook.backup.cairn.dev/command": "/thaw"},
			phase:       Post,
			want:        &Hook{Name: "annotation post.hook.backup.cairn.dev", Phase: Post, Command: []string{"/thaw"}, OnError: cairnv1.HookErrorModeFail, Timeout: defaultTimeout},
		},
		{
			name:        "Velero's",
			annotations: map[string]string{"post.hook.backup.velero.io/command": `["fsfreeze","--unfreeze","/data"]`, "post.hook.backup.velero.io/on-error": "fail"},
			phase:       Post,
			want:        &Hook{Name: "annotation post.hook.backup.velero.io", Phase: Post, Command: []string{"fsfreeze", "--unfreeze", "/data"}, OnError: cairnv1.HookErrorModeFail, Timeout: defaultTimeout},
		},
		{
			name:        "Velero's legacy pre keys",
			annotations: map[string]string{"hook.backup.velero.io/command": "/freeze", "hook.backup.velero.io/container": "app"},
			phase:       Pre,
			want:        &Hook{Name: "annotation hook.backup.velero.io", Phase: Pre, Container: "app", Command: []string{"/freeze"}, OnError: cairnv1.HookErrorModeFail, Timeout: defaultTimeout},
		},
		{name: "legacy keys are never post hooks", annotations: map[string]string{"hook.backup.velero.io/command": "/freeze"}, phase: Post},
		{
			name: "Cairn's win over Velero's, never mixed key by key",
			annotations: map[string]string{
				"pre.hook.backup.cairn.dev/command": "/cairn", "pre.hook.backup.velero.io/command": "/velero",
				"pre.hook.backup.velero.io/container": "velero-side", "pre.hook.backup.velero.io/on-error": "Continue",
			},
			phase: Pre,
			want:  &Hook{Name: "annotation pre.hook.backup.cairn.dev", Phase: Pre, Command: []string{"/cairn"}, OnError: cairnv1.HookErrorModeFail, Timeout: defaultTimeout},
		},
		{name: "the other phase's annotations are not read", annotations: map[string]string{"post.hook.backup.cairn.dev/command": "/x"}, phase: Pre},
		{name: "bad JSON", annotations: map[string]string{"pre.hook.backup.cairn.dev/command": `["a",`}, phase: Pre, wantErr: "annotation pre.hook.backup.cairn.dev/command: \"[\\\"a\\\",\" is not a JSON array of strings"},
		{name: "a JSON array of numbers", annotations: map[string]string{"pre.hook.backup.velero.io/command": `[1,2]`}, phase: Pre, wantErr: "pre.hook.backup.velero.io/command"},
		{name: "an empty JSON array", annotations: map[string]string{"pre.hook.backup.cairn.dev/command": `[]`}, phase: Pre, wantErr: "names no command"},
		{name: "an empty command", annotations: map[string]string{"pre.hook.backup.cairn.dev/command": " "}, phase: Pre, wantErr: "the command is empty"},
		{name: "a bad duration", annotations: map[string]string{"pre.hook.backup.cairn.dev/command": "x", "pre.hook.backup.cairn.dev/timeout": "30"}, phase: Pre, wantErr: "annotation pre.hook.backup.cairn.dev/timeout: \"30\" is not a duration"},
		{name: "a negative duration", annotations: map[string]string{"post.hook.backup.velero.io/command": "x", "post.hook.backup.velero.io/timeout": "-5s"}, phase: Post, wantErr: "is not from 1s to 1h0m0s"},
		{name: "a day-long timeout", annotations: map[string]string{"pre.hook.backup.cairn.dev/command": "x", "pre.hook.backup.cairn.dev/timeout": "24h"}, phase: Pre, wantErr: "is not from 1s to 1h0m0s"},
		{name: "an unknown on-error", annotations: map[string]string{"pre.hook.backup.cairn.dev/command": "x", "pre.hook.backup.cairn.dev/on-error": "Ignore"}, phase: Pre, wantErr: "annotation pre.hook.backup.cairn.dev/on-error: \"Ignore\" is neither Continue nor Fail"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromAnnotations(tt.annotations, tt.phase, defaultTimeout)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equalHook(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func equalHook(a, b *Hook) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && a.Phase == b.Phase && a.Container == b.Container && strings.Join(a.Command, "\x00") == strings.Join(b.Command, "\x00") &&
		a.OnError == b.OnError && a.Timeout == b.Timeout
}

func execHook(command ...string) cairnv1.BackupResourceHook {
	return cairnv1.BackupResourceHook{Exec: &cairnv1.ExecHook{Command: command}}
}

func TestSelect(t *testing.T) {
	pod := func(ns string, labels, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: labels, Annotations: annotations}}
	}
	spec := &cairnv1.BackupHooks{Resources: []cairnv1.BackupResourceHookSpec{
		{Name: "all", Pre: []cairnv1.BackupResourceHook{execHook("a1"), execHook("a2")}, Post: []cairnv1.BackupResourceHook{execHook("a-post")}},
		{Name: "db", IncludedNamespaces: []string{"team-*"}, ExcludedNamespaces: []string{"team-x"}, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Pre: []cairnv1.BackupResourceHook{{Exec: &cairnv1.ExecHook{Container: "db", Command: []string{"freeze"}, OnError: cairnv1.HookErrorModeContinue, Timeout: &metav1.Duration{Duration: time.Minute}}}}},
		{Name: "not-pods", IncludedResources: []string{"deployments"}, Pre: []cairnv1.BackupResourceHook{execHook("never")}},
		{Name: "pods-excluded", ExcludedResources: []string{"Pods"}, Pre: []cairnv1.BackupResourceHook{execHook("never")}},
		{Name: "po", IncludedResources: []string{"po", "configmaps"}, Pre: []cairnv1.BackupResourceHook{execHook("po")}},
	}}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		spec    *cairnv1.BackupHooks
		phase   Phase
		want    []string // hook names
		wantErr string
	}{
		{name: "no spec, no annotations", pod: pod("a", nil, nil), phase: Pre},
		{name: "specs in order, hooks in order", pod: pod("team-a", map[string]string{"app": "db"}, nil), spec: spec, phase: Pre,
			want: []string{"spec all pre[0]", "spec all pre[1]", "spec db pre[0]", "spec po pre[0]"}},
		{name: "labels not matched", pod: pod("team-a", map[string]string{"app": "web"}, nil), spec: spec, phase: Pre,
			want: []string{"spec all pre[0]", "spec all pre[1]", "spec po pre[0]"}},
		{name: "namespace excluded", pod: pod("team-x", map[string]string{"app": "db"}, nil), spec: spec, phase: Pre,
			want: []string{"spec all pre[0]", "spec all pre[1]", "spec po pre[0]"}},
		{name: "namespace not included", pod: pod("other", map[string]string{"app": "db"}, nil), spec: spec, phase: Pre,
			want: []string{"spec all pre[0]", "spec all pre[1]", "spec po pre[0]"}},
		{name: "post", pod: pod("a", nil, nil), spec: spec, phase: Post, want: []string{"spec all post[0]"}},
		{name: "an annotation hook takes the place of the spec's for its phase (Velero's rule)", pod: pod("team-a", map[string]string{"app": "db"}, map[string]string{"pre.hook.backup.velero.io/command": "x"}), spec: spec, phase: Pre,
			want: []string{"annotation pre.hook.backup.velero.io"}},
		{name: "and only for its phase", pod: pod("a", nil, map[string]string{"pre.hook.backup.velero.io/command": "x"}), spec: spec, phase: Post,
			want: []string{"spec all post[0]"}},
		{name: "an unreadable annotation hook runs nothing in the spec's place", pod: pod("a", nil, map[string]string{"pre.hook.backup.cairn.dev/command": "["}), spec: spec, phase: Pre,
			wantErr: "annotation pre.hook.backup.cairn.dev/command"},
		{name: "a bad selector is an error, the other specs still apply", pod: pod("a", nil, nil), phase: Pre,
			spec: &cairnv1.BackupHooks{Resources: []cairnv1.BackupResourceHookSpec{
				{Name: "bad", LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}, Pre: []cairnv1.BackupResourceHook{execHook("x")}},
				{Name: "good", Pre: []cairnv1.BackupResourceHook{execHook("y")}},
			}},
			want: []string{"spec good pre[0]"}, wantErr: "hook spec bad: label selector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hooks, errs := Select(tt.pod, tt.spec, tt.phase, defaultTimeout)
			var names []string
			for _, h := range hooks {
				names = append(names, h.Name)
			}
			if strings.Join(names, ",") != strings.Join(tt.want, ",") {
				t.Errorf("hooks %q, want %q", names, tt.want)
			}
			switch {
			case tt.wantErr == "" && len(errs) > 0:
				t.Errorf("errors %v", errs)
			case tt.wantErr != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.wantErr)):
				t.Errorf("errors %v, want one containing %q", errs, tt.wantErr)
			}
		})
	}
}

func TestSelectFillsDefaults(t *testing.T) {
	spec := &cairnv1.BackupHooks{Resources: []cairnv1.BackupResourceHookSpec{{Name: "s", Pre: []cairnv1.BackupResourceHook{
		execHook("plain"),
		{Exec: &cairnv1.ExecHook{Container: "c", Command: []string{"set"}, OnError: cairnv1.HookErrorModeContinue, Timeout: &metav1.Duration{Duration: 5 * time.Second}}},
	}}}}
	hooks, _ := Select(&corev1.Pod{}, spec, Pre, 7*time.Second)
	if len(hooks) != 2 {
		t.Fatalf("%d hooks", len(hooks))
	}
	if h := hooks[0]; h.OnError != cairnv1.HookErrorModeFail || h.Timeout != 7*time.Second || h.Container != "" {
		t.Errorf("defaults: %+v", h)
	}
	if h := hooks[1]; h.OnError != cairnv1.HookErrorModeContinue || h.Timeout != 5*time.Second || h.Container != "c" {
		t.Errorf("set: %+v", h)
	}
}
