package restore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/velerofmt"
)

// Defaults of a Runner.
const (
	// DefaultWorkers is the size of each restore's own worker pool (--restore-worker-count).
	DefaultWorkers = 8
	// DefaultNamespaceTimeout bounds how long a restore waits for a target namespace that is
	// still terminating.
	DefaultNamespaceTimeout = 10 * time.Minute
	// DefaultCRDTimeout bounds how long a restore waits for a restored CRD to be Established.
	DefaultCRDTimeout = 2 * time.Minute
	// waitInterval is how often a terminating namespace or a new CRD is looked at again.
	waitInterval = time.Second
)

var (
	runServiceAccountsGR     = schema.GroupResource{Resource: "serviceaccounts"}
	volumeSnapshotsGR        = schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshots"}
	volumeSnapshotContentsGR = schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshotcontents"}
	namespaceGVR             = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	crdGVR                   = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	errArchiveFormat         = errors.New("unsupported archive format")
	errStorage               = errors.New("storage failure")
	errCommitMarker          = errors.New("wrong commit marker")
	errNoRequester           = errors.New("a restore in a team's namespace writes as its requester, and none was given: nothing was restored")
	supportedFormatMajors    = []string{"1"}
)

// Runner runs restores. One Runner serves every restore; each Run has its own worker pool.
type Runner struct {
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
	// Workers is the size of each restore's own worker pool; 0 means DefaultWorkers.
	Workers int
	// Priorities order the resources after CRDs; nil means DefaultPriorities.
	Priorities []string
	// Actions are the RestoreItemActions; nil means the built-in ones.
	Actions *Actions
	// Clock is the runs' time source; nil means the real clock.
	Clock clock.Clock
	// ProgressInterval is how often progress is reported, at most; 0 means the backup's default.
	ProgressInterval time.Duration
	// StorageTimeout bounds each small storage call; 0 means backup.DefaultStorageTimeout.
	StorageTimeout time.Duration
	// ScratchDir holds the restores' spools; "" means the system's temporary directory.
	ScratchDir string
	// NamespaceTimeout bounds the wait for a terminating target namespace; 0 means DefaultNamespaceTimeout.
	NamespaceTimeout time.Duration
	// CRDTimeout bounds the wait for a restored CRD to be Established; 0 means DefaultCRDTimeout.
	CRDTimeout time.Duration
	// Retry paces the retries of API calls that failed transiently; zero means backup.DefaultRetry.
	Retry wait.Backoff
	// StorageRetry paces the attempts to read the backup from storage; zero means
	// DefaultStorageRetry.
	StorageRetry wait.Backoff
	// MaxEntrySize is the largest archive entry a restore reads (--max-archive-entry-size);
	// 0 means archive.DefaultMaxEntrySize.
	MaxEntrySize int64
}

// DefaultStorageRetry: a backup that cannot be read is tried three times in about 7 seconds
// (each attempt bounded by the storage timeout and the transfer's idle timeout) before the
// restore fails.
var DefaultStorageRetry = wait.Backoff{Duration: 2 * time.Second, Factor: 2, Jitter: 0.1, Steps: 3}

// Request is one restore to run.
type Request struct {
	Restore           *cairnv1.Restore
	OperatorNamespace string
	// Source is the store of the backup's location, and BackupKeys the backup's objects in it.
	Source     storage.ObjectStore
	BackupKeys storage.BackupKeys
	// BackupLocation is the name of the backup's location: its volume data is in that
	// location's repositories.
	BackupLocation string
	// UnverifiedArchive says that the backup's location records no digest of its archives (a
	// Velero location): the archive is read to its end, and checked as a gzip-compressed tar,
	// before anything is created, and the log says it was not verified.
	UnverifiedArchive bool
	// Files is the store the restore's log, results and resource list go to (FilesKeys); nil
	// means nowhere (no ReadWrite location could hold them).
	Files     storage.ObjectStore
	FilesKeys storage.RestoreKeys
	// OnProgress, when set, is told the counts at most once per ProgressInterval while they change.
	OnProgress func(done, total int64)
	// OnNamespaceWait, when set, is told when the restore starts waiting for a terminating
	// target namespace (a message naming it) and when the wait is over ("").
	OnNamespaceWait func(message string)
	// Writer, when set, makes every create, update and patch of the restored items, and the
	// reads of those that exist already (DESIGN.md section 15): a client impersonating the
	// restore's requester, so that the API server applies their RBAC, its escalation checks
	// and admission, as to a kubectl apply of theirs. nil writes with Runner.Dynamic, the
	// operator's own rights (an administrator's restore). A restore in a team's namespace must
	// have one.
	Writer dynamic.Interface
}

// Ending is how a run ended.
type Ending string

const (
	// Finished: every selected item was handled (created, updated, skipped or failed).
	Finished Ending = "Finished"
	// Failed: the run could not go on; Result.FailureReason says why.
	Failed Ending = "Failed"
	// Cancelled: the run stopped on ErrCancelRequested without another storage call; the
	// objects it had created stay. The caller records the cancel and then calls
	// Result.StoreFiles, whose files (resource list, results, log) say so.
	Cancelled Ending = "Cancelled"
	// Interrupted: the run's context ended for another cause (the manager is stopping):
	// nothing more was done.
	Interrupted Ending = "Interrupted"
)

// ErrCancelRequested is the cause to cancel a run's context with when the restore is
// cancelled (spec.cancel or a deletion): the worker pool stops at once, and the run returns
// without a storage call; Result.StoreFiles then writes its files (what it created so far).
var ErrCancelRequested = errors.New("restore cancel requested")

// Result is what a run did.
type Result struct {
	Ending        Ending
	FailureReason string
	ItemsRestored int64
	TotalItems    int64
	// Warnings and Errors are the counts of the run's log.
	Warnings, Errors int32
	// Operations are the async operations the run's actions started: those still running when
	// the run Finished are what the restore waits for (WaitingForPluginOperations); a cancelled
	// or failed run cancelled them.
	Operations []backup.Operation
	// StorageFailure says that the run failed reading its backup from storage (not on a
	// checksum mismatch): its FailureReason may name the location's configuration.
	StorageFailure bool
	// FilesError says why the log, results or resource list could not be stored (nil when they
	// were, or when the request had nowhere to store them). A Cancelled run's is set by
	// StoreFiles.
	FilesError error

	// storeFiles stores a Cancelled run's files (StoreFiles); nil once they were.
	storeFiles func(context.Context) error
}

