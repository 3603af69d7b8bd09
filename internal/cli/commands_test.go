package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// run runs the cairn command line args in e and returns the exit code.
func run(e *env, args ...string) int {
	return execute(newRootCommand("cairn", e), args, e.streams)
}

// withStatusesAfterCreate makes e's fake API server play the manager: once the CLI watches
// the Backup or Restore it created, its status goes through phases (in a goroutine). (The
// fake client's watch does not replay changes since a resource version, as the API server
// does: changes are made only once the watch runs.)
func withStatusesAfterCreate(t *testing.T, e *env, phases ...string) {
	t.Helper()
	base := fake.NewClientBuilder().WithScheme(Scheme()).WithStatusSubresource(&cairnv1.Backup{}, &cairnv1.Restore{})
	done := make(chan struct{})
	var created client.Object
	started := false
	t.Cleanup(func() {
		if started {
			<-done
		}
	})
	c := base.WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			created = obj
			return c.Create(ctx, obj, opts...)
		},
		Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			w, err := c.Watch(ctx, list, opts...)
			if err != nil || started {
				return w, err
			}
			started = true
			obj := created
			go func() {
				defer close(done)
				for i, phase := range phases {
					switch o := obj.DeepCopyObject().(type) {
					case *cairnv1.Backup:
						_ = c.Get(ctx, client.ObjectKeyFromObject(o), o)
						o.Status.Phase = cairnv1.BackupPhase(phase)
						o.Status.Progress = cairnv1.NewBackupProgress(int64(i), int64(len(phases)-1))
						if phase == string(cairnv1.BackupPhaseWaitingForPluginOperations) {
							// The items are written; the volumes are being copied.
							o.Status.Progress = cairnv1.NewBackupProgress(int64(len(phases)-1), int64(len(phases)-1)).WithVolumeBytes(100<<20, 200<<20)
						}
						if phase == "Failed" {
							o.Status.FailureReason = "the storage location is unavailable"
						}
						_ = c.Status().Update(ctx, o)
					case *cairnv1.Restore:
						_ = c.Get(ctx, client.ObjectKeyFromObject(o), o)
						o.Status.Phase = cairnv1.RestorePhase(phase)
						_ = c.Status().Update(ctx, o)
					}
				}
			}()
			return w, nil
		},
	}).Build()
	e.newClient = func() (client.WithWatch, error) { return c, nil }
}

func TestCreateWaitExitCodes(t *testing.T) {
	tests := []struct {
		final string
		want  int
	}{
		{"Completed", ExitOK},
		{"PartiallyFailed", ExitPartiallyFailed},
		{"Failed", ExitFailed},
		{"FailedValidation", ExitFailed},
	}
	for _, tt := range tests {
		t.Run("backup "+tt.final, func(t *testing.T) {
			e, out, errOut := testEnv(t)
			withStatusesAfterCreate(t, e, "Queued", "InProgress", tt.final)
			if got := run(e, "backup", "create", "b1", "--wait"); got != tt.want {
				t.Fatalf("exit code = %d, want %d; stdout:\n%s\nstderr:\n%s", got, tt.want, out, errOut)
			}
			if !strings.Contains(out.String(), tt.final+"\n") && !strings.Contains(out.String(), tt.final+":") {
				t.Errorf("the final phase is not shown:\n%s", out)
			}
			if tt.final == "Failed" && !strings.Contains(errOut.String(), "backup b1 ended Failed: the storage location is unavailable") {
				t.Errorf("the reason is not printed:\n%s", errOut)
			}
		})
		t.Run("restore "+tt.final, func(t *testing.T) {
			e, out, errOut := testEnv(t)
			withStatusesAfterCreate(t, e, "InProgress", tt.final)
			if got := run(e, "restore", "create", "r1", "--from-backup", "b1", "--wait"); got != tt.want {
				t.Fatalf("exit code = %d, want %d; stdout:\n%s\nstderr:\n%s", got, tt.want, out, errOut)
			}
		})
	}
}

func TestWaitDetachesOnInterrupt(t *testing.T) {
	e, _, errOut := testEnv(t)
	withStatusesAfterCreate(t, e, "Queued")
	e.interrupt = func(ctx context.Context) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(ctx)
		cancel() // Ctrl-C at once
		return ctx, cancel
	}
	if got := run(e, "backup", "create", "b1", "--wait"); got != ExitDetached {
		t.Fatalf("exit code = %d, want %d; stderr:\n%s", got, ExitDetached, errOut)
	}
	if !strings.Contains(errOut.String(), "cancel it with `cairn backup cancel b1 -n team-a`") {
		t.Errorf("stderr does not say how to cancel:\n%s", errOut)
	}
}

