package cli

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func parse(t *testing.T, add func(*pflag.FlagSet), args []string) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	add(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %v: %v", args, err)
	}
}

func selector(s string) *metav1.LabelSelector {
	sel, err := metav1.ParseToLabelSelector(s)
	if err != nil {
		panic(err)
	}
	return sel
}

func TestBackupFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    cairnv1.BackupSpec
		wantErr string
	}{
		{name: "none", args: nil, want: cairnv1.BackupSpec{}},
		{name: "--include-namespaces", args: []string{"--include-namespaces", "a,b-*"}, want: cairnv1.BackupSpec{IncludedNamespaces: []string{"a", "b-*"}}},
		{name: "--exclude-namespaces", args: []string{"--exclude-namespaces=kube-*"}, want: cairnv1.BackupSpec{ExcludedNamespaces: []string{"kube-*"}}},
		{name: "--include-resources", args: []string{"--include-resources", "configmaps,deployments.apps"}, want: cairnv1.BackupSpec{IncludedResources: []string{"configmaps", "deployments.apps"}}},
		{name: "--exclude-resources", args: []string{"--exclude-resources", "secrets"}, want: cairnv1.BackupSpec{ExcludedResources: []string{"secrets"}}},
		{name: "--include-cluster-resources alone", args: []string{"--include-cluster-resources"}, want: cairnv1.BackupSpec{IncludeClusterResources: ptr.To(true)}},
		{name: "--include-cluster-resources=false", args: []string{"--include-cluster-resources=false"}, want: cairnv1.BackupSpec{IncludeClusterResources: ptr.To(false)}},
		{name: "--selector", args: []string{"--selector", "app=web,tier notin (cache)"}, want: cairnv1.BackupSpec{LabelSelector: selector("app=web,tier notin (cache)")}},
		{name: "-l", args: []string{"-l", "app in (a,b)"}, want: cairnv1.BackupSpec{LabelSelector: selector("app in (a,b)")}},
		{name: "--or-selector", args: []string{"--or-selector", "app=web or app=db"}, want: cairnv1.BackupSpec{OrLabelSelectors: []*metav1.LabelSelector{selector("app=web"), selector("app=db")}}},
		{name: "--storage-location", args: []string{"--storage-location", "s3"}, want: cairnv1.BackupSpec{StorageLocation: "s3"}},
		{name: "--ttl", args: []string{"--ttl", "72h"}, want: cairnv1.BackupSpec{TTL: &metav1.Duration{Duration: 72 * time.Hour}}},
		{name: "--ttl 0s keeps forever", args: []string{"--ttl", "0s"}, want: cairnv1.BackupSpec{TTL: &metav1.Duration{}}},
		{name: "--item-operation-timeout", args: []string{"--item-operation-timeout", "30m"}, want: cairnv1.BackupSpec{ItemOperationTimeout: &metav1.Duration{Duration: 30 * time.Minute}}},
		{name: "--snapshot-volumes=false", args: []string{"--snapshot-volumes=false"}, want: cairnv1.BackupSpec{SnapshotVolumes: ptr.To(false)}},
		{name: "--snapshot-volumes", args: []string{"--snapshot-volumes"}, want: cairnv1.BackupSpec{SnapshotVolumes: ptr.To(true)}},
		{name: "--default-volumes-to-fs-backup", args: []string{"--default-volumes-to-fs-backup"}, want: cairnv1.BackupSpec{DefaultVolumesToFsBackup: ptr.To(true)}},
		{name: "--default-volumes-to-fs-backup=false", args: []string{"--default-volumes-to-fs-backup=false"}, want: cairnv1.BackupSpec{DefaultVolumesToFsBackup: ptr.To(false)}},
		{name: "a bad selector", args: []string{"-l", "app in"}, wantErr: "invalid --selector"},
		{name: "an empty or-selector part", args: []string{"--or-selector", "app=a or "}, wantErr: "invalid --or-selector"},
		{name: "both selectors", args: []string{"-l", "a=b", "--or-selector", "c=d"}, wantErr: "cannot be used together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f backupFlags
			parse(t, f.add, tt.args)
			got, err := f.spec()
			checkSpec(t, got, tt.want, err, tt.wantErr)
		})
	}
}