// StoreFiles stores the files of a Cancelled run (its resource list, results and log, each
// call bounded by the storage timeout) and returns FilesError; it does nothing for any other
// ending, whose files Run stored, or once they were. Run leaves a cancelled run's files to the
// caller so that the cancel is recorded first: a cancel never waits on storage (DESIGN.md
// section 9, like a backup's).
func (res *Result) StoreFiles(ctx context.Context) error {
	if res.storeFiles == nil {
		return res.FilesError
	}
	store := res.storeFiles
	res.storeFiles = nil
	res.FilesError = store(context.WithoutCancel(ctx))
	return res.FilesError
}

// Outcome is what happened to one item.
type Outcome string

// Outcomes of an item, as the resource list records them.
const (
	Created Outcome = "created"
	Updated Outcome = "updated"
	Skipped Outcome = "skipped"
	// FailedItem: the item could not be restored (an error).
	FailedItem Outcome = "failed"
)

// ResourceList is what a restore did to each item: outcome → resource ("configmaps",
// "deployments.apps") → "namespace/name" (or "name" for a cluster-scoped item), as restored.
type ResourceList map[Outcome]map[string][]string

// Messages are warnings or errors, per namespace (as restored) and for cluster-scoped items.
type Messages struct {
	Cluster    []string            `json:"cluster,omitempty"`
	Namespaces map[string][]string `json:"namespaces,omitempty"`
}

// Results are a restore's warnings and errors.
type Results struct {
	Warnings Messages `json:"warnings"`
	Errors   Messages `json:"errors"`
}

// run is one restore in progress.
type run struct {
	*Runner
	// backupOps are the backup's operations (Facts.BackupOperations), read once.
	backupOpsOnce sync.Once
	backupOps     []backup.Operation
	backupOpsErr  error
	// veleroPVBs are a Velero backup's PodVolumeBackups (Facts.VeleroVolumes), read once.
	veleroPVBsOnce sync.Once
	veleroPVBs     []velerofmt.PodVolumeBackup
	veleroPVBsErr  error

	req        Request
	log        *backup.Log
	restore    *cairnv1.Restore
	opts       Options
	team       bool
	spool      *Spool
	resources  map[schema.GroupResource]backup.Resource
	sel        backup.Selection
	status     backup.ResourceFilter
	keepStatus bool
	plan       plan

	total, done atomic.Int64

	mu           sync.Mutex
	list         ResourceList
	results      Results
	restoredPVs  map[string]bool
	restoredCRDs []string
	// handled are the items already restored (or being restored), by itemKey: an additional
	// item an action named is restored once, whichever way it is reached first.
	handled map[string]bool
	// ops are the async operations the actions started.
	ops []backup.Operation
	// snapshots are the backup's VolumeSnapshots and VolumeSnapshotContents (few), which the
	// CSI restore action reads; snapshotOf finds a claim's snapshot.
	snapshots  map[ItemRef]*unstructured.Unstructured
	snapshotOf map[ItemRef]ItemRef
	// snapshotRecords is this cluster's record of the backup's CSI snapshots (tenancy.go).
	snapshotRecords snapshotRecordCache
}

// plan is what the first pass over the spool decided: the facts the selection of
// cluster-scoped items needs.
type plan struct {
	// namespaces are the selected namespaces, as backed up.
	namespaces map[string]bool
	// namespaceObjects are the backed-up namespaces whose Namespace object is restored.
	namespaceObjects map[string]bool
	// neededPVs are the PersistentVolumes that selected PVCs are bound to.
	neededPVs map[string]bool
	// usedResources are the group/resources that selected items belong to (their CRDs are needed).
	usedResources map[schema.GroupResource]bool
	// chosen says, for each group/resource, which of its items (in spool order) are restored:
	// the plan decides once, and the restore's pass over the spool reads the answer instead of
	// decoding every item again.
	chosen map[schema.GroupResource][]bool
}

// itemFacts is the part of an item the selection reads, decoded without the rest.
type itemFacts struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		VolumeName string `json:"volumeName"`
		Group      string `json:"group"`
		Names      struct {
			Plural string `json:"plural"`
		} `json:"names"`
	} `json:"spec"`
}

func (r *Runner) clock() clock.Clock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// Run runs one restore from the start of InProgress to its end: it reads and checks the
// archive, selects the items, waits for terminating target namespaces, creates the items one
// priority group after another (CRDs first, waited on until Established), and stores the log,
// results and resource list. Run never returns an error: how it ended is in the Result.
func (r *Runner) Run(ctx context.Context, req Request) *Result {
	rs := req.Restore
	ru := &run{
		Runner: r, req: req, log: backup.NewLog(), restore: rs,
		team: rs.Namespace != req.OperatorNamespace,
		opts: Options{
			BackupName: rs.Status.BackupName, RestoreName: rs.Name, NamespaceMapping: namespaceMapping(rs.Spec.NamespaceMapping),
			PreserveNodePorts: rs.Spec.ShouldPreserveNodePorts(), RestorePVs: rs.Spec.ShouldRestorePVs(),
		},
		list:        ResourceList{},
		restoredPVs: map[string]bool{},
		handled:     map[string]bool{},
		snapshots:   map[ItemRef]*unstructured.Unstructured{},
		snapshotOf:  map[ItemRef]ItemRef{},
	}
	ru.log.WithField("restore", rs.Namespace+"/"+rs.Name).WithField("backup", rs.Status.BackupName).Info("Restore started")
	stop := backup.ReportProgress(ctx, r.clock(), r.ProgressInterval, ru.counts, req.OnProgress)
	err := errNoRequester
	if !ru.team || req.Writer != nil {
		err = ru.restoreAll(ctx)
	}
	stop()
	if ru.spool != nil {
		ru.spool.Close()
	}
	res := &Result{}
	res.ItemsRestored, res.TotalItems = ru.counts()
	switch {
	case errors.Is(context.Cause(ctx), ErrCancelRequested):
		res.Ending = Cancelled
		ru.log.WithField("itemsRestored", res.ItemsRestored).WithField("totalItems", res.TotalItems).
			Warn("Restore cancelled: the worker pool was stopped; the objects created so far stay")
		// The run's context is over: the operations are cancelled, and later the files
		// written (StoreFiles), on one that only each call's own timeout ends.
		ctx = context.WithoutCancel(ctx)
	case ctx.Err() != nil:
		res.Ending = Interrupted
		return res
	case err != nil:
		res.Ending, res.FailureReason = Failed, err.Error()
		res.StorageFailure = errors.Is(err, errStorage)
		ru.log.Error("Restore failed: " + err.Error())
	default:
		res.Ending = Finished
		ru.log.WithField("itemsRestored", res.ItemsRestored).WithField("totalItems", res.TotalItems).Info("Restore finished")
	}
	if res.Ending != Finished {
		reason := "the restore failed"
		if res.Ending == Cancelled {
			reason = cairnv1.FailureReasonRestoreCancelled
		}
		ru.cancelOperations(ctx, reason)
	}
	res.Operations = ru.ops
	res.Warnings, res.Errors = ru.log.Counts()
	if res.Ending == Cancelled {
		res.storeFiles = ru.putFiles
		return res
	}
	res.FilesError = ru.putFiles(ctx)
	return res
}

