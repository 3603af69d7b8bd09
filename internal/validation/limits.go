package validation

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// LimitFacts are what a storage location's teamLimits are checked against beside the backup
// (DESIGN.md section 21): the labels of the backup's namespace, which the location's
// namespaceSelector selects by, and the ttl of a backup that sets none (the manager's
// --default-backup-ttl; 0 means cairnv1.DefaultBackupTTL).
type LimitFacts struct {
	NamespaceLabels map[string]string
	DefaultTTL      time.Duration
}

// LocationLimits returns how backup b breaks the limits its storage location loc sets for
// backups in team namespaces (spec.teamLimits): a namespace its namespaceSelector does not
// select, a ttl over maxTTL, or, on an Object Lock location, a lock longer than
// maxLockRetention. Each message names the location and its limit. A backup in the operator's
// namespace is an administrator's and is not limited: nil. A selector that does not parse
// refuses every team backup, saying so: a location's limits never fail open.
func LocationLimits(b *cairnv1.Backup, loc *cairnv1.BackupStorageLocation, operatorNamespace string, facts LimitFacts) []string {
	limits := loc.Spec.TeamLimits
	if b.Namespace == operatorNamespace || limits == nil {
		return nil
	}
	var errs []string
	if limits.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(limits.NamespaceSelector)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("spec.storageLocation: storage location %s has a teamLimits.namespaceSelector that does not parse (%v), so no team namespace may use it; ask an administrator to fix it",
				loc.Name, err))
		case !sel.Matches(labels.Set(facts.NamespaceLabels)):
			errs = append(errs, fmt.Sprintf("spec.storageLocation: storage location %s takes backups only from the namespaces its teamLimits.namespaceSelector selects (%s), and namespace %s is not one of them",
				loc.Name, metav1.FormatLabelSelector(limits.NamespaceSelector), b.Namespace))
		}
	}
	defaultTTL := facts.DefaultTTL
	if defaultTTL <= 0 {
		defaultTTL = cairnv1.DefaultBackupTTL
	}
	ttl := b.Spec.GetTTL(defaultTTL)
	if limits.MaxTTL != nil && longer(ttl, limits.MaxTTL.Duration) {
		errs = append(errs, fmt.Sprintf("spec.ttl: %s is longer than storage location %s allows a backup in a team namespace (teamLimits.maxTTL %s)",
			ttlString(b, ttl), loc.Name, limits.MaxTTL.Duration))
	}
	if lock := loc.Spec.ObjectLock; lock != nil && limits.MaxLockRetention != nil {
		if held := lockedFor(ttl, lock.MinRetention.Duration); longer(held, limits.MaxLockRetention.Duration) {
			errs = append(errs, fmt.Sprintf("spec.ttl: %s would keep the backup's objects locked for %s under storage location %s's Object Lock, longer than it allows a backup in a team namespace (teamLimits.maxLockRetention %s)",
				ttlString(b, ttl), held, loc.Name, limits.MaxLockRetention.Duration))
		}
	}
	return errs
}

// longer reports whether ttl is longer than limit; a ttl of 0 (never expire) is longer than
// any limit.
func longer(ttl, limit time.Duration) bool {
	return ttl == 0 || ttl > limit
}

// lockedFor is how long an Object Lock location keeps a backup with ttl locked: until it
// expires, and at least minRetention; a backup that never expires, minRetention
// (storage.RetainUntil).
func lockedFor(ttl, minRetention time.Duration) time.Duration {
	if ttl == 0 {
		return minRetention
	}
	return max(ttl, minRetention)
}

// ttlString says what ttl b asks for, for messages: its own, none (never expire), or the
// manager's default it takes.
func ttlString(b *cairnv1.Backup, ttl time.Duration) string {
	switch {
	case b.Spec.TTL == nil:
		return fmt.Sprintf("unset, so the manager's default %s,", ttl)
	case ttl == 0:
		return "0s (never expire)"
	}
	return ttl.String()
}
