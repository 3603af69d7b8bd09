// Package download holds the reconciler that answers DownloadRequests (DESIGN.md section 12)
// and the download server it signs URLs for (internal/download).
package download

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/download"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/requester"
	"github.com/cairn-backup/cairn/internal/storage"
)

// DefaultRequestTTL is how long a download URL works; the request is deleted then.
const DefaultRequestTTL = 10 * time.Minute

// downloadRequestWorkers is how many requests are answered at once: each answer is a few API
// reads and one storage call.
const downloadRequestWorkers = 4

// Reconciler answers DownloadRequests (DESIGN.md sections 12 and 21) and owns all their
// phases. A New request for a file of a backup or restore in its own namespace gets a URL that
// reads that one file until status.expiration, on the manager's download server, for every
// location: verified there against its backup's commit marker, and served only to the
// request's requester where the operator acts for them. A request it cannot answer
// (no such backup or restore in the request's namespace, no such file) is Failed with a
// message. Answered and failed requests are deleted at their expiration, woken exactly then.
//
// A request names only a name: the file is always looked up in the request's own namespace,
// so a request in namespace A never yields a URL for namespace B's files.
type Reconciler struct {
	client.Client
	// Namespace is the operator's namespace, which holds the storage locations.
	Namespace string
	Clock     clock.Clock
	// Signer signs URLs for the download server at DownloadBase; nil when the manager runs no
	// download server, and then requests for filesystem locations fail.
	Signer       *download.Signer
	DownloadBase string
	// TTL is how long a URL works; 0 means DefaultRequestTTL.
	TTL time.Duration
	// Requesters says whom a request acts for: a file is handed out only to a requester who
	// may read what it holds (DESIGN.md section 15); nil answers with the operator's own
	// rights everywhere (tests of other behaviour).
	Requesters *requester.Resolver
	Stores     stores.Stores
}

// downloadAction is what the reconciler does with a request.
type downloadAction string

const (
	downloadAnswer downloadAction = "Answer"
	downloadWait   downloadAction = "Wait"
	downloadDelete downloadAction = "Delete"
)

// decideDownloadRequest says what to do with a request created at created, at now: answer a
// new one, delete an answered one whose expiration has passed, or wait for it. A request still
// unanswered ttl after it was created (its storage kept failing) is deleted too, so that
// requests against a hung location do not pile up.
func decideDownloadRequest(status cairnv1.DownloadRequestStatus, created time.Time, ttl time.Duration, now time.Time) (downloadAction, time.Duration) {
	switch {
	case (status.Phase == "" || status.Phase == cairnv1.DownloadRequestPhaseNew) && !created.IsZero() && !now.Before(created.Add(ttl)):
		return downloadDelete, 0
	case status.Phase == "" || status.Phase == cairnv1.DownloadRequestPhaseNew:
		return downloadAnswer, 0
	case status.Expiration == nil || !now.Before(status.Expiration.Time):
		return downloadDelete, 0
	}
	return downloadWait, status.Expiration.Sub(now)
}

// downloadKey is the object key of a target's file in a location with layout: the target's
// name is always taken in namespace, the request's own. known is false for a kind this
// manager does not know.
func downloadKey(layout storage.Layout, namespace string, target cairnv1.DownloadTarget) (key string, known bool) {
	b := layout.Backup(namespace, target.Name)
	r := layout.Restore(namespace, target.Name)
	switch target.Kind {
	case cairnv1.DownloadTargetBackupLog:
		return b.Logs, true
	case cairnv1.DownloadTargetBackupContents:
		return b.Archive, true
	case cairnv1.DownloadTargetBackupResults:
		return b.Results, true
	case cairnv1.DownloadTargetBackupResourceList:
		return b.ResourceList, true
	case cairnv1.DownloadTargetBackupItemOperations:
		return b.ItemOperations, true
	case cairnv1.DownloadTargetRestoreLog:
		return r.Logs, true
	case cairnv1.DownloadTargetRestoreResults:
		return r.Results, true
	case cairnv1.DownloadTargetRestoreResourceList:
		return r.ResourceList, true
	}
	return "", false
}