// cancelOperations cancels every operation the run started that still runs (each call
// bounded), saying so in the log.
func (ru *run) cancelOperations(ctx context.Context, reason string) {
	now := ru.clock().Now()
	for i, op := range ru.ops {
		if !op.Running() {
			continue
		}
		callCtx, cancel := context.WithTimeout(ctx, backup.OperationCallTimeout)
		ru.ops[i] = backup.Cancel(callCtx, op, ru.actions().Tracker(op.Action, ru.restore), now, reason)
		cancel()
		ru.log.WithField("operation", op.OperationID).WithField("action", op.Action).Info("Operation cancelled: " + ru.ops[i].Error)
	}
}

// namespaceMapping is a restore's spec.namespaceMapping as plain strings.
func namespaceMapping(m map[string]cairnv1.NamespaceName) map[string]string {
	out := make(map[string]string, len(m))
	for from, to := range m {
		out[from] = string(to)
	}
	return out
}

func (ru *run) counts() (done, total int64) { return ru.done.Load(), ru.total.Load() }

// restoreAll is the run, step by step; an error ends it Failed.
func (ru *run) restoreAll(ctx context.Context) error {
	if err := ru.readArchive(ctx); err != nil {
		return err
	}
	if err := ru.selectItems(ctx); err != nil {
		return err
	}
	if err := ru.loadSnapshots(); err != nil {
		return err
	}
	if err := ru.prepareNamespaces(ctx); err != nil {
		return err
	}
	present := make([]schema.GroupResource, 0, len(ru.plan.chosen))
	for gr := range ru.plan.chosen {
		present = append(present, gr)
	}
	priorities := ru.Priorities
	if priorities == nil {
		priorities = DefaultPriorities
	}
	for _, group := range Order(present, namespacesFirst(priorities)) {
		if err := ru.restoreGroup(ctx, group); err != nil {
			return err
		}
		if len(group) == 1 && group[0] == crdsGR {
			ru.waitForCRDs(ctx)
		}
	}
	return nil
}

// namespacesFirst is priorities with namespaces first: a namespace restored from the backup
// must exist before any item in it, whatever --restore-resource-priorities says.
func namespacesFirst(priorities []string) []string {
	out := []string{namespacesGR.Resource}
	for _, p := range priorities {
		if p != namespacesGR.Resource {
			out = append(out, p)
		}
	}
	return out
}

// readArchive reads the commit marker and spools the archive, checked against it. A read that
// fails is tried again (StorageRetry) before the run fails: a restore does not end on one
// dropped connection. A checksum mismatch, an encrypted archive that does not authenticate or a
// scratch directory that fails is not retried.
func (ru *run) readArchive(ctx context.Context) error {
	keys := ru.req.BackupKeys
	backoff := ru.StorageRetry
	if backoff.Steps == 0 {
		backoff = DefaultStorageRetry
	}
	var spool *Spool
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		spool, last = ru.spoolArchive(ctx, keys)
		switch {
		case last == nil:
			return true, nil
		case errors.Is(last, storage.ErrChecksumMismatch), errors.Is(last, ErrScratch), errors.Is(last, errCommitMarker),
			errors.Is(last, storage.ErrNotCommitted), errors.Is(last, archive.ErrEntryTooLarge),
			errors.Is(last, storage.ErrArchiveUnreadable), errors.Is(last, storage.ErrDamaged):
			return false, last
		}
		ru.log.Warn("Reading the backup from storage failed, trying again: " + last.Error())
		return false, nil
	})
	if wait.Interrupted(err) && last != nil && ctx.Err() == nil {
		err = last
	}
	switch {
	case err == nil:
	case errors.Is(err, storage.ErrChecksumMismatch):
		return fmt.Errorf("the archive of backup %s is not the one that was committed, nothing was restored: %w",
			ru.restore.Status.BackupName, err)
	case errors.Is(err, archive.ErrEntryTooLarge):
		// Not the storage's failure, and not worth a retry: the archive itself is refused.
		return fmt.Errorf("the archive of backup %s holds an entry larger than the manager reads (--max-archive-entry-size), nothing was restored: %w",
			ru.restore.Status.BackupName, err)
	case errors.Is(err, storage.ErrArchiveUnreadable):
		// The bytes are what storage holds (or, with no recorded digest, all there is): a
		// retry reads the same damaged archive.
		return fmt.Errorf("the archive of backup %s is damaged or not a gzip-compressed tar, nothing was restored: %w",
			ru.restore.Status.BackupName, err)
	case errors.Is(err, storage.ErrDamaged):
		// An encrypted archive that does not authenticate as the object it is stored as:
		// changed, or moved or copied there from another key (DESIGN.md section 21). Not the
		// storage's failure: the error names the object, for a team too.
		return fmt.Errorf("the archive of backup %s does not decrypt as the object it is stored as, nothing was restored: %w",
			ru.restore.Status.BackupName, err)
	case errors.Is(err, storage.ErrNotCommitted):
		return fmt.Errorf("backup %s is not committed in its storage location (its commit marker is gone): %w", ru.restore.Status.BackupName, err)
	case errors.Is(err, ErrScratch), errors.Is(err, errCommitMarker), ctx.Err() != nil:
		return err
	default:
		return fmt.Errorf("%w: reading backup %s: %w", errStorage, ru.restore.Status.BackupName, err)
	}
	ru.spool = spool
	major, _, _ := strings.Cut(spool.FormatVersion, ".")
	if !slices.Contains(supportedFormatMajors, major) {
		return fmt.Errorf("%w %q (this Cairn reads format 1.x)", errArchiveFormat, spool.FormatVersion)
	}
	for _, p := range spool.Problems {
		ru.log.Error("Archive entry left out: " + p)
	}
	if spool.MoreProblems > 0 {
		ru.log.Errorf("%d more archive entries left out", spool.MoreProblems)
	}
	if spool.VersionedCopies > 0 {
		ru.log.Infof("%d archive entries are copies of items at a named API version (Velero's <version>-preferredversion directories): the items beside them were read instead", spool.VersionedCopies)
	}
	if ru.req.UnverifiedArchive {
		ru.log.WithField("formatVersion", spool.FormatVersion).Warn("Archive read to its end and checked as a gzip-compressed tar, but not verified against a recorded digest: its storage location holds Velero's backups, and Velero records none")
		return nil
	}
	ru.log.WithField("formatVersion", spool.FormatVersion).Info("Archive read and checked against the commit marker")
	return nil
}

