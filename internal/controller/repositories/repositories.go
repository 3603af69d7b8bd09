// Package repositories is the manager's side of the volume repositories (DESIGN.md section
// 16): it deletes the snapshots of deleted backups and runs each repository's maintenance on
// a schedule. Both go through the blob proxy's Locks, like the node agents' copies: a snapshot
// is deleted under a session, and maintenance holds its repository alone, so it may run
// without kopia's safety margins and give space back at once (internal/blobproxy says why).
package repositories

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kopia/kopia/repo/blob"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/blobproxy"
	"github.com/cairn-backup/cairn/internal/metrics"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/repository"
)

// Defaults of the maintenance schedule.
const (
	DefaultMaintenanceInterval = time.Hour
	DefaultMaintenanceTimeout  = 30 * time.Minute
)

// Service deletes snapshots and maintains repositories, in the manager.
type Service struct {
	// Client lists PodVolumeBackups (cached) and Reader reads locations and the password
	// Secret.
	Client    client.Client
	Reader    client.Reader
	Namespace string
	Locks     *blobproxy.Locks
	Backends  blobproxy.Backends
	Passwords *podvolume.Passwords
	// Interval is the time between maintenance runs; Timeout bounds one repository's run,
	// including the wait for its copies to end.
	Interval, Timeout time.Duration

	// preparing serialises Prepare per repository.
	preparing sync.Map // repository key → *sync.Mutex
}

// Prepare makes a repository ready for copies into it: its password exists, and the
// repository is initialised, by this process and one call at a time (two clients initialising
// a repository at once can leave it unreadable, so node agents never do). Its error says why a
// location cannot take volume data: the backup's copies are not started, and it names the
// cause in the backup's log.
func (s *Service) Prepare(ctx context.Context, ref cairnv1.RepositoryReference) error {
	mu, _ := s.preparing.LoadOrStore(ref.Key(), &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if _, err := s.Passwords.Ensure(ctx, ref); err != nil {
		return err
	}
	exists, err := s.exists(ctx, ref)
	if err != nil {
		return fmt.Errorf("the volume repository of location %s for namespace %s cannot be reached: %w", ref.StorageLocation, ref.Namespace, err)
	}
	if exists {
		return nil
	}
	_, closeRepo, err := s.open(ctx, ref, true)
	if err != nil {
		return fmt.Errorf("creating the volume repository of location %s for namespace %s: %w", ref.StorageLocation, ref.Namespace, err)
	}
	closeRepo()
	return nil
}

// open opens a repository in this process, under a session of the Locks (refreshed while it
// is open). close releases both.
func (s *Service) open(ctx context.Context, ref cairnv1.RepositoryReference, session bool) (*repository.Repository, func(), error) {
	key := blobproxy.RepositoryKey(ref.StorageLocation, ref.Namespace)
	var stopSession func()
	if session {
		sess, err := s.Locks.Open(key)
		if err != nil {
			return nil, nil, err
		}
		stopSession = s.keepAlive(key, sess)
	}
	fail := func(err error) (*repository.Repository, func(), error) {
		if stopSession != nil {
			stopSession()
		}
		return nil, nil, err
	}
	st, readOnly, err := s.Backends.Open(ctx, ref.StorageLocation, ref.Namespace)
	if err != nil {
		return fail(err)
	}
	closeStorage := func() { _ = st.Close(context.WithoutCancel(ctx)) }
	if readOnly {
		closeStorage()
		return fail(fmt.Errorf("storage location %s is ReadOnly", ref.StorageLocation))
	}
	password, err := s.Passwords.Get(ctx, ref)
	if err != nil {
		closeStorage()
		return fail(err)
	}
	dir, err := os.MkdirTemp("", "cairn-repository-")
	if err != nil {
		closeStorage()
		return fail(err)
	}
	r, err := repository.Open(ctx, repository.Options{Storage: st, Password: password, Hostname: "cairn", Username: "manager", ConfigDir: dir})
	if err != nil {
		closeStorage()
		_ = os.RemoveAll(dir)
		return fail(fmt.Errorf("opening the volume repository of location %s for namespace %s: %w", ref.StorageLocation, ref.Namespace, err))
	}
	return r, func() {
		_ = r.Close()
		closeStorage()
		_ = os.RemoveAll(dir)
		if stopSession != nil {
			stopSession()
		}
	}, nil
}

// keepAlive refreshes a session until the returned func closes it.
func (s *Service) keepAlive(key string, sess blobproxy.Session) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(max(sess.TTL/3, time.Second))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = s.Locks.Refresh(key, sess.ID)
			}
		}
	}()
	return func() {
		close(done)
		s.Locks.Close(key, sess.ID)
	}
}