// +kubebuilder:rbac:groups=cairn.dev,resources=downloadrequests,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=cairn.dev,resources=downloadrequests/status,verbs=get;patch
// +kubebuilder:rbac:groups=cairn.dev,resources=backups;restores,verbs=get;list;watch
// +kubebuilder:rbac:groups=cairn.dev,resources=backupstoragelocations,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch,namespace=cairn-system

// Reconcile answers one request, or deletes it when it has expired.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var dr cairnv1.DownloadRequest
	if err := r.Get(ctx, req.NamespacedName, &dr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := r.Clock.Now()
	action, after := decideDownloadRequest(dr.Status, dr.CreationTimestamp.Time, r.ttl(), now)
	switch action {
	case downloadWait:
		return ctrl.Result{RequeueAfter: after}, nil
	case downloadDelete:
		return ctrl.Result{}, client.IgnoreNotFound(r.Delete(ctx, &dr, client.Preconditions{UID: &dr.UID}))
	}
	ttl := r.ttl()
	expiration := metav1.NewTime(now.Add(ttl).Truncate(time.Second))
	url, failure, err := r.answer(ctx, &dr, expiration.Time)
	if err != nil {
		return ctrl.Result{}, err
	}
	old := dr.DeepCopy()
	dr.Status = cairnv1.DownloadRequestStatus{Phase: cairnv1.DownloadRequestPhaseProcessed, DownloadURL: url, Expiration: &expiration}
	if failure != "" {
		dr.Status = cairnv1.DownloadRequestStatus{Phase: cairnv1.DownloadRequestPhaseFailed, Message: failure, Expiration: &expiration}
	}
	if err := r.Status().Patch(ctx, &dr, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Answered a download request", "phase", dr.Status.Phase, "message", failure)
	return ctrl.Result{RequeueAfter: expiration.Sub(now)}, nil
}

func (r *Reconciler) ttl() time.Duration {
	if r.TTL <= 0 {
		return DefaultRequestTTL
	}
	return r.TTL
}

// answer returns the URL of the request's file, valid until expires, or why there is none
// (failure); err is a passing fault, retried. Every URL is the manager's download server's
// (DESIGN.md section 21): it names the digest the file must have (its backup's commit marker's)
// and, where the operator acts for the requester, the requester, whom alone it serves. No
// location hands out a presigned URL: one would serve anybody who saw it, unverified.
func (r *Reconciler) answer(ctx context.Context, dr *cairnv1.DownloadRequest, expires time.Time) (url, failure string, err error) {
	target := dr.Spec.Target
	locationName, b, failure, err := r.targetLocation(ctx, dr.Namespace, target)
	if failure != "" || err != nil {
		return "", failure, err
	}
	var locations cairnv1.BackupStorageLocationList
	if err := r.List(ctx, &locations, client.InNamespace(r.Namespace)); err != nil {
		return "", "", err
	}
	bsl, err := location.Resolve(locations.Items, r.Namespace, locationName)
	if errors.Is(err, location.ErrMissing) {
		return "", fmt.Sprintf("the storage location of %s %s does not exist", targetNoun(target.Kind), target.Name), nil
	}
	if err != nil {
		return "", "", err
	}
	if bsl.Status.Phase == cairnv1.StorageLocationPhaseUnavailable {
		// Fail at once rather than wait on a storage call that would time out.
		return "", fmt.Sprintf("storage location %s is unavailable: ask an administrator to check it", bsl.Name), nil
	}
	if r.Signer == nil {
		return "", fmt.Sprintf("the files of storage location %s are served by the manager's download server, and the manager runs none (--download-bind-address=0)", bsl.Name), nil
	}
	store, err := r.Stores.Open(ctx, bsl)
	if errors.Is(err, location.ErrConfig) {
		return "", fmt.Sprintf("storage location %s cannot be used: ask an administrator to check it", bsl.Name), nil
	}
	if err != nil {
		return "", "", err
	}
	key, known := downloadKey(store.Layout, dr.Namespace, target)
	if !known {
		return "", fmt.Sprintf("unknown target kind %q", target.Kind), nil
	}
	var digest *download.Digest
	if b != nil {
		if digest, failure, err = r.backupFileDigest(ctx, store, b, key, bsl.Name); failure != "" || err != nil {
			return "", failure, err
		}
	}
	actAs, refusal, err := r.requesterRefusal(ctx, dr, store)
	if refusal != "" || err != nil {
		return "", refusal, err
	}
	var exists bool
	if err := r.Stores.Call(ctx, func(ctx context.Context) (err error) { exists, err = store.Exists(ctx, key); return err }); err != nil {
		return "", "", err
	}
	if !exists {
		return "", fmt.Sprintf("%s %s has no %s file in storage location %s", targetNoun(target.Kind), target.Name, target.Kind, bsl.Name), nil
	}
	// Decrypted (an encrypted location), or read in Cairn's shape (a Velero one), by the
	// download server as it streams: keys and credentials never leave the cluster.
	obj := download.Object{Location: bsl.Name, Key: key, Expires: expires, Digest: digest, Requester: urlRequester(actAs)}
	return r.Signer.URL(r.DownloadBase, obj), "", nil
}

// urlRequester is whom a URL serves: the requester the operator acts for, nil where it acts
// with its own rights (the operator's namespace), whose URLs serve whoever holds them.
func urlRequester(actAs *authenticationv1.UserInfo) *download.Requester {
	if actAs == nil {
		return nil
	}
	return &download.Requester{Username: actAs.Username, UID: actAs.UID}
}

// backupFileDigest checks that the files stored under backup b's name are b's own (its commit
// marker names it, or, for a backup that never committed, it ran here), and returns the digest
// the marker records of the file at key: nil when it records none (no marker, or one written
// before it recorded the file).
func (r *Reconciler) backupFileDigest(ctx context.Context, store *location.Store, b *cairnv1.Backup, key, locationName string) (*download.Digest, string, error) {
	keys := store.Layout.Backup(b.Namespace, b.Name)
	var marker storage.BackupMetadata
	committed := true
	err := r.Stores.Call(ctx, func(ctx context.Context) (err error) {
		marker, err = storage.ReadMetadata(ctx, store, keys)
		if errors.Is(err, storage.ErrNotCommitted) {
			committed, err = false, nil
		}
		return err
	})
	if errors.Is(err, storage.ErrBadMetadata) {
		return nil, fmt.Sprintf("the data of backup %s in storage location %s is not this backup's", b.Name, locationName), nil
	}
	if err != nil {
		return nil, "", err
	}
	if refusal := backupFilesRefusal(b, committed, marker.UID); refusal != "" {
		return nil, refusal, nil
	}
	d, ok := marker.DigestOf(keys, key)
	if !committed || !ok {
		return nil, "", nil
	}
	return &download.Digest{SHA256: d.SHA256, Size: d.Size}, "", nil
}

// requesterRefusal says why dr's requester may not have its file ("" when they may), and whom
// the operator acts for (nil: itself): logs,
// results and lists only to someone who may get the Backup or Restore, a backup's contents only
// to someone who may also get every kind of object they hold, in every namespace they hold it
// (from the backup's resource list). In the operator's namespace the operator answers with its
// own rights, unless the requester rule applies everywhere.
func (r *Reconciler) requesterRefusal(ctx context.Context, dr *cairnv1.DownloadRequest, store *location.Store) (*authenticationv1.UserInfo, string, error) {
	actAs, why, err := r.Requesters.For(ctx, dr)
	if err != nil || why != "" || actAs == nil {
		return actAs, why, err
	}
	refusal, err := r.requesterMayNot(ctx, dr, store, *actAs)
	return actAs, refusal, err
}

// requesterMayNot says why actAs may not have dr's file ("" when they may).
func (r *Reconciler) requesterMayNot(ctx context.Context, dr *cairnv1.DownloadRequest, store *location.Store, actAs authenticationv1.UserInfo) (string, error) {
	target := dr.Spec.Target
	kind := "backups"
	if target.Kind.IsRestoreFile() {
		kind = "restores"
	}
	ok, reason, err := r.Requesters.May(ctx, actAs, authorizationv1.ResourceAttributes{
		Namespace: dr.Namespace, Verb: "get", Group: cairnv1.GroupVersion.Group, Resource: kind, Name: target.Name})
	if err != nil {
		return "", err
	}
	if !ok {
		return fmt.Sprintf("%s may not get %s %s in namespace %s (%s)", actAs.Username, targetNoun(target.Kind), target.Name, dr.Namespace, reason), nil
	}
	if target.Kind != cairnv1.DownloadTargetBackupContents {
		return "", nil
	}
	var list map[string][]string
	var unreadable error
	key := store.Layout.Backup(dr.Namespace, target.Name).ResourceList
	err = r.Stores.Call(ctx, func(ctx context.Context) error {
		rc, err := store.Get(ctx, key)
		if err != nil {
			return err
		}
		defer rc.Close()
		// Not the storage's failure, and no retry mends it: the file is not a resource list.
		unreadable = storage.DecodeGzipJSON(rc, key, 0, &list)
		return nil
	})
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return fmt.Sprintf("backup %s has no resource list, which says what its contents hold: they are not handed out", target.Name), nil
	case err != nil:
		return "", err
	case unreadable != nil:
		// A malformed resource list is the request's failure, written into its status; retrying
		// would not mend it.
		return unreadableListRefusal(target.Name, unreadable), nil //nolint:nilerr // see above
	}
	denied, err := r.Requesters.ReadAll(ctx, actAs, list)
	if denied != "" {
		return "a backup's contents are handed out only to someone who may get every kind of object they hold: " + denied, err
	}
	return "", err
}