func TestUsageExitCodes(t *testing.T) {
	for _, args := range [][]string{
		{"backup", "create"},
		{"backup", "create", "b1", "--bogus"},
		{"backup", "get", "-o", "xml"},
		{"backup", "create", "b1", "--ttl", "soon"},
		{"backup", "create", "b1", "--from-schedule", "s", "--ttl", "1h"},
		{"backup", "create", "b1", "--from-schedule", "s", "--default-volumes-to-fs-backup"},
		{"backup", "create", "b1", "--default-volumes-to-fs-backup=sometimes"},
		{"restore", "create", "r1"},
		{"schedule", "create", "s1"},
		{"frobnicate"},
	} {
		e, _, errOut := testEnv(t)
		if got := run(e, args...); got != ExitUsage {
			t.Errorf("%v: exit code = %d, want %d (%s)", args, got, ExitUsage, errOut)
		}
	}
}

func TestCreateFromSchedule(t *testing.T) {
	s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "daily"},
		Spec: cairnv1.ScheduleSpec{Schedule: "@daily", Template: cairnv1.BackupSpec{IncludedResources: []string{"configmaps"}}}}
	e, _, errOut := testEnv(t, s)
	if got := run(e, "backup", "create", "now", "--from-schedule", "daily"); got != ExitOK {
		t.Fatalf("exit code = %d: %s", got, errOut)
	}
	c, _ := e.client()
	var b cairnv1.Backup
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "now"}, &b); err != nil {
		t.Fatal(err)
	}
	if b.Labels[cairnv1.ScheduleNameLabel] != "daily" || len(b.Spec.IncludedResources) != 1 {
		t.Errorf("backup = %+v %+v", b.Labels, b.Spec)
	}
}

func TestErrorsAPersonCanActOn(t *testing.T) {
	gr := schema.GroupResource{Group: "cairn.dev", Resource: "backups"}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "no kubeconfig", err: errNoConfig, want: "no cluster configuration: set KUBECONFIG, pass --kubeconfig, or run inside a cluster"},
		{name: "CRDs not installed", err: &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "cairn.dev", Kind: "Backup"}, SearchedVersions: []string{"v1alpha1"}},
			want: "is Cairn installed?"},
		{name: "RBAC", err: apierrors.NewForbidden(gr, "", errors.New(`User "bob" cannot list resource "backups" in API group "cairn.dev" in the namespace "team-b"`)),
			want: `permission denied: backups.cairn.dev is forbidden: User "bob" cannot list resource "backups" in API group "cairn.dev" in the namespace "team-b"`},
		{name: "no such backup", err: notFound(apierrors.NewNotFound(gr, "b9"), "backup", "b9", "team-a"), want: `backup "b9" not found in namespace team-a`},
	}
	for _, tt := range tests {
		if got := explain(tt.err); !strings.Contains(got, tt.want) {
			t.Errorf("%s: explain = %q, want it to contain %q", tt.name, got, tt.want)
		}
	}
}

func TestGetNotFoundAndForbidden(t *testing.T) {
	e, _, errOut := testEnv(t)
	if got := run(e, "backup", "describe", "nope"); got != ExitError || !strings.Contains(errOut.String(), `backup "nope" not found in namespace team-a`) {
		t.Errorf("describe of a missing backup: exit %d, stderr %q", got, errOut)
	}
	e, _, errOut = testEnv(t)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "cairn.dev", Resource: "backups"}, "", errors.New(`User "bob" cannot list resource "backups"`))
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithRESTMapper(restMapper(t)).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return forbidden
		},
	}).Build()
	e.newClient = func() (client.WithWatch, error) { return c, nil }
	if got := run(e, "backup", "get"); got != ExitError || !strings.Contains(errOut.String(), `permission denied: backups.cairn.dev is forbidden: User "bob" cannot list resource "backups"`) {
		t.Errorf("a forbidden list: exit %d, stderr %q", got, errOut)
	}
}

