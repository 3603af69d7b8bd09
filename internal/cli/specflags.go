package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/schedule"
)

// optionalBool is a flag that is unset (nil), true or false: `--flag` alone means true.
type optionalBool struct{ v *bool }

func (b *optionalBool) String() string {
	if b.v == nil {
		return ""
	}
	return strconv.FormatBool(*b.v)
}

func (b *optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.v = &v
	return nil
}

func (b *optionalBool) Type() string { return "bool" }

func optionalBoolVar(fs *pflag.FlagSet, b *optionalBool, name, usage string) {
	fs.Var(b, name, usage)
	fs.Lookup(name).NoOptDefVal = "true"
}

// optionalDuration is a duration flag that is unset (nil) unless given.
type optionalDuration struct{ v *metav1.Duration }

func (d *optionalDuration) String() string {
	if d.v == nil {
		return ""
	}
	return d.v.Duration.String()
}

func (d *optionalDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("must not be negative")
	}
	d.v = &metav1.Duration{Duration: v}
	return nil
}

func (d *optionalDuration) Type() string { return "duration" }

// filterFlags are the item filters that backups, schedules and restores share.
type filterFlags struct {
	includeNamespaces, excludeNamespaces []string
	includeResources, excludeResources   []string
	includeClusterResources              optionalBool
	selector                             string
	orSelector                           string
}

func (f *filterFlags) add(fs *pflag.FlagSet, what string) {
	fs.StringSliceVar(&f.includeNamespaces, "include-namespaces", nil, "Namespaces to "+what+", comma-separated; * wildcards (default: all, or a team's own).")
	fs.StringSliceVar(&f.excludeNamespaces, "exclude-namespaces", nil, "Namespaces not to "+what+", comma-separated; * wildcards.")
	fs.StringSliceVar(&f.includeResources, "include-resources", nil, "Resources to "+what+" (configmaps, deployments.apps, short names), comma-separated (default: all).")
	fs.StringSliceVar(&f.excludeResources, "exclude-resources", nil, "Resources not to "+what+", comma-separated.")
	optionalBoolVar(fs, &f.includeClusterResources, "include-cluster-resources",
		"Whether to "+what+" cluster-scoped resources (default: only those that namespaced items need, such as the PVs of PVCs).")
	fs.StringVarP(&f.selector, "selector", "l", "", "Only items whose labels match this selector (app=web,tier notin (cache)).")
	fs.StringVar(&f.orSelector, "or-selector", "", `Only items that match at least one of these selectors, separated by " or " (app=web or app=db).`)
}

func (f *filterFlags) filters() (cairnv1.ItemFilters, error) {
	out := cairnv1.ItemFilters{
		IncludedNamespaces: f.includeNamespaces, ExcludedNamespaces: f.excludeNamespaces,
		IncludedResources: f.includeResources, ExcludedResources: f.excludeResources,
		IncludeClusterResources: f.includeClusterResources.v,
	}
	if f.selector != "" {
		sel, err := metav1.ParseToLabelSelector(f.selector)
		if err != nil {
			return out, usageErrorf("invalid --selector %q: %v", f.selector, err)
		}
		out.LabelSelector = sel
	}
	if f.orSelector != "" {
		if f.selector != "" {
			return out, usageErrorf("--selector and --or-selector cannot be used together")
		}
		for _, part := range strings.Split(f.orSelector, " or ") {
			sel, err := metav1.ParseToLabelSelector(strings.TrimSpace(part))
			if err != nil || strings.TrimSpace(part) == "" {
				return out, usageErrorf("invalid --or-selector %q: each selector between \" or \" must be a label selector", f.orSelector)
			}
			out.OrLabelSelectors = append(out.OrLabelSelectors, sel)
		}
	}
	return out, nil
}

// backupFlags set a BackupSpec: `backup create` and a schedule's template.
type backupFlags struct {
	filterFlags
	storageLocation      string
	ttl                  optionalDuration
	itemOperationTimeout optionalDuration
	snapshotVolumes      optionalBool
	// defaultVolumesToFsBackup is spec.defaultVolumesToFsBackup (docs/volumes.md).
	defaultVolumesToFsBackup optionalBool
}

