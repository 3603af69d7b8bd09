package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SchedulePhase is where a schedule is.
//
// +kubebuilder:validation:Enum=New;Enabled;Paused;FailedValidation
type SchedulePhase string

const (
	// SchedulePhaseNew is a schedule not validated yet ("" means the same).
	SchedulePhaseNew SchedulePhase = "New"
	// SchedulePhaseEnabled is a valid schedule that creates backups when they are due.
	SchedulePhaseEnabled SchedulePhase = "Enabled"
	// SchedulePhasePaused is a valid schedule with spec.paused: it creates no backups.
	SchedulePhasePaused SchedulePhase = "Paused"
	// SchedulePhaseFailedValidation is a schedule whose cron expression, time zone or template
	// is invalid (validationErrors say why); it creates no backups until it is fixed.
	SchedulePhaseFailedValidation SchedulePhase = "FailedValidation"
)

// ScheduleNameLabel is set on every backup a schedule creates: the schedule's name.
const ScheduleNameLabel = "cairn.dev/schedule-name"

// Condition types and reasons on a Schedule.
const (
	// ScheduleConditionSkipped is True when the last due run was skipped; its message names
	// the backup of the schedule that had not ended yet.
	ScheduleConditionSkipped = "Skipped"
	// ReasonBackupStillRunning: a run was skipped because the schedule's previous backup had
	// not ended.
	ReasonBackupStillRunning = "BackupStillRunning"
	// ReasonRunDue: the last due run created its backup.
	ReasonRunDue = "RunCreatedBackup"
)

// ScheduleSpec says when to back up and what.
type ScheduleSpec struct {
	// Schedule is a cron expression: five fields ("0 3 * * *"), or a descriptor such as
	// "@daily" or "@every 6h", optionally prefixed with a time zone ("CRON_TZ=Europe/Paris 0 3 * * *").
	// Without a prefix, times are UTC.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Schedule string `json:"schedule"`

	// Template is the spec of every backup the schedule creates. Editing it changes the next
	// backups, never those already created.
	// +optional
	// +kubebuilder:default={}
	Template BackupSpec `json:"template,omitempty"`

	// Paused stops the schedule from creating backups.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// SkipImmediately, when the schedule is created or unpaused after missing runs, skips the
	// run that would otherwise be made at once; it waits for the next tick instead. It applies
	// once and is then reset to false.
	// +optional
	SkipImmediately bool `json:"skipImmediately,omitempty"`

	// UseOwnerReferencesInBackup makes the schedule the owner of the backups it creates, so
	// that deleting the schedule deletes them (and their data).
	// +optional
	UseOwnerReferencesInBackup bool `json:"useOwnerReferencesInBackup,omitempty"`

	// Retention keeps the schedule's backups by count per period instead of by TTL
	// (docs/schedules.md, "Retention"): the schedule's backups get no expiry (ttl 0), and after
	// each of them ends the schedule deletes those no rule keeps. A schedule with retention
	// cannot set spec.template.ttl.
	// +optional
	Retention *RetentionPolicy `json:"retention,omitempty"`
}

// RetentionPolicy says how many of a schedule's backups to keep, by count and per calendar
// period in the schedule's time zone (its CRON_TZ, else UTC; weeks are ISO weeks, from
// Monday). Each period rule keeps the newest Completed backup (else the newest PartiallyFailed)
// of each of the N most recent periods that have one; a backup kept by any rule stays. Zero or
// absent is no rule of that kind.
//
// +kubebuilder:validation:XValidation:rule="(has(self.keepLast) ? self.keepLast : 0) + (has(self.hourly) ? self.hourly : 0) + (has(self.daily) ? self.daily : 0) + (has(self.weekly) ? self.weekly : 0) + (has(self.monthly) ? self.monthly : 0) + (has(self.yearly) ? self.yearly : 0) > 0",message="spec.retention keeps no backup: set at least one of keepLast, hourly, daily, weekly, monthly, yearly above 0"
type RetentionPolicy struct {
	// KeepLast keeps the newest N restorable (Completed or PartiallyFailed) backups.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	KeepLast int32 `json:"keepLast,omitempty"`

	// Hourly keeps one backup in each of the N most recent hours that have one.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Hourly int32 `json:"hourly,omitempty"`

	// Daily keeps one backup in each of the N most recent days that have one.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Daily int32 `json:"daily,omitempty"`

	// Weekly keeps one backup in each of the N most recent ISO weeks (Monday to Sunday) that
	// have one.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Weekly int32 `json:"weekly,omitempty"`

	// Monthly keeps one backup in each of the N most recent months that have one.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Monthly int32 `json:"monthly,omitempty"`

	// Yearly keeps one backup in each of the N most recent years that have one.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Yearly int32 `json:"yearly,omitempty"`
}