func TestPhaseExitCode(t *testing.T) {
	for phase, want := range map[string]int{"Completed": ExitOK, "PartiallyFailed": ExitPartiallyFailed, "Failed": ExitFailed, "FailedValidation": ExitFailed} {
		if got := phaseExitCode(phase); got != want {
			t.Errorf("phaseExitCode(%s) = %d, want %d", phase, got, want)
		}
	}
}

func TestSaveVerified(t *testing.T) {
	dir := t.TempDir()
	const sum = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" // sha256("hello")
	path := filepath.Join(dir, "b1.tar.gz")
	if _, err := saveVerified(context.Background(), strings.NewReader("hello"), path, sum); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); string(data) != "hello" {
		t.Errorf("saved %q", data)
	}
	bad := filepath.Join(dir, "b2.tar.gz")
	if _, err := saveVerified(context.Background(), strings.NewReader("hellO"), bad, sum); err == nil || !strings.Contains(err.Error(), "archive checksum mismatch") {
		t.Fatalf("err = %v, want a checksum mismatch", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("a mismatching download left files behind: %v", entries)
	}
}

func TestOutputFormats(t *testing.T) {
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "b1"}}
	for format, want := range map[string]string{"json": `"kind": "BackupList"`, "yaml": "kind: BackupList", "table": "NAME"} {
		e, out, errOut := testEnv(t, b)
		if got := run(e, "backup", "get", "-o", format); got != ExitOK || !strings.Contains(out.String(), want) {
			t.Errorf("-o %s: exit %d, output %q, stderr %q", format, got, out, errOut)
		}
	}
	e, out, _ := testEnv(t, b)
	if got := run(e, "backup", "describe", "b1", "-o", "yaml"); got != ExitOK || !strings.Contains(out.String(), "kind: Backup\n") {
		t.Errorf("describe -o yaml: exit %d, output %q", got, out)
	}
}

func TestSetDefaultLocation(t *testing.T) {
	loc := func(name string, isDefault bool) *cairnv1.BackupStorageLocation {
		return &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultOperatorNamespace, Name: name},
			Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: isDefault}}
	}
	e, out, errOut := testEnv(t, loc("a", true), loc("b", false), loc("c", true))
	e.flags.Namespace = nil // locations live in --cairn-namespace
	if got := run(e, "location", "set-default", "b"); got != ExitOK {
		t.Fatalf("exit code = %d: %s", got, errOut)
	}
	c, _ := e.client()
	for name, want := range map[string]bool{"a": false, "b": true, "c": false} {
		var l cairnv1.BackupStorageLocation
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: DefaultOperatorNamespace, Name: name}, &l); err != nil {
			t.Fatal(err)
		}
		if l.Spec.Default != want {
			t.Errorf("location %s: default = %t, want %t", name, l.Spec.Default, want)
		}
	}
	if !strings.Contains(out.String(), "Storage location b is the default.") {
		t.Errorf("output: %s", out)
	}
}