func (f *backupFlags) add(fs *pflag.FlagSet) {
	f.filterFlags.add(fs, "back up")
	fs.StringVar(&f.storageLocation, "storage-location", "", "The storage location to write to (default: the default location).")
	fs.Var(&f.ttl, "ttl", "How long to keep the backup before it expires and is deleted, such as 72h (default: the manager's --default-backup-ttl; 0s keeps it forever).")
	fs.Var(&f.itemOperationTimeout, "item-operation-timeout", "How long async plugin operations (volume snapshots) may take (default 4h).")
	optionalBoolVar(fs, &f.snapshotVolumes, "snapshot-volumes", "Whether to take CSI snapshots of persistent volumes (default: yes, where a VolumeSnapshotClass exists).")
	optionalBoolVar(fs, &f.defaultVolumesToFsBackup, "default-volumes-to-fs-backup",
		"Copy the data of every PVC and emptyDir volume of the backed-up pods, except those a pod excludes with backup.cairn.dev/backup-volumes-excludes "+
			"(default: only the volumes pods list in backup.cairn.dev/backup-volumes; docs/volumes.md).")
}

// spec is the BackupSpec the flags say.
func (f *backupFlags) spec() (cairnv1.BackupSpec, error) {
	filters, err := f.filters()
	if err != nil {
		return cairnv1.BackupSpec{}, err
	}
	return cairnv1.BackupSpec{
		IncludedNamespaces: filters.IncludedNamespaces, ExcludedNamespaces: filters.ExcludedNamespaces,
		IncludedResources: filters.IncludedResources, ExcludedResources: filters.ExcludedResources,
		IncludeClusterResources: filters.IncludeClusterResources,
		LabelSelector:           filters.LabelSelector, OrLabelSelectors: filters.OrLabelSelectors,
		StorageLocation: f.storageLocation,
		TTL:             f.ttl.v, ItemOperationTimeout: f.itemOperationTimeout.v,
		SnapshotVolumes:          f.snapshotVolumes.v,
		DefaultVolumesToFsBackup: f.defaultVolumesToFsBackup.v,
	}, nil
}

// restoreFlags set a RestoreSpec.
type restoreFlags struct {
	filterFlags
	fromBackup, fromSchedule string
	namespaceMappings        []string
	existingResourcePolicy   string
	statusInclude            []string
	statusExclude            []string
	preserveNodePorts        optionalBool
	restoreVolumes           optionalBool
	itemOperationTimeout     optionalDuration
}

func (f *restoreFlags) add(fs *pflag.FlagSet) {
	f.filterFlags.add(fs, "restore")
	fs.StringVar(&f.fromBackup, "from-backup", "", "The backup to restore, in the restore's namespace.")
	fs.StringVar(&f.fromSchedule, "from-schedule", "", "Restore the newest Completed backup of this schedule.")
	fs.StringSliceVar(&f.namespaceMappings, "namespace-mappings", nil, "Restore namespaces under other names: old:new, comma-separated (a:b,c:d).")
	fs.StringVar(&f.existingResourcePolicy, "existing-resource-policy", "", "What to do with an object that already exists and differs: none (leave it, warn) or update (patch it).")
	fs.StringSliceVar(&f.statusInclude, "status-include-resources", nil, "Resources whose status is restored too, comma-separated (* for all).")
	fs.StringSliceVar(&f.statusExclude, "status-exclude-resources", nil, "Resources whose status is not restored, comma-separated.")
	optionalBoolVar(fs, &f.preserveNodePorts, "preserve-nodeports", "Keep the node ports of Services (default: no, new ports are assigned).")
	optionalBoolVar(fs, &f.restoreVolumes, "restore-volumes", "Whether to restore persistent volumes (default: yes).")
	fs.Var(&f.itemOperationTimeout, "item-operation-timeout", "How long async restore operations may take (default 4h).")
}