// Readable says whether a restore can read a repository here: its password is known. A second
// cluster restoring from the first one's storage needs the first one's password Secret. The
// password of a Velero repository is the one its location names (VeleroPassword), kept in the
// password Secret for the node agents.
func (s *Service) Readable(ctx context.Context, ref cairnv1.RepositoryReference) error {
	var bsl cairnv1.BackupStorageLocation
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: ref.StorageLocation}, &bsl)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading storage location %s: %w", ref.StorageLocation, err)
	}
	if err == nil && bsl.Spec.Format == cairnv1.LocationFormatVelero {
		password, err := s.VeleroPassword(ctx, &bsl)
		if err != nil {
			return fmt.Errorf("the password of Velero's repository for namespace %s is not known: %w", ref.Namespace, err)
		}
		return s.Passwords.CopyVelero(ctx, ref, password)
	}
	if _, err := s.Passwords.Get(ctx, ref); err != nil {
		if errors.Is(err, podvolume.ErrNoPassword) {
			return fmt.Errorf("%w: copy it from the cluster that made the backup (docs/volumes.md)", err)
		}
		return err
	}
	return nil
}

// VeleroPassword reads the password of the Velero location bsl's kopia repositories from the
// Secret its spec.velero.repositoryPasswordSecretRef names.
func (s *Service) VeleroPassword(ctx context.Context, bsl *cairnv1.BackupStorageLocation) (string, error) {
	if bsl.Spec.Velero == nil || bsl.Spec.Velero.RepositoryPasswordSecretRef == nil {
		return "", fmt.Errorf("storage location %s has no spec.velero.repositoryPasswordSecretRef (Velero keeps the password in its Secret velero-repo-credentials, key repository-password; its default is static-passw0rd; docs/migrating-from-velero.md)", bsl.Name)
	}
	ref := bsl.Spec.Velero.RepositoryPasswordSecretRef
	var secret corev1.Secret
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: bsl.Namespace, Name: ref.Name}, &secret)
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("the Secret %s/%s that storage location %s names for it does not exist", bsl.Namespace, ref.Name, bsl.Name)
	}
	if err != nil {
		return "", fmt.Errorf("reading the Secret %s/%s that storage location %s names for it: %w", bsl.Namespace, ref.Name, bsl.Name, err)
	}
	password := secret.Data[ref.Key]
	if len(password) == 0 {
		return "", fmt.Errorf("the Secret %s/%s that storage location %s names for it has no key %s", bsl.Namespace, ref.Name, bsl.Name, ref.Key)
	}
	return string(password), nil
}

// DeleteSnapshots deletes volume snapshots from their repositories. A snapshot already gone
// is not an error; any other failure is, and the caller retries (a repository under
// maintenance refuses sessions for a while). The space comes back at the next maintenance.
func (s *Service) DeleteSnapshots(ctx context.Context, snapshots []podvolume.Snapshot) error {
	byRepo := map[cairnv1.RepositoryReference][]string{}
	for _, snap := range snapshots {
		if !slices.Contains(byRepo[snap.Repository], snap.SnapshotID) {
			byRepo[snap.Repository] = append(byRepo[snap.Repository], snap.SnapshotID)
		}
	}
	var errs []error
	for ref, ids := range byRepo {
		if err := s.deleteFrom(ctx, ref, ids); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Service) deleteFrom(ctx context.Context, ref cairnv1.RepositoryReference, ids []string) error {
	r, closeRepo, err := s.open(ctx, ref, true)
	if err != nil {
		return fmt.Errorf("deleting volume snapshots: %w", err)
	}
	defer closeRepo()
	have, err := r.Snapshots(ctx, nil)
	if err != nil {
		return fmt.Errorf("listing the snapshots of repository %s: %w", ref.Key(), err)
	}
	for _, id := range ids {
		if !slices.Contains(have, id) {
			continue
		}
		if err := r.Delete(ctx, id); err != nil {
			return fmt.Errorf("deleting volume snapshot %s from repository %s: %w", id, ref.Key(), err)
		}
	}
	return nil
}

// NeedLeaderElection: maintenance runs in the leader, whose proxy holds the Locks.
func (s *Service) NeedLeaderElection() bool { return true }

// Start runs maintenance every Interval until ctx ends.
func (s *Service) Start(ctx context.Context) error {
	interval := s.Interval
	if interval <= 0 {
		interval = DefaultMaintenanceInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.MaintainAll(ctx)
		}
	}
}