func TestNameCompletion(t *testing.T) {
	e, out, errOut := testEnv(t,
		&cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "nightly-1"}},
		&cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "nightly-2"}},
		&cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "weekly"}},
		&cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "nightly-3"}})
	if got := run(e, "__complete", "backup", "describe", "night"); got != ExitOK {
		t.Fatalf("exit code = %d: %s", got, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if strings.Join(lines[:len(lines)-1], ",") != "nightly-1,nightly-2" {
		t.Errorf("completions = %q, want nightly-1 and nightly-2 of namespace team-a", out)
	}
}

func TestKubectlPluginName(t *testing.T) {
	e, _, _ := testEnv(t)
	if got := newRootCommand("/usr/local/bin/kubectl-cairn", e).DisplayName(); got != "kubectl cairn" {
		t.Errorf("DisplayName = %q, want kubectl cairn", got)
	}
	if got := newRootCommand("cairn", e).DisplayName(); got != "cairn" {
		t.Errorf("DisplayName = %q, want cairn", got)
	}
}

func TestScheduleCreateLabels(t *testing.T) {
	tests := []struct {
		name             string
		args             []string
		wantLabels       map[string]string
		wantBackupLabels *cairnv1.BackupMetadata
		wantErr          string
	}{
		{name: "neither", args: nil},
		{name: "--labels only", args: []string{"--labels", "team=a"}, wantLabels: map[string]string{"team": "a"}},
		{name: "--backup-labels only", args: []string{"--backup-labels", "app=web"},
			wantBackupLabels: &cairnv1.BackupMetadata{Labels: map[string]string{"app": "web"}}},
		{name: "both, each on its own object", args: []string{"--labels", "team=a", "--backup-labels", "app=web,tier=db"},
			wantLabels: map[string]string{"team": "a"}, wantBackupLabels: &cairnv1.BackupMetadata{Labels: map[string]string{"app": "web", "tier": "db"}}},
		{name: "a cairn.dev key is refused before the API", args: []string{"--labels", "team=a", "--backup-labels", "cairn.dev/schedule-name=x"},
			wantErr: "Error: invalid --backup-labels: spec.template.metadata.labels[cairn.dev/schedule-name]: keys in the cairn.dev domain are Cairn's own"},
		{name: "a bad value is refused before the API", args: []string{"--backup-labels", "app=a b"},
			wantErr: `Error: invalid --backup-labels: spec.template.metadata.labels[app]: "a b" is not a label value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := createSchedule(t, "@daily", tt.args, tt.wantErr)
			if s == nil {
				return
			}
			if !reflect.DeepEqual(s.Labels, tt.wantLabels) {
				t.Errorf("schedule labels = %v, want %v", s.Labels, tt.wantLabels)
			}
			if !reflect.DeepEqual(s.Spec.Template.Metadata, tt.wantBackupLabels) {
				t.Errorf("spec.template.metadata = %+v, want %+v", s.Spec.Template.Metadata, tt.wantBackupLabels)
			}
		})
	}
}

func TestDescribeScheduleTemplateLabels(t *testing.T) {
	s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "s1", Labels: map[string]string{"team": "a"}},
		Spec: cairnv1.ScheduleSpec{Schedule: "@daily", Template: cairnv1.BackupSpec{
			Metadata: &cairnv1.BackupMetadata{Labels: map[string]string{"tier": "db", "app": "web"}}}}}
	e, out, errOut := testEnv(t, s)
	if got := run(e, "schedule", "describe", "s1"); got != ExitOK {
		t.Fatalf("exit %d: %s", got, errOut)
	}
	_, template, ok := strings.Cut(out.String(), "Backup template:\n")
	if !ok || !regexp.MustCompile(`(?m)^  Labels:\s+app=web,tier=db$`).MatchString(template) {
		t.Errorf("describe does not show the template's labels under the template:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^Labels:\s+team=a$`).MatchString(out.String()) {
		t.Errorf("describe does not show the schedule's own labels:\n%s", out)
	}
}

func TestCreateFromScheduleTemplateLabels(t *testing.T) {
	s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "daily", Labels: map[string]string{"owner": "gitops"}},
		Spec: cairnv1.ScheduleSpec{Schedule: "@daily", Template: cairnv1.BackupSpec{
			Metadata: &cairnv1.BackupMetadata{Labels: map[string]string{"tier": "gold", "app": "web"}}}}}
	e, _, errOut := testEnv(t, s)
	if got := run(e, "backup", "create", "now", "--from-schedule", "daily", "--labels", "app=shop,by=hand"); got != ExitOK {
		t.Fatalf("exit code = %d: %s", got, errOut)
	}
	c, _ := e.client()
	var b cairnv1.Backup
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "now"}, &b); err != nil {
		t.Fatal(err)
	}
	// The template's labels as on a run of the schedule, --labels beside (and over) them, never the
	// schedule's own.
	want := map[string]string{"tier": "gold", "app": "shop", "by": "hand", cairnv1.ScheduleNameLabel: "daily"}
	if !reflect.DeepEqual(b.Labels, want) {
		t.Errorf("labels = %v, want %v", b.Labels, want)
	}
}