// spec is the RestoreSpec the flags say.
func (f *restoreFlags) spec() (cairnv1.RestoreSpec, error) {
	if (f.fromBackup == "") == (f.fromSchedule == "") {
		return cairnv1.RestoreSpec{}, usageErrorf("give exactly one of --from-backup and --from-schedule")
	}
	filters, err := f.filters()
	if err != nil {
		return cairnv1.RestoreSpec{}, err
	}
	spec := cairnv1.RestoreSpec{
		BackupName: f.fromBackup, ScheduleName: f.fromSchedule,
		IncludedNamespaces: filters.IncludedNamespaces, ExcludedNamespaces: filters.ExcludedNamespaces,
		IncludedResources: filters.IncludedResources, ExcludedResources: filters.ExcludedResources,
		IncludeClusterResources: filters.IncludeClusterResources,
		LabelSelector:           filters.LabelSelector, OrLabelSelectors: filters.OrLabelSelectors,
		PreserveNodePorts: f.preserveNodePorts.v, RestorePVs: f.restoreVolumes.v,
		ItemOperationTimeout: f.itemOperationTimeout.v,
	}
	switch p := cairnv1.ExistingResourcePolicy(f.existingResourcePolicy); p {
	case "", cairnv1.ExistingResourcePolicyNone, cairnv1.ExistingResourcePolicyUpdate:
		spec.ExistingResourcePolicy = p
	default:
		return spec, usageErrorf("invalid --existing-resource-policy %q: want none or update", f.existingResourcePolicy)
	}
	if len(f.namespaceMappings) > 0 {
		spec.NamespaceMapping = map[string]cairnv1.NamespaceName{}
		for _, m := range f.namespaceMappings {
			from, to, ok := strings.Cut(m, ":")
			if !ok || len(validation.IsDNS1123Label(from)) > 0 || len(validation.IsDNS1123Label(to)) > 0 {
				return spec, usageErrorf("invalid --namespace-mappings entry %q: want old:new, both namespace names", m)
			}
			if _, dup := spec.NamespaceMapping[from]; dup {
				return spec, usageErrorf("invalid --namespace-mappings: namespace %s is mapped twice", from)
			}
			spec.NamespaceMapping[from] = cairnv1.NamespaceName(to)
		}
	}
	if len(f.statusInclude) > 0 || len(f.statusExclude) > 0 {
		spec.RestoreStatus = &cairnv1.RestoreStatusSpec{IncludedResources: f.statusInclude, ExcludedResources: f.statusExclude}
	}
	return spec, nil
}

// scheduleFlags set a ScheduleSpec.
type scheduleFlags struct {
	backupFlags
	// backupLabels are the template's labels, which the schedule's backups get.
	backupLabels       map[string]string
	schedule           string
	paused             bool
	skipImmediately    bool
	useOwnerReferences bool
	// keep are the --keep-* counts of spec.retention, by rule.
	keep retentionFlags
}

// retentionFlags are the --keep-* flags: spec.retention's counts.
type retentionFlags struct {
	last, hourly, daily, weekly, monthly, yearly int32
}

// maxRetentionCount is the CRD's bound on each retention count.
const maxRetentionCount = 10000

// policy is the retention the flags say, nil when none is set; an error for a count out of
// the CRD's bounds, named by its flag.
func (k retentionFlags) policy() (*cairnv1.RetentionPolicy, error) {
	counts := []struct {
		flag string
		n    int32
	}{{"keep-last", k.last}, {"keep-hourly", k.hourly}, {"keep-daily", k.daily}, {"keep-weekly", k.weekly}, {"keep-monthly", k.monthly}, {"keep-yearly", k.yearly}}
	set := false
	for _, c := range counts {
		if c.n < 0 || c.n > maxRetentionCount {
			return nil, usageErrorf("--%s %d: a count from 0 to %d", c.flag, c.n, maxRetentionCount)
		}
		set = set || c.n > 0
	}
	if !set {
		return nil, nil
	}
	return &cairnv1.RetentionPolicy{KeepLast: k.last, Hourly: k.hourly, Daily: k.daily, Weekly: k.weekly, Monthly: k.monthly, Yearly: k.yearly}, nil
}