// unreadableListRefusal is why a backup's contents are not handed out when its resource list
// cannot be read: not a passing fault, so the request fails rather than being retried.
func unreadableListRefusal(backupName string, cause error) string {
	return fmt.Sprintf("backup %s's resource list, which says what its contents hold, cannot be read (%v): they are not handed out", backupName, cause)
}

// targetLocation finds the storage location that holds the target's files: the one its
// backup was queued for, or the one its restore wrote to; for a backup's file, the Backup too.
// The target is looked up in namespace, the request's own, only.
func (r *Reconciler) targetLocation(ctx context.Context, namespace string, target cairnv1.DownloadTarget) (name string, b *cairnv1.Backup, failure string, err error) {
	if target.Kind.IsRestoreFile() {
		var rs cairnv1.Restore
		err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: target.Name}, &rs)
		if apierrors.IsNotFound(err) {
			return "", nil, fmt.Sprintf("restore %s does not exist in namespace %s", target.Name, namespace), nil
		}
		if err != nil {
			return "", nil, "", err
		}
		if rs.Status.StorageLocation == "" {
			return "", nil, fmt.Sprintf("restore %s has stored no files (phase %s)", target.Name, rs.EffectivePhase()), nil
		}
		return rs.Status.StorageLocation, nil, "", nil
	}
	b = &cairnv1.Backup{}
	err = r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: target.Name}, b)
	if apierrors.IsNotFound(err) {
		return "", nil, fmt.Sprintf("backup %s does not exist in namespace %s", target.Name, namespace), nil
	}
	if err != nil {
		return "", nil, "", err
	}
	return b.Status.StorageLocation, b, "", nil
}