// TestGetOneNameIsTheObject checks `get -o json|yaml` of every kind as kubectl prints it: one
// NAME is the object itself (so that `| jq .status.phase` works), several names or none are
// the kind's list, even of one or no objects.
func TestGetOneNameIsTheObject(t *testing.T) {
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "team-a", Name: name} }
	kinds := []struct {
		command, kind string
		objects       []client.Object
	}{
		{command: "backup", kind: "Backup", objects: []client.Object{
			&cairnv1.Backup{ObjectMeta: meta("one"), Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted}},
			&cairnv1.Backup{ObjectMeta: meta("two")}}},
		{command: "restore", kind: "Restore", objects: []client.Object{
			&cairnv1.Restore{ObjectMeta: meta("one"), Status: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseCompleted}},
			&cairnv1.Restore{ObjectMeta: meta("two")}}},
		{command: "schedule", kind: "Schedule", objects: []client.Object{
			&cairnv1.Schedule{ObjectMeta: meta("one"), Status: cairnv1.ScheduleStatus{Phase: cairnv1.SchedulePhaseEnabled}},
			&cairnv1.Schedule{ObjectMeta: meta("two")}}},
		{command: "location", kind: "BackupStorageLocation", objects: []client.Object{
			&cairnv1.BackupStorageLocation{ObjectMeta: meta("one"), Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}},
			&cairnv1.BackupStorageLocation{ObjectMeta: meta("two")}}},
	}
	type printed struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Status struct {
			Phase string `json:"phase"`
		} `json:"status"`
		Items []struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	for _, k := range kinds {
		for _, format := range []string{"json", "yaml"} {
			tests := []struct {
				name      string
				objects   []client.Object
				args      []string
				wantKind  string
				wantItems []string // the list's items by name; nil for an object
			}{
				{name: "one name", objects: k.objects, args: []string{"one"}, wantKind: k.kind},
				{name: "two names", objects: k.objects, args: []string{"two", "one"}, wantKind: k.kind + "List", wantItems: []string{"two", "one"}},
				{name: "the same name twice", objects: k.objects, args: []string{"one", "one"}, wantKind: k.kind + "List", wantItems: []string{"one", "one"}},
				{name: "all of one", objects: k.objects[:1], wantKind: k.kind + "List", wantItems: []string{"one"}},
				{name: "all of none", wantKind: k.kind + "List", wantItems: []string{}},
			}
			for _, tt := range tests {
				t.Run(k.command+"/"+format+"/"+tt.name, func(t *testing.T) {
					e, out, errOut := testEnv(t, tt.objects...)
					args := append([]string{k.command, "get", "-n", "team-a", "-o", format}, tt.args...)
					if code := run(e, args...); code != ExitOK {
						t.Fatalf("exit %d: %s", code, errOut)
					}
					var got printed
					if err := yaml.Unmarshal(out.Bytes(), &got); err != nil {
						t.Fatalf("output is not %s: %v\n%s", format, err, out)
					}
					if format == "json" && !json.Valid(out.Bytes()) {
						t.Fatalf("output is not JSON:\n%s", out)
					}
					if got.Kind != tt.wantKind || got.APIVersion != cairnv1.GroupVersion.String() {
						t.Fatalf("printed %s %s, want %s %s:\n%s", got.APIVersion, got.Kind, cairnv1.GroupVersion, tt.wantKind, out)
					}
					if tt.wantItems == nil {
						if got.Metadata.Name != "one" || got.Status.Phase == "" || got.Items != nil {
							t.Errorf("not the object one with its status:\n%s", out)
						}
						return
					}
					names := []string{}
					for _, it := range got.Items {
						if it.Kind != k.kind {
							t.Errorf("item of kind %q", it.Kind)
						}
						names = append(names, it.Metadata.Name)
					}
					if !reflect.DeepEqual(names, tt.wantItems) {
						t.Errorf("items %v, want %v", names, tt.wantItems)
					}
				})
			}
		}
	}
}