// MaintainAll runs full maintenance on every repository this cluster made (the keys of the
// password Secret) whose location is ReadWrite and that no copy is writing; each run is
// bounded by Timeout. Failures are logged: the next run tries again.
func (s *Service) MaintainAll(ctx context.Context) {
	log := ctrl.Log.WithName("repositories")
	refs, err := s.repositories(ctx)
	if err != nil {
		log.Error(err, "Cannot list the volume repositories to maintain")
		return
	}
	for _, ref := range refs {
		skip, err := s.skipMaintenance(ctx, ref)
		switch {
		case err != nil:
			log.Error(err, "Cannot decide whether to maintain a volume repository", "repository", ref.Key())
			continue
		case skip != "":
			log.V(1).Info("Not maintaining a volume repository", "repository", ref.Key(), "reason", skip)
			continue
		}
		if err := s.Maintain(ctx, ref); err != nil {
			log.Error(err, "Volume repository maintenance failed", "repository", ref.Key())
			continue
		}
	}
}

// repositories are the repositories that have a password here.
func (s *Service) repositories(ctx context.Context) ([]cairnv1.RepositoryReference, error) {
	var secret corev1.Secret
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Passwords.Secret}, &secret)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var refs []cairnv1.RepositoryReference
	for key := range secret.Data {
		loc, ns, ok := strings.Cut(key, "_")
		if ok && loc != "" && ns != "" {
			refs = append(refs, cairnv1.RepositoryReference{StorageLocation: loc, Namespace: ns})
		}
	}
	slices.SortFunc(refs, func(a, b cairnv1.RepositoryReference) int { return strings.Compare(a.Key(), b.Key()) })
	return refs, nil
}

// skipMaintenance says why a repository is not maintained now: its location is gone or
// ReadOnly (never maintained: another cluster may write it), or a copy into it has not ended
// (the Locks would make maintenance wait for it anyway; this spares the wait).
func (s *Service) skipMaintenance(ctx context.Context, ref cairnv1.RepositoryReference) (string, error) {
	var bsl cairnv1.BackupStorageLocation
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: ref.StorageLocation}, &bsl)
	if apierrors.IsNotFound(err) {
		return "its storage location does not exist", nil
	}
	if err != nil {
		return "", err
	}
	if bsl.Spec.AccessMode == cairnv1.AccessModeReadOnly {
		return "its storage location is ReadOnly", nil
	}
	var pvbs cairnv1.PodVolumeBackupList
	if err := s.Client.List(ctx, &pvbs, client.InNamespace(s.Namespace),
		client.MatchingLabels{cairnv1.PodVolumeRepositoryLabel: labelValue(ref)}); err != nil {
		return "", err
	}
	for _, p := range pvbs.Items {
		if !p.Status.Phase.IsTerminal() && p.Spec.Repository == ref {
			return "copy " + p.Name + " into it has not ended", nil
		}
	}
	return "", nil
}