// backupFilesRefusal says why the files stored under backup b's name may not be handed out
// ("" when they may): they must be b's own. A committed backup's marker names the Backup object
// that wrote it (for a backup made by sync, status.originUID); a backup without a marker
// (failed, cancelled) must have run in this cluster. Without this, a Backup made by hand under
// the name of data that is not its own — another cluster's in a shared bucket, or one the sync
// refused — would read that data through its name.
func backupFilesRefusal(b *cairnv1.Backup, committed bool, markerUID string) string {
	switch {
	case b.IsSyncPending():
		return fmt.Sprintf("backup %s is not synced from storage yet", b.Name)
	case committed && markerUID != backupsync.DataUID(b):
		return fmt.Sprintf("the data stored under backup %s's name belongs to another Backup object (UID %s), so it is not handed out", b.Name, markerUID)
	case !committed && (b.Status.StartTimestamp == nil || b.Annotations[cairnv1.SyncedFromAnnotation] != ""):
		return fmt.Sprintf("backup %s has stored no files of its own (phase %s)", b.Name, b.EffectivePhase())
	}
	return ""
}

func targetNoun(kind cairnv1.DownloadTargetKind) string {
	if kind.IsRestoreFile() {
		return "restore"
	}
	return "backup"
}

// SetupWithManager registers the reconciler for DownloadRequests.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return lifecycle.Register("downloadrequest", ctrl.NewControllerManagedBy(mgr).
		For(&cairnv1.DownloadRequest{}).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: downloadRequestWorkers}),
		r)
}