func TestDescribeScheduleRetentionDryRun(t *testing.T) {
	s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "d"},
		Spec:   cairnv1.ScheduleSpec{Schedule: "CRON_TZ=Europe/Paris 30 0 * * *", Retention: &cairnv1.RetentionPolicy{KeepLast: 1, Daily: 2}},
		Status: cairnv1.ScheduleStatus{Retention: &cairnv1.RetentionStatus{Total: 2, Kept: cairnv1.RetentionCounts{KeepLast: 1, Daily: 2, NewestCompleted: 1}}}}
	objs := []client.Object{s}
	backup := func(name, start string, phase cairnv1.BackupPhase) *cairnv1.Backup {
		t0, err := time.Parse(time.RFC3339, start)
		if err != nil {
			t.Fatal(err)
		}
		at := metav1.NewTime(t0)
		return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: map[string]string{cairnv1.ScheduleNameLabel: "d"}},
			Status: cairnv1.BackupStatus{Phase: phase, StartTimestamp: &at}}
	}
	// In Paris, 23:30Z is half past midnight the next day: the 2nd and 3rd of January.
	objs = append(objs,
		backup("d-20260101233000", "2026-01-01T23:30:00Z", cairnv1.BackupPhaseCompleted),
		backup("d-20260102001000", "2026-01-02T00:10:00Z", cairnv1.BackupPhaseCompleted),
		backup("d-20260102021000", "2026-01-02T02:10:00Z", cairnv1.BackupPhaseFailed),
		backup("d-20260102233000", "2026-01-02T23:30:00Z", cairnv1.BackupPhaseCompleted),
		backup("d-manual", "2026-01-03T23:30:00Z", cairnv1.BackupPhaseCompleted))
	e, out, errOut := testEnv(t, objs...)
	if got := run(e, "schedule", "describe", "d"); got != ExitOK {
		t.Fatalf("exit %d: %s", got, errOut)
	}
	for _, want := range []string{
		`(?m)^Retention:\s+keepLast 1, daily 2 \(periods in Europe/Paris; backups never expire by ttl\)$`,
		`(?m)^  Kept:\s+2 \(keepLast=1, daily=2, newestCompleted=1\)$`,
		`(?m)^    d-20260102233000:\s+Completed\s+2026-01-02T23:30:00Z\s+kept by keepLast, daily, newestCompleted$`,
		`(?m)^    d-20260102021000:\s+Failed\s+2026-01-02T02:10:00Z\s+will be deleted$`,
		`(?m)^    d-20260102001000:\s+Completed\s+2026-01-02T00:10:00Z\s+kept by daily$`,
		`(?m)^    d-20260101233000:\s+Completed\s+2026-01-01T23:30:00Z\s+will be deleted$`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("describe does not match %s:\n%s", want, out)
		}
	}
	if strings.Contains(out.String(), "d-manual") {
		t.Errorf("describe judges a backup the schedule did not make:\n%s", out)
	}
}

func TestScheduleCreateRetention(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    *cairnv1.RetentionPolicy
		wantErr string
	}{
		{name: "none", args: nil},
		{name: "every rule", args: []string{"--keep-last", "3", "--keep-hourly", "24", "--keep-daily", "7", "--keep-weekly", "4", "--keep-monthly", "12", "--keep-yearly", "2"},
			want: &cairnv1.RetentionPolicy{KeepLast: 3, Hourly: 24, Daily: 7, Weekly: 4, Monthly: 12, Yearly: 2}},
		{name: "zeros are none", args: []string{"--keep-daily", "0"}},
		{name: "with --ttl", args: []string{"--keep-daily", "7", "--ttl", "24h"}, wantErr: "--ttl cannot be used with --keep-*"},
		{name: "negative", args: []string{"--keep-weekly", "-1"}, wantErr: "--keep-weekly -1: a count from 0 to 10000"},
		{name: "too many", args: []string{"--keep-hourly", "10001"}, wantErr: "--keep-hourly 10001: a count from 0 to 10000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := createSchedule(t, "@hourly", tt.args, tt.wantErr)
			if s == nil {
				return
			}
			if !reflect.DeepEqual(s.Spec.Retention, tt.want) {
				t.Errorf("spec.retention = %+v, want %+v", s.Spec.Retention, tt.want)
			}
		})
	}
}

// createSchedule runs `schedule create s1 --schedule cron args...` in a fresh environment. With
// wantErr it checks that the command was refused with it (exit code 2) before anything was
// created, and returns nil; else it returns the Schedule created.
func createSchedule(t *testing.T, cron string, args []string, wantErr string) *cairnv1.Schedule {
	t.Helper()
	e, _, errOut := testEnv(t)
	code := run(e, append([]string{"schedule", "create", "s1", "--schedule", cron}, args...)...)
	c, _ := e.client()
	var s cairnv1.Schedule
	err := c.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "s1"}, &s)
	if wantErr != "" {
		if code != ExitUsage || !strings.Contains(errOut.String(), wantErr) {
			t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, ExitUsage, wantErr)
		}
		if !apierrors.IsNotFound(err) {
			t.Errorf("the schedule was created (get: %v)", err)
		}
		return nil
	}
	if code != ExitOK || err != nil {
		t.Fatalf("exit %d, stderr %q, get: %v", code, errOut, err)
	}
	return &s
}