// Maintain runs full maintenance on one repository, holding it alone, bounded by Timeout,
// and records its size after.
func (s *Service) Maintain(ctx context.Context, ref cairnv1.RepositoryReference) error {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultMaintenanceTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	release, err := s.Locks.Maintain(ctx, blobproxy.RepositoryKey(ref.StorageLocation, ref.Namespace))
	if err != nil {
		return fmt.Errorf("waiting for the copies into the repository to end: %w", err)
	}
	defer release()
	if exists, err := s.exists(ctx, ref); err != nil || !exists {
		return err // nothing was ever copied into it: nothing to maintain, and nothing to create
	}
	r, closeRepo, err := s.open(ctx, ref, false)
	if err != nil {
		return err
	}
	defer closeRepo()
	started := time.Now()
	if err := r.Maintain(ctx, true, true); err != nil {
		return err
	}
	size, err := s.size(ctx, ref)
	if err != nil {
		return err
	}
	metrics.RepositorySize(ref.StorageLocation, ref.Namespace, size)
	ctrl.Log.WithName("repositories").Info("Maintained a volume repository", "repository", ref.Key(), "bytes", size, "took", time.Since(started).String())
	return nil
}

// exists reports whether the repository was ever initialised.
func (s *Service) exists(ctx context.Context, ref cairnv1.RepositoryReference) (bool, error) {
	st, _, err := s.Backends.Open(ctx, ref.StorageLocation, ref.Namespace)
	if err != nil {
		return false, err
	}
	defer func() { _ = st.Close(context.WithoutCancel(ctx)) }()
	return repository.Exists(ctx, st)
}

// labelValue is the repository label of its PodVolumeBackups.
func labelValue(ref cairnv1.RepositoryReference) string { return backup.LabelValue(ref.Key()) }

// size sums the sizes of the repository's blobs.
func (s *Service) size(ctx context.Context, ref cairnv1.RepositoryReference) (int64, error) {
	st, _, err := s.Backends.Open(ctx, ref.StorageLocation, ref.Namespace)
	if err != nil {
		return 0, err
	}
	defer func() { _ = st.Close(context.WithoutCancel(ctx)) }()
	var total int64
	err = st.ListBlobs(ctx, "", func(m blob.Metadata) error {
		total += m.Length
		return nil
	})
	return total, err
}

// Proxy serves the blob proxy (internal/blobproxy) to the node agents: in the leader only,
// which holds the Locks; a replica that does not lead does not listen, and the agents' clients
// retry until the Service reaches the leader.
type Proxy struct {
	// Addr is the address to listen on, such as ":8445".
	Addr    string
	Handler http.Handler
	// Ready, when set, is closed once the proxy listens (tests).
	Ready chan struct{}
	// Close, when set, runs once the server has shut down (blobproxy.Server.Close).
	Close func()
	// TLS, when set, gives the server's TLS configuration as it starts (blobproxy.ServingTLS),
	// and the proxy serves HTTPS only; nil serves plain HTTP (tests).
	TLS func(ctx context.Context) (*tls.Config, error)
}

// NeedLeaderElection: see Proxy.
func (p *Proxy) NeedLeaderElection() bool { return true }

// Start listens until ctx ends, then shuts the server down, giving requests in flight a few
// seconds.
func (p *Proxy) Start(ctx context.Context) error {
	var tlsConfig *tls.Config
	if p.TLS != nil {
		var err error
		if tlsConfig, err = p.TLS(ctx); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return fmt.Errorf("the repository server cannot listen on %s: %w", p.Addr, err)
	}
	if tlsConfig != nil {
		// A plain HTTP request is answered 400 by the TLS layer, and never reaches the handler.
		ln = tls.NewListener(ln, tlsConfig)
	}
	srv := &http.Server{Handler: p.Handler, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig}
	if p.Ready != nil {
		close(p.Ready)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if p.Close != nil {
		p.Close()
	}
	return nil
}

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update,namespace=cairn-system
// +kubebuilder:rbac:groups=cairn.dev,resources=podvolumebackups;podvolumerestores,verbs=get;list;watch;create;update;patch;delete;deletecollection,namespace=cairn-system
// A backup lists every namespaced kind of the namespaces it takes, these too (none live outside
// the operator's namespace): read everywhere, as the other cairn.dev kinds are.
// +kubebuilder:rbac:groups=cairn.dev,resources=podvolumebackups;podvolumerestores,verbs=get;list
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