// spoolArchive is one attempt to read the commit marker and spool the archive.
func (ru *run) spoolArchive(ctx context.Context, keys storage.BackupKeys) (*Spool, error) {
	var meta storage.BackupMetadata
	err := ru.storageCall(ctx, func(ctx context.Context) error {
		var err error
		meta, err = storage.ReadMetadata(ctx, ru.req.Source, keys)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the commit marker: %w", err)
	}
	if meta.Name != "" && (meta.Name != ru.restore.Status.BackupName || meta.Namespace != ru.restore.Namespace) {
		return nil, fmt.Errorf("%w: the commit marker at %s is of backup %s/%s, not %s/%s", errCommitMarker, keys.Metadata,
			meta.Namespace, meta.Name, ru.restore.Namespace, ru.restore.Status.BackupName)
	}
	want := storage.ArchiveDigest{SHA256: meta.ArchiveSHA256, Size: meta.ArchiveSize, Unverified: ru.req.UnverifiedArchive}
	return NewSpool(ctx, ru.req.Source, keys.Archive, want, ru.ScratchDir, storage.WithMaxEntrySize(ru.MaxEntrySize))
}

// selectItems resolves the filters against the cluster's resources and decides, in one pass over
// the spool, which items are restored.
func (ru *run) selectItems(ctx context.Context) error {
	var lists []*metav1.APIResourceList
	err := backup.RetryTransient(ctx, ru.Retry, func() error {
		var err error
		lists, err = ru.Discovery.ServerPreferredResources()
		if discovery.IsGroupDiscoveryFailedError(err) {
			ru.log.Warn("Some API groups could not be discovered: " + err.Error())
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("discovering the cluster's resources: %w", err)
	}
	served := backup.ResourcesFromDiscovery(lists)
	ru.resources = map[schema.GroupResource]backup.Resource{}
	for _, res := range served {
		ru.resources[res.GroupResource()] = res
	}
	// Resources of the backup the cluster does not serve (yet: their CRD may be in the
	// backup) still have names the filters can use.
	all := served
	for _, gr := range ru.spool.Resources() {
		if _, ok := ru.resources[gr]; !ok {
			res := backup.Resource{GroupVersionResource: gr.WithVersion("")}
			ru.resources[gr] = res
			all = append(all, res)
		}
	}
	f := ru.restore.Spec.Filters()
	sel, warnings, err := backup.NewFilterSelection(ru.restore.Namespace, f, ru.req.OperatorNamespace, all, nil)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		ru.log.Warn(strings.Replace(w, "served by this cluster", "served by this cluster nor in the backup", 1))
	}
	ru.sel = sel
	if rs := ru.restore.Spec.RestoreStatus; rs != nil && len(rs.IncludedResources) > 0 {
		ru.status, _ = backup.NewResourceFilter(rs.IncludedResources, rs.ExcludedResources, all)
		ru.keepStatus = true
	}
	return ru.makePlan()
}

// makePlan is the first pass: namespaced items are decided by the filters alone; then the
// cluster-scoped ones, which with includeClusterResources unset are restored only when a
// selected item needs them (its Namespace, the PV of a PVC, the CRD of a custom resource).
func (ru *run) makePlan() error {
	p := plan{
		namespaces: map[string]bool{}, namespaceObjects: map[string]bool{}, neededPVs: map[string]bool{},
		usedResources: map[schema.GroupResource]bool{}, chosen: map[schema.GroupResource][]bool{},
	}
	ru.plan = p
	var total int64
	for _, namespacedPass := range []bool{true, false} {
		for _, gr := range ru.spool.Resources() {
			if p.chosen[gr] == nil {
				p.chosen[gr] = make([]bool, ru.spool.Count(gr))
			}
			i := -1
			err := ru.spool.Each(gr, func(item SpooledItem) error {
				i++
				if (item.Namespace != "") != namespacedPass || i >= len(p.chosen[gr]) {
					return nil
				}
				facts, ok := ru.decide(gr, item)
				if !ok {
					return nil
				}
				p.chosen[gr][i] = true
				total++
				p.usedResources[gr] = true
				switch {
				case item.Namespace != "":
					p.namespaces[item.Namespace] = true
					if gr == pvcsGR && facts.Spec.VolumeName != "" {
						p.neededPVs[facts.Spec.VolumeName] = true
					}
				case gr == namespacesGR:
					p.namespaceObjects[item.Name] = true
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	for gr := range p.chosen {
		if !slices.Contains(p.chosen[gr], true) {
			delete(p.chosen, gr)
		}
	}
	ru.total.Store(total)
	ru.log.WithField("items", total).WithField("namespaces", len(p.namespaces)).Info("Items selected")
	return nil
}

// decide reports whether item of gr is restored: the backup's Selection, with the facts of
// the plan for cluster-scoped items (decided after every namespaced item, so that those facts
// are complete). The plan records the answers; an additional item is asked again.
func (ru *run) decide(gr schema.GroupResource, item SpooledItem) (itemFacts, bool) {
	var facts itemFacts
	if err := json.Unmarshal(item.Object, &facts); err != nil {
		// Not an object Cairn can read: its labels are unknown. A namespaced one the filters
		// select without labels is left to restoreItem, which records the error.
		return facts, item.Namespace != "" && ru.sel.Includes(ru.resource(gr, true), item.Namespace, item.Name, nil, backup.Listed)
	}
	if item.Namespace != "" {
		return facts, ru.sel.Includes(ru.resource(gr, true), item.Namespace, item.Name, facts.Metadata.Labels, backup.Listed)
	}
	// A cluster-scoped item that a selected item needs is held as an additional item is by a
	// backup: with includeClusterResources unset, only those are restored, and the label
	// selectors do not apply to them.
	src := backup.Listed
	switch gr {
	case namespacesGR:
		if ru.plan.namespaces[item.Name] {
			src = backup.Additional
		}
	case pvsGR:
		if ru.plan.neededPVs[item.Name] {
			src = backup.Additional
		}
	case crdsGR:
		if ru.plan.usedResources[schema.GroupResource{Group: facts.Spec.Group, Resource: facts.Spec.Names.Plural}] {
			src = backup.Additional
		}
	}
	return facts, ru.sel.Includes(ru.resource(gr, false), "", item.Name, facts.Metadata.Labels, src)
}

// resource is gr as the selection knows it, namespaced as its item is placed in the archive.
func (ru *run) resource(gr schema.GroupResource, namespaced bool) backup.Resource {
	res := ru.resources[gr]
	res.GroupVersionResource = gr.WithVersion(res.Version)
	res.Namespaced = namespaced
	return res
}

// prepareNamespaces makes every target namespace ready before any item is created: a
// namespace still terminating is waited for (bounded by NamespaceTimeout); a missing one is
// created, unless its Namespace object is restored from the backup (in its priority group).
func (ru *run) prepareNamespaces(ctx context.Context) error {
	targets := map[string]string{} // target → backed-up namespace
	for ns := range ru.plan.namespaces {
		targets[ru.restore.Spec.MapNamespace(ns)] = ns
	}
	names := make([]string, 0, len(targets))
	for t := range targets {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, target := range names {
		if ru.team && target != ru.restore.Namespace {
			return fmt.Errorf("a restore in namespace %s may only restore into its own namespace, not %s", ru.restore.Namespace, target)
		}
		gone, err := ru.waitForNamespace(ctx, target)
		if err != nil {
			return err
		}
		if !gone || ru.plan.namespaceObjects[targets[target]] {
			continue
		}
		if ru.team {
			return fmt.Errorf("namespace %s does not exist", target)
		}
		ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": target}}}
		ns.SetLabels(map[string]string{
			cairnv1.BackupNameLabel:  backup.LabelValue(ru.opts.BackupName),
			cairnv1.RestoreNameLabel: backup.LabelValue(ru.opts.RestoreName),
		})
		err = backup.RetryTransient(ctx, ru.Retry, func() error {
			_, err := ru.Dynamic.Resource(namespaceGVR).Create(ctx, ns, metav1.CreateOptions{})
			return err
		})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", target, err)
		}
		ru.log.WithField("namespace", target).Info("Namespace created")
	}
	return nil
}

// waitForNamespace waits while the namespace is terminating; gone says whether it does not
// exist (any more).
func (ru *run) waitForNamespace(ctx context.Context, name string) (gone bool, err error) {
	timeout := ru.NamespaceTimeout
	if timeout <= 0 {
		timeout = DefaultNamespaceTimeout
	}
	deadline := ru.clock().Now().Add(timeout)
	waiting := false
	defer func() {
		// Only a wait that ended well says the namespaces are ready; a timeout leaves the
		// condition saying what it waited for.
		if waiting && err == nil && ru.req.OnNamespaceWait != nil {
			ru.req.OnNamespaceWait("")
		}
	}()
	for {
		var ns *unstructured.Unstructured
		err := backup.RetryTransient(ctx, ru.Retry, func() error {
			var err error
			ns, err = ru.Dynamic.Resource(namespaceGVR).Get(ctx, name, metav1.GetOptions{})
			return err
		})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, fmt.Errorf("reading namespace %s: %w", name, err)
		case ns.GetDeletionTimestamp() == nil:
			return false, nil
		}
		if !ru.clock().Now().Before(deadline) {
			return false, fmt.Errorf("namespace %s was still terminating after %s: nothing can be restored into it", name, timeout)
		}
		if !waiting {
			waiting = true
			msg := fmt.Sprintf("waiting for namespace %s to finish terminating (at most %s)", name, timeout)
			ru.log.WithField("namespace", name).Info("Waiting for the namespace to finish terminating")
			if ru.req.OnNamespaceWait != nil {
				ru.req.OnNamespaceWait(msg)
			}
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-ru.clock().After(waitInterval):
		}
	}
}

// job is one item for a worker.
type job struct {
	gr   schema.GroupResource
	item SpooledItem
}

// restoreGroup restores the selected items of one priority group in parallel on the
// restore's own worker pool.
func (ru *run) restoreGroup(ctx context.Context, group []schema.GroupResource) error {
	workers := ru.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	g, gctx := errgroup.WithContext(ctx)
	jobs := make(chan job, workers)
	g.Go(func() error {
		defer close(jobs)
		for _, gr := range group {
			chosen, i := ru.plan.chosen[gr], -1
			err := ru.spool.Each(gr, func(item SpooledItem) error {
				if i++; i >= len(chosen) || !chosen[i] {
					return nil
				}
				select {
				case jobs <- job{gr: gr, item: item}:
					return nil
				case <-gctx.Done():
					return gctx.Err()
				}
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	for range workers {
		g.Go(func() error {
			for j := range jobs {
				if gctx.Err() != nil {
					return gctx.Err()
				}
				ru.restoreItem(gctx, j.gr, j.item)
			}
			return nil
		})
	}
	return g.Wait()
}

// restoreItem restores one item and records what happened to it, once: an item an action
// already had restored as an additional item is not restored again.
func (ru *run) restoreItem(ctx context.Context, gr schema.GroupResource, item SpooledItem) {
	if !ru.claim(ItemRef{GR: gr, Namespace: item.Namespace, Name: item.Name}) {
		return
	}
	defer ru.done.Add(1)
	target := ru.restore.Spec.MapNamespace(item.Namespace)
	if item.Namespace == "" {
		target = ""
	}
	ref := describe(gr, target, item.Name)
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(item.Object); err != nil {
		ru.record(gr, target, item.Name, FailedItem, fmt.Sprintf("%s: not a valid object in the backup: %v", ref, err))
		return
	}
	if err := ru.verifyItem(gr, item, obj); err != nil {
		ru.record(gr, target, item.Name, FailedItem, "refused: "+err.Error())
		return
	}
	if reason := SkipReason(gr, obj); reason != "" {
		ru.record(gr, target, item.Name, Skipped, "")
		ru.log.WithField("item", ref).Info("Skipped: " + reason)
		return
	}
	opts := ru.opts
	opts.KeepStatus = ru.keepStatus && ru.status.Includes(gr)
	desired := Prepare(obj, opts)
	if gr == namespacesGR {
		desired.SetName(ru.restore.Spec.MapNamespace(item.Name))
		target, ref = "", describe(gr, "", desired.GetName())
	}
	if err := ru.teamMayWrite(gr, target, desired); err != nil {
		ru.record(gr, target, desired.GetName(), FailedItem, "refused: "+err.Error())
		return
	}
	desired, started, ok := ru.executeActions(ctx, gr, target, ref, ActionInput{Item: desired, Original: obj, Options: opts, Facts: ru.facts()})
	if !ok {
		return
	}
	if err := ru.teamMayWrite(gr, target, desired); err != nil {
		ru.abandon(ctx, started, "the item was refused")
		ru.record(gr, target, desired.GetName(), FailedItem, "refused: "+err.Error())
		return
	}
	outcome, created, warning, err := ru.apply(ctx, gr, target, desired, opts.KeepStatus)
	ru.keepOperations(ctx, target, ref, started, outcome, created, err)
	switch {
	case err != nil && ctx.Err() != nil:
		// Cancelled (or stopping) while the create was on its way: it may have been made.
		ru.record(gr, target, desired.GetName(), Skipped, fmt.Sprintf("%s: the restore stopped while it was being created: it may exist", ref))
		return
	case err != nil:
		ru.record(gr, target, desired.GetName(), FailedItem, fmt.Sprintf("%s: %v", ref, err))
	default:
		ru.record(gr, target, desired.GetName(), outcome, warning)
		if warning == "" {
			ru.log.WithField("item", ref).Debug("Restored: " + string(outcome))
		}
	}
	// A PV or CRD counts as restored when it now is what the backup holds: created, updated,
	// or there already and identical (a Retain PV that outlived its claim).
	if err == nil && (outcome == Created || outcome == Updated || (outcome == Skipped && warning == "")) {
		ru.mu.Lock()
		switch gr {
		case pvsGR:
			ru.restoredPVs[desired.GetName()] = true
		case crdsGR:
			ru.restoredCRDs = append(ru.restoredCRDs, desired.GetName())
		}
		ru.mu.Unlock()
	}
}

// itemKey names an item as backed up, for handled.
func itemKey(ref ItemRef) string { return ref.GR.String() + "/" + ref.Namespace + "/" + ref.Name }

// claim reports whether ref is not restored yet, and marks it.
func (ru *run) claim(ref ItemRef) bool {
	key := itemKey(ref)
	ru.mu.Lock()
	defer ru.mu.Unlock()
	if ru.handled[key] {
		return false
	}
	ru.handled[key] = true
	return true
}

// abandon cancels the operations an item's actions started when the item is not restored.
func (ru *run) abandon(ctx context.Context, ops []backup.Operation, reason string) {
	now := ru.clock().Now()
	for _, op := range ops {
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backup.OperationCallTimeout)
		op = backup.Cancel(callCtx, op, ru.actions().Tracker(op.Action, ru.restore), now, reason)
		cancel()
		ru.log.WithField("operation", op.OperationID).WithField("action", op.Action).Info("Operation cancelled: " + op.Error)
	}
}

// restoreAdditional restores an item an action named, before the item that needs it, when the
// backup holds it and the filters let it through as an additional item (label selectors do
// not apply to those).
func (ru *run) restoreAdditional(ctx context.Context, ref ItemRef) {
	var found *SpooledItem
	err := ru.spool.Each(ref.GR, func(item SpooledItem) error {
		if item.Namespace == ref.Namespace && item.Name == ref.Name {
			found = &item
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		ru.log.WithField("item", ref.String()).Warn("Additional item could not be read: " + err.Error())
		return
	}
	if found == nil {
		ru.log.WithField("item", ref.String()).Info("Additional item is not in the backup")
		return
	}
	var facts itemFacts
	_ = json.Unmarshal(found.Object, &facts)
	if !ru.sel.Includes(ru.resource(ref.GR, ref.Namespace != ""), ref.Namespace, ref.Name, facts.Metadata.Labels, backup.Additional) {
		return
	}
	if _, selected := ru.decide(ref.GR, *found); !selected {
		ru.total.Add(1) // not counted by the plan
	}
	ru.restoreItem(ctx, ref.GR, *found)
}

// identityHolds reports whether item is what its place in the archive says (verifyItem); the
// refusal itself is recorded by restoreItem.
func (ru *run) identityHolds(gr schema.GroupResource, item SpooledItem, obj *unstructured.Unstructured) bool {
	return ru.verifyItem(gr, item, obj) == nil
}

// errFound ends a search of the spool.
var errFound = errors.New("found")

// loadSnapshots keeps the backup's VolumeSnapshots and VolumeSnapshotContents in memory (one
// of each per snapshotted claim), indexed by the claim each one was taken of.
func (ru *run) loadSnapshots() error {
	for _, gr := range []schema.GroupResource{volumeSnapshotsGR, volumeSnapshotContentsGR} {
		err := ru.spool.Each(gr, func(item SpooledItem) error {
			// One that does not decode is left out here; restoreItem records it.
			obj, ok := decodeItem(item.Object)
			if !ok || !ru.identityHolds(gr, item, obj) {
				return nil // restoreItem records it, if it is selected
			}
			ref := ItemRef{GR: gr, Namespace: item.Namespace, Name: item.Name}
			ru.snapshots[ref] = obj
			if claim, _, _ := unstructured.NestedString(obj.Object, "spec", "source", "persistentVolumeClaimName"); gr == volumeSnapshotsGR && claim != "" {
				ru.snapshotOf[ItemRef{GR: pvcsGR, Namespace: item.Namespace, Name: claim}] = ref
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeItem decodes a spooled item's object.
func decodeItem(data []byte) (*unstructured.Unstructured, bool) {
	obj := &unstructured.Unstructured{}
	return obj, obj.UnmarshalJSON(data) == nil
}

// backedUp answers Facts.BackedUp for the items the run keeps in memory (the snapshots).
func (ru *run) backedUp(ref ItemRef) *unstructured.Unstructured { return ru.snapshots[ref] }

// backupOperations answers Facts.BackupOperations: the backup's operations file, read once
// (bounded by the storage timeout); a backup that started none has none.
func (ru *run) backupOperations(ctx context.Context) ([]backup.Operation, error) {
	ru.backupOpsOnce.Do(func() {
		ru.backupOpsErr = ru.storageCall(ctx, func(ctx context.Context) (err error) {
			ru.backupOps, err = backup.ReadOperations(ctx, ru.req.Source, ru.req.BackupKeys.ItemOperations)
			if errors.Is(err, storage.ErrNotFound) {
				return nil
			}
			return err
		})
	})
	return ru.backupOps, ru.backupOpsErr
}

// veleroVolumes answers Facts.VeleroVolumes from the Velero backup's PodVolumeBackups file,
// read once (bounded by the storage timeout); a backup without one copied no volume.
func (ru *run) veleroVolumes(ctx context.Context, namespace, pod string) ([]velerofmt.PodVolumeBackup, error) {
	ru.veleroPVBsOnce.Do(func() {
		keys := ru.req.BackupKeys
		key := path.Join(keys.Dir, ru.restore.Status.BackupName+velerofmt.PodVolumeBackupsSuffix)
		ru.veleroPVBsErr = ru.storageCall(ctx, func(ctx context.Context) error {
			rc, err := ru.req.Source.Get(ctx, key)
			if errors.Is(err, storage.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			defer rc.Close()
			ru.veleroPVBs, err = velerofmt.ReadPodVolumeBackups(rc, key)
			return err
		})
	})
	if ru.veleroPVBsErr != nil {
		return nil, fmt.Errorf("reading Velero's record of the backup's pod volumes: %w", ru.veleroPVBsErr)
	}
	return velerofmt.CopiedVolumes(ru.veleroPVBs, namespace, pod), nil
}

// snapshotOfClaim answers Facts.SnapshotOf: the backup's VolumeSnapshot of the claim
// (namespace and name as backed up) and its VolumeSnapshotContent, or nils.
func (ru *run) snapshotOfClaim(namespace, claim string) (vs, vsc *unstructured.Unstructured) {
	ref, ok := ru.snapshotOf[ItemRef{GR: pvcsGR, Namespace: namespace, Name: claim}]
	if !ok {
		return nil, nil
	}
	vs = ru.snapshots[ref]
	content, _, _ := unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
	if content == "" {
		return vs, nil
	}
	return vs, ru.snapshots[ItemRef{GR: volumeSnapshotContentsGR, Name: content}]
}

func (ru *run) actions() *Actions {
	if ru.Actions == nil {
		ru.mu.Lock()
		defer ru.mu.Unlock()
		if ru.Actions == nil {
			ru.Actions = NewActions()
		}
	}
	return ru.Actions
}

func (ru *run) pvRestored(name string) bool {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	return ru.restoredPVs[name]
}

// apply creates desired, or handles the object that exists already by the restore's
// existingResourcePolicy. created is the object the create answered (nil when the object
// existed already); warning, when not empty, is logged as a warning.
func (ru *run) apply(ctx context.Context, gr schema.GroupResource, namespace string, desired *unstructured.Unstructured, keepStatus bool) (Outcome, *unstructured.Unstructured, string, error) {
	gv, err := schema.ParseGroupVersion(desired.GetAPIVersion())
	if err != nil || gv.Group != gr.Group || gv.Version == "" {
		return FailedItem, nil, "", fmt.Errorf("apiVersion %q does not belong to resource %s", desired.GetAPIVersion(), gr)
	}
	var ri dynamic.ResourceInterface = ru.writer().Resource(gr.WithVersion(gv.Version))
	if namespace != "" {
		ri = ru.writer().Resource(gr.WithVersion(gv.Version)).Namespace(namespace)
	}
	status, hasStatus := desired.Object["status"]
	var created *unstructured.Unstructured
	err = backup.RetryTransient(ctx, ru.Retry, func() error {
		var err error
		created, err = ri.Create(ctx, desired, metav1.CreateOptions{})
		return err
	})
	if apierrors.IsAlreadyExists(err) {
		outcome, warning, err := ru.applyExisting(ctx, ri, gr, desired)
		return outcome, nil, warning, err
	}
	if err != nil {
		return FailedItem, nil, "", fmt.Errorf("creating: %w", err)
	}
	if keepStatus && hasStatus {
		created.Object["status"] = status
		err := backup.RetryTransient(ctx, ru.Retry, func() error {
			_, err := ri.UpdateStatus(ctx, created, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return Created, created, fmt.Sprintf("%s: created, but its status could not be restored: %v", describe(gr, namespace, desired.GetName()), err), nil
		}
	}
	return Created, created, "", nil
}

// writer is the client the restored items are written with: the requester's (Request.Writer)
// or, for an administrator's restore, the operator's.
func (ru *run) writer() dynamic.Interface {
	if ru.req.Writer != nil {
		return ru.req.Writer
	}
	return ru.Dynamic
}

// applyExisting handles an object that exists already: a ServiceAccount gets the backed-up
// secrets and labels merged in; an identical object is skipped; a different one is a warning
// (existingResourcePolicy none) or merge-patched (update).
func (ru *run) applyExisting(ctx context.Context, ri dynamic.ResourceInterface, gr schema.GroupResource, desired *unstructured.Unstructured) (Outcome, string, error) {
	ref := describe(gr, desired.GetNamespace(), desired.GetName())
	var existing *unstructured.Unstructured
	err := backup.RetryTransient(ctx, ru.Retry, func() error {
		var err error
		existing, err = ri.Get(ctx, desired.GetName(), metav1.GetOptions{})
		return err
	})
	if err != nil {
		return FailedItem, "", fmt.Errorf("exists already, and reading it failed: %w", err)
	}
	if gr == runServiceAccountsGR {
		merged, changed := MergeServiceAccount(existing, desired)
		if !changed {
			return Skipped, "", nil
		}
		err := backup.RetryTransient(ctx, ru.Retry, func() error {
			_, err := ri.Update(ctx, merged, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return Skipped, fmt.Sprintf("%s: exists already, and merging the backed-up one into it failed: %v", ref, err), nil
		}
		return Updated, "", nil
	}
	if gr == pvsGR && ReleasedToItsClaim(existing, desired) {
		err := backup.RetryTransient(ctx, ru.Retry, func() error {
			_, err := ri.Patch(ctx, desired.GetName(), types.MergePatchType, RebindPatch, metav1.PatchOptions{})
			return err
		})
		if err != nil {
			return Skipped, fmt.Sprintf("%s: Released by its deleted claim; freeing it for the restored claim failed: %v", ref, err), nil
		}
		ru.log.WithField("item", ref).Info("Released by its deleted claim: freed for the restored claim, which binds to it again")
		return Updated, "", nil
	}
	if Matches(desired, existing) {
		return Skipped, "", nil
	}
	differences := strings.Join(Differences(desired, existing), ", ")
	if ru.restore.Spec.GetExistingResourcePolicy() != cairnv1.ExistingResourcePolicyUpdate {
		return Skipped, fmt.Sprintf("%s: exists already and differs from the backup (%s): not changed (existingResourcePolicy none)", ref, differences), nil
	}
	patch, err := UpdatePatch(desired)
	if err != nil {
		return Skipped, fmt.Sprintf("%s: exists already and differs (%s); building the update failed: %v", ref, differences, err), nil
	}
	err = backup.RetryTransient(ctx, ru.Retry, func() error {
		_, err := ri.Patch(ctx, desired.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return Skipped, fmt.Sprintf("%s: exists already and differs (%s); updating it failed: %v", ref, differences, err), nil
	}
	return Updated, "", nil
}

// waitForCRDs waits until every CRD the restore created or found is Established, so that its
// custom resources can be created; one that is not within CRDTimeout is an error of the
// restore, and its custom resources fail on their own.
func (ru *run) waitForCRDs(ctx context.Context) {
	timeout := ru.CRDTimeout
	if timeout <= 0 {
		timeout = DefaultCRDTimeout
	}
	ru.mu.Lock()
	names := append([]string(nil), ru.restoredCRDs...)
	ru.mu.Unlock()
	sort.Strings(names)
	deadline := ru.clock().Now().Add(timeout)
	for _, name := range names {
		for {
			crd, err := ru.Dynamic.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err == nil && established(crd) {
				ru.log.WithField("crd", name).Info("CustomResourceDefinition is Established")
				break
			}
			if ctx.Err() != nil {
				return
			}
			if !ru.clock().Now().Before(deadline) {
				ru.log.WithField("crd", name).Errorf("CustomResourceDefinition was not Established within %s: its custom resources may fail", timeout)
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-ru.clock().After(waitInterval / 4):
			}
		}
	}
}

// established reports whether a CRD's Established condition is True.
func established(crd *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conditions {
		m, ok := c.(map[string]any)
		if ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// record writes what happened to one item into the resource list, and a message (when not
// empty) into the log and the results: an error for a failed item, a warning otherwise.
func (ru *run) record(gr schema.GroupResource, namespace, name string, outcome Outcome, message string) {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	byResource := ru.list[outcome]
	if byResource == nil {
		byResource = map[string][]string{}
		ru.list[outcome] = byResource
	}
	key := gr.Resource
	if gr.Group != "" {
		key += "." + gr.Group
	}
	entry := name
	if namespace != "" {
		entry = namespace + "/" + name
	}
	byResource[key] = append(byResource[key], entry)
	if message == "" {
		return
	}
	ru.messageLocked(namespace, describe(gr, namespace, name), outcome == FailedItem, message)
}

// message logs a warning (or an error) of the item ref in namespace and adds it to the results.
func (ru *run) message(namespace, ref string, isError bool, message string) {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	ru.messageLocked(namespace, ref, isError, message)
}

func (ru *run) messageLocked(namespace, ref string, isError bool, message string) {
	messages := &ru.results.Warnings
	entryLog := ru.log.WithField("item", ref)
	if isError {
		messages = &ru.results.Errors
		entryLog.Error(message)
	} else {
		entryLog.Warn(message)
	}
	messages.add(namespace, message)
}

func (m *Messages) add(namespace, message string) {
	if namespace == "" {
		m.Cluster = append(m.Cluster, message)
		return
	}
	if m.Namespaces == nil {
		m.Namespaces = map[string][]string{}
	}
	m.Namespaces[namespace] = append(m.Namespaces[namespace], message)
}

// describe names an item in messages: "configmaps shop/settings", "persistentvolumes pv-1".
func describe(gr schema.GroupResource, namespace, name string) string {
	if namespace == "" {
		return gr.String() + " " + name
	}
	return gr.String() + " " + namespace + "/" + name
}

// putFiles stores the restore's resource list, results and log, each call bounded.
func (ru *run) putFiles(ctx context.Context) error {
	if ru.req.Files == nil {
		return nil
	}
	ru.mu.Lock()
	for _, byResource := range ru.list {
		for _, entries := range byResource {
			sort.Strings(entries)
		}
	}
	objects := []struct {
		key   string
		value any
	}{{ru.req.FilesKeys.ResourceList, ru.list}, {ru.req.FilesKeys.Results, ru.results}}
	var datas [][]byte
	for _, o := range objects {
		data, err := backup.GzipJSON(o.value)
		if err != nil {
			ru.mu.Unlock()
			return err
		}
		datas = append(datas, data)
	}
	ru.mu.Unlock()
	logData, err := ru.log.Gzipped()
	if err != nil {
		return err
	}
	keys := []string{objects[0].key, objects[1].key, ru.req.FilesKeys.Logs}
	datas = append(datas, logData)
	if len(ru.ops) > 0 {
		// The operations go first: a restore waiting for them must find them after a restart.
		key := ru.req.FilesKeys.ItemOperations
		if err := ru.storageCall(ctx, func(ctx context.Context) error { return backup.PutOperations(ctx, ru.req.Files, key, ru.ops) }); err != nil {
			return fmt.Errorf("storing %s: %w", key, err)
		}
	}
	for i, key := range keys {
		data := datas[i]
		if err := ru.storageCall(ctx, func(ctx context.Context) error { return ru.req.Files.Put(ctx, key, bytes.NewReader(data)) }); err != nil {
			return fmt.Errorf("storing %s: %w", key, err)
		}
	}
	return nil
}

// storageCall runs one small storage call bounded by the storage timeout.
func (ru *run) storageCall(ctx context.Context, f func(context.Context) error) error {
	return backup.StorageCall(ctx, ru.StorageTimeout, f)
}