func TestBadDurationFlags(t *testing.T) {
	for _, args := range [][]string{{"--ttl", "soon"}, {"--ttl", "-1h"}, {"--item-operation-timeout", "x"}, {"--snapshot-volumes=maybe"}, {"--default-volumes-to-fs-backup=all"}} {
		var f backupFlags
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		f.add(fs)
		if err := fs.Parse(args); err == nil {
			t.Errorf("%v was accepted", args)
		}
	}
}

func checkSpec[T any](t *testing.T, got, want T, err error, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error = %v, want one containing %q", err, wantErr)
		}
		if ExitCode(err) != ExitUsage {
			t.Errorf("exit code = %d, want %d (usage)", ExitCode(err), ExitUsage)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("spec = %+v\nwant   %+v", got, want)
	}
}

func TestRestoreFlags(t *testing.T) {
	from := func(s cairnv1.RestoreSpec) cairnv1.RestoreSpec { s.BackupName = "b1"; return s }
	tests := []struct {
		name    string
		args    []string
		want    cairnv1.RestoreSpec
		wantErr string
	}{
		{name: "--from-backup", args: []string{"--from-backup", "b1"}, want: from(cairnv1.RestoreSpec{})},
		{name: "--from-schedule", args: []string{"--from-schedule", "daily"}, want: cairnv1.RestoreSpec{ScheduleName: "daily"}},
		{name: "--include-namespaces", args: []string{"--from-backup", "b1", "--include-namespaces", "web"}, want: from(cairnv1.RestoreSpec{IncludedNamespaces: []string{"web"}})},
		{name: "--exclude-namespaces", args: []string{"--from-backup", "b1", "--exclude-namespaces", "db"}, want: from(cairnv1.RestoreSpec{ExcludedNamespaces: []string{"db"}})},
		{name: "--include-resources", args: []string{"--from-backup", "b1", "--include-resources", "configmaps"}, want: from(cairnv1.RestoreSpec{IncludedResources: []string{"configmaps"}})},
		{name: "--exclude-resources", args: []string{"--from-backup", "b1", "--exclude-resources", "secrets,pods"}, want: from(cairnv1.RestoreSpec{ExcludedResources: []string{"secrets", "pods"}})},
		{name: "--include-cluster-resources", args: []string{"--from-backup", "b1", "--include-cluster-resources=true"}, want: from(cairnv1.RestoreSpec{IncludeClusterResources: ptr.To(true)})},
		{name: "--selector", args: []string{"--from-backup", "b1", "-l", "app=web"}, want: from(cairnv1.RestoreSpec{LabelSelector: selector("app=web")})},
		{name: "--or-selector", args: []string{"--from-backup", "b1", "--or-selector", "a=1 or b=2"}, want: from(cairnv1.RestoreSpec{OrLabelSelectors: []*metav1.LabelSelector{selector("a=1"), selector("b=2")}})},
		{name: "--namespace-mappings", args: []string{"--from-backup", "b1", "--namespace-mappings", "a:b,c:d"},
			want: from(cairnv1.RestoreSpec{NamespaceMapping: map[string]cairnv1.NamespaceName{"a": "b", "c": "d"}})},
		{name: "--existing-resource-policy", args: []string{"--from-backup", "b1", "--existing-resource-policy", "update"}, want: from(cairnv1.RestoreSpec{ExistingResourcePolicy: cairnv1.ExistingResourcePolicyUpdate})},
		{name: "--status-include-resources", args: []string{"--from-backup", "b1", "--status-include-resources", "*"}, want: from(cairnv1.RestoreSpec{RestoreStatus: &cairnv1.RestoreStatusSpec{IncludedResources: []string{"*"}}})},
		{name: "--status-exclude-resources", args: []string{"--from-backup", "b1", "--status-exclude-resources", "pods"}, want: from(cairnv1.RestoreSpec{RestoreStatus: &cairnv1.RestoreStatusSpec{ExcludedResources: []string{"pods"}}})},
		{name: "--preserve-nodeports", args: []string{"--from-backup", "b1", "--preserve-nodeports"}, want: from(cairnv1.RestoreSpec{PreserveNodePorts: ptr.To(true)})},
		{name: "--restore-volumes=false", args: []string{"--from-backup", "b1", "--restore-volumes=false"}, want: from(cairnv1.RestoreSpec{RestorePVs: ptr.To(false)})},
		{name: "--item-operation-timeout", args: []string{"--from-backup", "b1", "--item-operation-timeout", "1h"}, want: from(cairnv1.RestoreSpec{ItemOperationTimeout: &metav1.Duration{Duration: time.Hour}})},
		{name: "no source", args: nil, wantErr: "exactly one of --from-backup and --from-schedule"},
		{name: "two sources", args: []string{"--from-backup", "b1", "--from-schedule", "s"}, wantErr: "exactly one of"},
		{name: "a mapping without a colon", args: []string{"--from-backup", "b1", "--namespace-mappings", "a-b"}, wantErr: `invalid --namespace-mappings entry "a-b"`},
		{name: "a mapping to a bad name", args: []string{"--from-backup", "b1", "--namespace-mappings", "a:B_"}, wantErr: "invalid --namespace-mappings entry"},
		{name: "a namespace mapped twice", args: []string{"--from-backup", "b1", "--namespace-mappings", "a:b,a:c"}, wantErr: "mapped twice"},
		{name: "a bad policy", args: []string{"--from-backup", "b1", "--existing-resource-policy", "replace"}, wantErr: `invalid --existing-resource-policy "replace"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f restoreFlags
			parse(t, f.add, tt.args)
			got, err := f.spec()
			checkSpec(t, got, tt.want, err, tt.wantErr)
		})
	}
}

func TestScheduleFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    cairnv1.ScheduleSpec
		wantErr string
	}{
		{name: "--schedule", args: []string{"--schedule", "0 3 * * *"}, want: cairnv1.ScheduleSpec{Schedule: "0 3 * * *"}},
		{name: "template flags", args: []string{"--schedule", "@daily", "--include-namespaces", "web", "--ttl", "168h", "--storage-location", "s3"},
			want: cairnv1.ScheduleSpec{Schedule: "@daily", Template: cairnv1.BackupSpec{IncludedNamespaces: []string{"web"}, TTL: &metav1.Duration{Duration: 168 * time.Hour}, StorageLocation: "s3"}}},
		{name: "--default-volumes-to-fs-backup", args: []string{"--schedule", "@daily", "--default-volumes-to-fs-backup"},
			want: cairnv1.ScheduleSpec{Schedule: "@daily", Template: cairnv1.BackupSpec{DefaultVolumesToFsBackup: ptr.To(true)}}},
		{name: "--paused", args: []string{"--schedule", "@daily", "--paused"}, want: cairnv1.ScheduleSpec{Schedule: "@daily", Paused: true}},
		{name: "--skip-immediately", args: []string{"--schedule", "@daily", "--skip-immediately"}, want: cairnv1.ScheduleSpec{Schedule: "@daily", SkipImmediately: true}},
		{name: "--use-owner-references-in-backup", args: []string{"--schedule", "@daily", "--use-owner-references-in-backup"}, want: cairnv1.ScheduleSpec{Schedule: "@daily", UseOwnerReferencesInBackup: true}},
		{name: "--backup-labels", args: []string{"--schedule", "@daily", "--backup-labels", "app=web,example.com/tier=db"},
			want: cairnv1.ScheduleSpec{Schedule: "@daily", Template: cairnv1.BackupSpec{Metadata: &cairnv1.BackupMetadata{Labels: map[string]string{"app": "web", "example.com/tier": "db"}}}}},
		{name: "--backup-labels with an empty value", args: []string{"--schedule", "@daily", "--backup-labels", "app="},
			want: cairnv1.ScheduleSpec{Schedule: "@daily", Template: cairnv1.BackupSpec{Metadata: &cairnv1.BackupMetadata{Labels: map[string]string{"app": ""}}}}},
		{name: "20 --backup-labels", args: []string{"--schedule", "@daily", "--backup-labels", labelsFlag(manyLabels(20))},
			want: cairnv1.ScheduleSpec{Schedule: "@daily", Template: cairnv1.BackupSpec{Metadata: &cairnv1.BackupMetadata{Labels: manyLabels(20)}}}},
		{name: "no --schedule", args: nil, wantErr: "--schedule is required"},
		{name: "a --backup-labels key that is not a label key", args: []string{"--schedule", "@daily", "--backup-labels", "bad key!=a"},
			wantErr: "invalid --backup-labels: spec.template.metadata.labels[bad key!]: the key is not a label key"},
		{name: "a --backup-labels value that is not a label value", args: []string{"--schedule", "@daily", "--backup-labels", "app=not a value"},
			wantErr: `invalid --backup-labels: spec.template.metadata.labels[app]: "not a value" is not a label value`},
		{name: "a --backup-labels key in the cairn.dev domain", args: []string{"--schedule", "@daily", "--backup-labels", "cairn.dev/schedule-name=other"},
			wantErr: "spec.template.metadata.labels[cairn.dev/schedule-name]: keys in the cairn.dev domain are Cairn's own"},
		{name: "a --backup-labels key under cairn.dev", args: []string{"--schedule", "@daily", "--backup-labels", "x.cairn.dev/a=b"},
			wantErr: "keys in the cairn.dev domain are Cairn's own"},
		{name: "21 --backup-labels", args: []string{"--schedule", "@daily", "--backup-labels", labelsFlag(manyLabels(21))},
			wantErr: "invalid --backup-labels: 21 labels, at most 20"},
		{name: "a bad template flag", args: []string{"--schedule", "@daily", "-l", "app in"}, wantErr: "invalid --selector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f scheduleFlags
			parse(t, f.add, tt.args)
			got, err := f.spec()
			checkSpec(t, got, tt.want, err, tt.wantErr)
		})
	}
}

// manyLabels is n labels l0=v, l1=v...; labelsFlag is labels as --backup-labels takes them.
func manyLabels(n int) map[string]string {
	labels := map[string]string{}
	for i := range n {
		labels[fmt.Sprintf("l%d", i)] = "v"
	}
	return labels
}

func labelsFlag(labels map[string]string) string {
	pairs := make([]string, 0, len(labels))
	for k, v := range labels {
		pairs = append(pairs, k+"="+v)
	}
	return strings.Join(pairs, ",")
}

func TestLocationFlags(t *testing.T) {
	o := locationCreateOptions{provider: "s3", bucket: "b", prefix: "p", config: map[string]string{"region": "r"}, credential: "sec=cloud", isDefault: true, accessMode: "ReadOnly"}
	got, err := o.location("l", "cairn-system")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Provider != "s3" || got.Spec.ObjectStorage.Bucket != "b" || got.Spec.ObjectStorage.Prefix != "p" || got.Spec.Config["region"] != "r" ||
		got.Spec.Credential.Name != "sec" || got.Spec.Credential.Key != "cloud" || !got.Spec.Default || got.Spec.AccessMode != cairnv1.AccessModeReadOnly {
		t.Errorf("location = %+v", got.Spec)
	}
	for _, provider := range []string{"azure", "gcs"} {
		o := locationCreateOptions{provider: provider, bucket: "backups", config: map[string]string{"storageAccount": "acct"}, credential: "sec=cloud"}
		if got, err := o.location("l", "cairn-system"); err != nil || string(got.Spec.Provider) != provider || got.Spec.ObjectStorage.Bucket != "backups" {
			t.Errorf("--provider %s: %+v, %v", provider, got, err)
		}
	}
	for _, bad := range []locationCreateOptions{{provider: "swift"}, {provider: "s3", credential: "nokey"}, {provider: "filesystem", accessMode: "WriteOnly"}} {
		if _, err := bad.location("l", "cairn-system"); ExitCode(err) != ExitUsage {
			t.Errorf("%+v: err = %v, want a usage error", bad, err)
		}
	}
}

func TestVeleroLocationFlags(t *testing.T) {
	o := locationCreateOptions{provider: "s3", bucket: "velero", prefix: "velero", format: "velero"}
	got, err := o.location("from-velero", "cairn-system")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Format != cairnv1.LocationFormatVelero || got.Spec.AccessMode != cairnv1.AccessModeReadOnly || got.Spec.Velero != nil {
		t.Errorf("location = %+v: want format velero, ReadOnly implied", got.Spec)
	}
	o.veleroPassword = "velero-repo-credentials=repository-password"
	got, err = o.location("from-velero", "cairn-system")
	if err != nil || got.Spec.Velero == nil || *got.Spec.Velero.RepositoryPasswordSecretRef != (cairnv1.SecretKeyReference{Name: "velero-repo-credentials", Key: "repository-password"}) {
		t.Errorf("with --velero-repository-password: %+v, %v", got, err)
	}
	for _, bad := range []locationCreateOptions{
		{provider: "s3", bucket: "b", veleroPassword: "s=k"},
		{provider: "s3", bucket: "b", format: "velero", veleroPassword: "nokey"},
		{provider: "s3", bucket: "b", format: "velero", accessMode: "ReadWrite"},
		{provider: "s3", bucket: "b", format: "velero", isDefault: true},
		{provider: "s3", bucket: "b", format: "restic"},
	} {
		if _, err := bad.location("l", "cairn-system"); ExitCode(err) != ExitUsage {
			t.Errorf("%+v: err = %v, want a usage error", bad, err)
		}
	}
}

// location create --team-namespaces and --team-max-ttl are the location's spec.teamLimits.
func TestLocationTeamLimitFlags(t *testing.T) {
	e, _, errOut := testEnv(t)
	if got := run(e, "location", "create", "teams", "-n", "cairn-system", "--provider", "filesystem", "--config", "path=/x",
		"--team-namespaces", "tier in (prod,staging),!legacy", "--team-max-ttl", "720h"); got != ExitOK {
		t.Fatalf("exit %d: %s", got, errOut)
	}
	c, _ := e.client()
	var bsl cairnv1.BackupStorageLocation
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "cairn-system", Name: "teams"}, &bsl); err != nil {
		t.Fatal(err)
	}
	limits := bsl.Spec.TeamLimits
	if limits == nil || limits.NamespaceSelector == nil || limits.MaxTTL == nil || limits.MaxLockRetention != nil ||
		metav1.FormatLabelSelector(limits.NamespaceSelector) != "!legacy,tier in (prod,staging)" || limits.MaxTTL.Duration != 720*time.Hour {
		t.Errorf("teamLimits = %+v, want the selector !legacy,tier in (prod,staging) and maxTTL 720h", limits)
	}

	o := locationCreateOptions{provider: "filesystem"}
	if got, err := o.location("l", "cairn-system"); err != nil || got.Spec.TeamLimits != nil {
		t.Errorf("without the flags: teamLimits %+v, %v; want none", got.Spec.TeamLimits, err)
	}
	for _, bad := range []locationCreateOptions{
		{provider: "filesystem", teamNamespaces: "tier in prod"},
		{provider: "filesystem", teamMaxTTL: -time.Hour},
		{provider: "filesystem", teamMaxTTL: time.Millisecond},
	} {
		if _, err := bad.location("l", "cairn-system"); ExitCode(err) != ExitUsage {
			t.Errorf("%+v: err = %v, want a usage error", bad, err)
		}
	}
}

func TestLabels(t *testing.T) {
	if got, err := parseLabels(map[string]string{"team": "a"}); err != nil || got["team"] != "a" {
		t.Errorf("parseLabels = %v, %v", got, err)
	}
	if _, err := parseLabels(map[string]string{"bad key!": "a"}); ExitCode(err) != ExitUsage {
		t.Errorf("a bad key: err = %v", err)
	}
	if _, err := parseLabels(map[string]string{"k": "bad value!"}); ExitCode(err) != ExitUsage {
		t.Errorf("a bad value: err = %v", err)
	}
}