// RetentionCounts counts the backups each retention rule keeps.
type RetentionCounts struct {
	// +optional
	KeepLast int32 `json:"keepLast,omitempty"`
	// +optional
	Hourly int32 `json:"hourly,omitempty"`
	// +optional
	Daily int32 `json:"daily,omitempty"`
	// +optional
	Weekly int32 `json:"weekly,omitempty"`
	// +optional
	Monthly int32 `json:"monthly,omitempty"`
	// +optional
	Yearly int32 `json:"yearly,omitempty"`
	// NewestCompleted is 1 when the schedule has a Completed backup: its newest is never deleted.
	// +optional
	NewestCompleted int32 `json:"newestCompleted,omitempty"`
	// NotEnded counts the backups still running (or being queued): they are judged once they end.
	// +optional
	NotEnded int32 `json:"notEnded,omitempty"`
	// FailedUntilSuccess counts the Failed backups newer than the schedule's newest restorable
	// backup: they are kept, for their logs, until a later backup ends Completed or
	// PartiallyFailed.
	// +optional
	FailedUntilSuccess int32 `json:"failedUntilSuccess,omitempty"`
}

// RetentionStatus is what the schedule's last retention pass kept and deleted.
type RetentionStatus struct {
	// LastApplied is when the schedule's retention last deleted backups or its counts changed.
	// +optional
	LastApplied *metav1.Time `json:"lastApplied,omitempty"`

	// Kept is how many of the schedule's backups each rule keeps (a backup kept by two rules
	// counts in both).
	// +optional
	Kept RetentionCounts `json:"kept,omitempty"`

	// Total is how many backups of the schedule are kept.
	// +optional
	Total int32 `json:"total,omitempty"`

	// Deleted is how many backups the retention deleted at LastApplied.
	// +optional
	Deleted int32 `json:"deleted,omitempty"`
}

// ScheduleStatus is what Cairn observed and did.
type ScheduleStatus struct {
	// Phase is where the schedule is.
	// +optional
	Phase SchedulePhase `json:"phase,omitempty"`

	// ValidationErrors says what is wrong with a schedule in FailedValidation.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=1024
	ValidationErrors []string `json:"validationErrors,omitempty"`

	// LastBackup is when the schedule last created a backup.
	// +optional
	LastBackup *metav1.Time `json:"lastBackup,omitempty"`

	// LastSkipped is when a due run was last skipped because the previous backup had not ended.
	// +optional
	LastSkipped *metav1.Time `json:"lastSkipped,omitempty"`

	// NextBackup is when the next run is due.
	// +optional
	NextBackup *metav1.Time `json:"nextBackup,omitempty"`

	// Retention is what the last retention pass kept, per rule (spec.retention only).
	// +optional
	Retention *RetentionStatus `json:"retention,omitempty"`

	// ActingAs is whom the schedule's backups act for (DESIGN.md section 21): the requester
	// the admission policies recorded when the spec last changed (a change of paused or
	// skipImmediately alone does not count), and since when. The time is when the schedule
	// reconciler first saw that requester, as admission records no time: it trails the change
	// by as long as the reconciler took to see it.
	// +optional
	ActingAs *ScheduleRequester `json:"actingAs,omitempty"`

	// FormerRequesters are whom the schedule acted as before actingAs, newest first, at most
	// 10: its retention still judges the backups it made for them (docs/schedules.md).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	FormerRequesters []ScheduleRequester `json:"formerRequesters,omitempty"`

	// ObservedGeneration is the generation of the spec the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions are the schedule's observed conditions.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ScheduleRequester is whom a schedule acts for, as its cairn.dev/requester annotations record.
type ScheduleRequester struct {
	// Username is the requester's username (cairn.dev/requester).
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Username string `json:"username"`
	// UID is the requester's UID (cairn.dev/requester-uid), empty when the authenticator gives
	// none.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	UID string `json:"uid,omitempty"`
	// Since is when the schedule reconciler first saw this requester on the schedule.
	// +required
	Since metav1.Time `json:"since"`
}

// Schedule creates Backups on a cron schedule (DESIGN.md section 10).
// A run creates <name>-<yyyyMMddHHmmss>, so the name leaves room for 15 more characters.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cairn
// +kubebuilder:validation:XValidation:rule="!has(self.spec.retention) || !has(self.spec.template.ttl)",message="spec.retention and spec.template.ttl cannot be set together: a schedule with retention keeps its backups by count per period, with no expiry"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 185",message="a Schedule's name may have at most 185 characters, so that its backups' names (<schedule>-<yyyyMMddHHmmss>) fit"
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.paused`
// +kubebuilder:printcolumn:name="Last Backup",type=date,JSONPath=`.status.lastBackup`
// +kubebuilder:printcolumn:name="Next Backup",type=string,JSONPath=`.status.nextBackup`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,priority=1
// +kubebuilder:printcolumn:name="Location",type=string,JSONPath=`.spec.template.storageLocation`,priority=1
// +kubebuilder:printcolumn:name="Acting As",type=string,JSONPath=`.status.actingAs.username`,priority=1
type Schedule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says when to back up and what.
	// +required
	Spec ScheduleSpec `json:"spec"`

	// Status is what Cairn observed and did.
	// +optional
	Status ScheduleStatus `json:"status,omitempty"`
}

// EffectivePhase is the schedule's phase, with "" read as New.
func (s *Schedule) EffectivePhase() SchedulePhase {
	if s.Status.Phase == "" {
		return SchedulePhaseNew
	}
	return s.Status.Phase
}

// +kubebuilder:object:root=true

// ScheduleList is a list of Schedules.
type ScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Schedule `json:"items"`
}