func (f *scheduleFlags) add(fs *pflag.FlagSet) {
	f.backupFlags.add(fs)
	fs.StringVar(&f.schedule, "schedule", "", `When to back up: a cron expression ("0 3 * * *", optionally "CRON_TZ=Europe/Paris 0 3 * * *") or @every 6h, @daily...`)
	fs.BoolVar(&f.paused, "paused", false, "Create the schedule paused.")
	fs.BoolVar(&f.skipImmediately, "skip-immediately", false, "Skip a run that is due right away; start with the next one.")
	fs.BoolVar(&f.useOwnerReferences, "use-owner-references-in-backup", false, "Make the schedule the owner of its backups, so that deleting it deletes them.")
	fs.StringToStringVar(&f.backupLabels, "backup-labels", nil,
		"Labels of the backups the schedule creates (beside cairn.dev/schedule-name), k=v comma-separated.")
	fs.Int32Var(&f.keep.last, "keep-last", 0, "Retention instead of --ttl: keep the N newest restorable backups (docs/schedules.md, Retention).")
	fs.Int32Var(&f.keep.hourly, "keep-hourly", 0, "Retention: keep one backup in each of the N most recent hours that have one.")
	fs.Int32Var(&f.keep.daily, "keep-daily", 0, "Retention: keep one backup in each of the N most recent days that have one.")
	fs.Int32Var(&f.keep.weekly, "keep-weekly", 0, "Retention: keep one backup in each of the N most recent ISO weeks that have one.")
	fs.Int32Var(&f.keep.monthly, "keep-monthly", 0, "Retention: keep one backup in each of the N most recent months that have one.")
	fs.Int32Var(&f.keep.yearly, "keep-yearly", 0, "Retention: keep one backup in each of the N most recent years that have one.")
}

// spec is the ScheduleSpec the flags say.
func (f *scheduleFlags) spec() (cairnv1.ScheduleSpec, error) {
	if strings.TrimSpace(f.schedule) == "" {
		return cairnv1.ScheduleSpec{}, usageErrorf("--schedule is required")
	}
	template, err := f.backupFlags.spec()
	if err != nil {
		return cairnv1.ScheduleSpec{}, err
	}
	if len(f.backupLabels) > 0 {
		if len(f.backupLabels) > cairnv1.MaxTemplateLabels {
			return cairnv1.ScheduleSpec{}, usageErrorf("invalid --backup-labels: %d labels, at most %d", len(f.backupLabels), cairnv1.MaxTemplateLabels)
		}
		// The schedule reconciler's own check, so that the CLI refuses what the schedule
		// would fail validation for.
		if errs := schedule.ValidateTemplateLabels(f.backupLabels); len(errs) > 0 {
			return cairnv1.ScheduleSpec{}, usageErrorf("invalid --backup-labels: %s", strings.Join(errs, "; "))
		}
		template.Metadata = &cairnv1.BackupMetadata{Labels: f.backupLabels}
	}
	retention, err := f.keep.policy()
	if err != nil {
		return cairnv1.ScheduleSpec{}, err
	}
	if retention != nil && template.TTL != nil {
		return cairnv1.ScheduleSpec{}, usageErrorf("--ttl cannot be used with --keep-*: a schedule with retention keeps its backups by count per period, with no expiry")
	}
	return cairnv1.ScheduleSpec{Schedule: f.schedule, Template: template, Paused: f.paused,
		SkipImmediately: f.skipImmediately, UseOwnerReferencesInBackup: f.useOwnerReferences, Retention: retention}, nil
}

// labelsFlag parses --labels k=v,k2=v2 into object labels.
func parseLabels(pairs map[string]string) (map[string]string, error) {
	for k, v := range pairs {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, usageErrorf("invalid label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, usageErrorf("invalid label value %q: %s", v, strings.Join(errs, "; "))
		}
	}
	if len(pairs) == 0 {
		return nil, nil
	}
	return pairs, nil
}
