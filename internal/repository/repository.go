// Package repository is Cairn's volume-data repository: a deduplicating, compressing,
// encrypting store of directory snapshots kept in a storage location, built on kopia
// (github.com/kopia/kopia) used as a Go library.
//
// Why kopia: its repository format is the one Velero, Kasten and others use; it does
// content-defined chunking (so an unchanged or slightly changed volume uploads almost
// nothing), client-side authenticated encryption, compression, and it is safe to
// maintain while other clients write. This package wraps the few calls Cairn needs
// (open or initialise, snapshot a directory, restore, delete, maintain) and fixes the
// settings that keep it predictable; see docs/design/kopia.md for the pitfalls.
//
// Memory knobs (the node agent must stay small): pbkdf2 key derivation instead of
// scrypt (about 64 MiB per open), 10 MiB packs (the minimum), no content or metadata
// cache on disk (the committed index is held on the heap, which grows with the number
// of contents in the repository), 1-2 upload workers, no parallel upload of single
// large files, no size estimation walk, zstd-fastest compression.
//
// Retention: a keep-everything global policy is stored at initialisation and every
// snapshot is pinned, so kopia's own retention (run at upload checkpoints) never
// deletes a snapshot; Cairn decides what to delete.
//
// Callers must run at most one Maintain per repository at a time, across all
// processes and hosts: kopia's maintenance lock is local to one config file.
package repository

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kopia/kopia/fs/localfs"
	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/content"
	"github.com/kopia/kopia/repo/encryption"
	"github.com/kopia/kopia/repo/format"
	"github.com/kopia/kopia/repo/hashing"
	"github.com/kopia/kopia/repo/maintenance"
	"github.com/kopia/kopia/repo/manifest"
	"github.com/kopia/kopia/repo/splitter"
	"github.com/kopia/kopia/snapshot"
	"github.com/kopia/kopia/snapshot/policy"
	"github.com/kopia/kopia/snapshot/restore"
	"github.com/kopia/kopia/snapshot/snapshotfs"
	"github.com/kopia/kopia/snapshot/snapshotmaintenance"
	"github.com/kopia/kopia/snapshot/upload"

	"github.com/cairn-backup/cairn/internal/confined"
)

// ErrWrongPassword is wrapped by Open's error when the password does not decrypt the repository.
var ErrWrongPassword = errors.New("wrong repository password")

const (
	keyDerivation   = "pbkdf2-sha256-600000"
	packSize        = 10 << 20
	compressor      = "zstd-fastest"
	pinName         = "cairn"
	uploadWorkers   = 2
	restoreWorkers  = 2
	progressEvery   = time.Second
	configFileName  = "repository.config"
	maintenanceName = "cairn-maintenance"
	// initialiseWait bounds the wait for another client's initialisation of a repository.
	initialiseWait = 30 * time.Second
)

// Options say which repository to open and as whom.
type Options struct {
	// Storage is where the repository lives. Open reconnects through its ConnectionInfo,
	// so its type must be registered with kopia's blob registry (the filesystem and S3
	// backends register themselves on import).
	Storage blob.Storage
	// Password encrypts the repository.
	Password string
	// Hostname and Username identify this client in the repository (sessions, maintenance owner).
	Hostname, Username string
	// ConfigDir is a private directory (0700) for kopia's local config file, held while open;
	// one per open Repository. The password is never written there.
	ConfigDir string
	// ReadOnly opens the repository for reading only (restores): nothing is written to its
	// storage, which may be a ReadOnly location.
	ReadOnly bool
	// MustExist refuses to initialise a missing repository (ErrNotInitialized): only one
	// process may initialise a repository, since two initialising it at once can leave its
	// format and its blob configuration written by different clients, and it unreadable.
	MustExist bool
}

// ErrNotInitialized is wrapped by Open's error when the repository does not exist and
// Options.MustExist forbids creating it.
var ErrNotInitialized = errors.New("the repository does not exist")

// Repository is an open repository. Its methods may be called concurrently, except Maintain
// (see the package comment) and Close.
type Repository struct {
	rep        repo.Repository
	configFile string
	owner      string
	closeOnce  sync.Once
	// fatal holds the first error kopia reported through OnFatalError (by default it
	// would exit the process); every later operation returns it.
	fatal *atomic.Pointer[error]
}

// Progress is what Snapshot reports while it runs.
type Progress struct {
	HashedBytes   int64 // bytes of file content read and hashed so far
	UploadedBytes int64 // bytes written to storage so far
}

// Result describes a saved snapshot.
type Result struct {
	ID            string // manifest ID of the snapshot
	Parent        string // ID of the snapshot it was based on, "" if none
	Bytes         int64  // total size of the files in the snapshot
	Files         int64  // number of files in the snapshot
	UploadedBytes int64  // bytes written to storage by this snapshot
}

// Exists reports whether st holds a repository (one was ever initialised there).
func Exists(ctx context.Context, st blob.Storage) (bool, error) {
	_, err := st.GetMetadata(ctx, format.KopiaRepositoryBlobID)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, blob.ErrBlobNotFound):
		return false, nil
	}
	return false, fmt.Errorf("probing repository: %w", err)
}

// Open opens the repository in opt.Storage, initialising it first if it has never been
// (then the client opening it becomes the maintenance owner). A wrong password gives an
// error wrapping ErrWrongPassword.
func Open(ctx context.Context, opt Options) (*Repository, error) {
	if opt.Storage == nil || opt.Password == "" || opt.Hostname == "" || opt.Username == "" || opt.ConfigDir == "" {
		return nil, errors.New("repository: Storage, Password, Hostname, Username and ConfigDir are required")
	}

	created := false

	if _, err := opt.Storage.GetMetadata(ctx, format.KopiaRepositoryBlobID); err != nil {
		if !errors.Is(err, blob.ErrBlobNotFound) {
			return nil, fmt.Errorf("probing repository: %w", err)
		}
		if opt.MustExist {
			return nil, ErrNotInitialized
		}

		// Another client may have initialised it meanwhile: then it also sets it up. Or it
		// may be initialising it right now (kopia checks, then writes its format blobs):
		// through a storage that refuses to recreate them, only one of the two writes them,
		// and the other waits for the format blob to open what that one made.
		switch err := repo.Initialize(ctx, createOnly{opt.Storage}, newRepositoryOptions(), opt.Password); {
		case err == nil:
			created = true
		case errors.Is(err, repo.ErrAlreadyInitialized):
		default:
			if werr := waitInitialised(ctx, opt.Storage); werr != nil {
				return nil, fmt.Errorf("initialising repository: %w", err)
			}
		}
	}

	if err := os.MkdirAll(opt.ConfigDir, 0o700); err != nil {
		return nil, fmt.Errorf("config dir: %w", err)
	}

	cfg := filepath.Join(opt.ConfigDir, configFileName)
	ci := opt.Storage.ConnectionInfo()
	lc := repo.LocalConfig{
		Storage: &ci,
		Caching: &content.CachingOptions{},
		ClientOptions: repo.ClientOptions{
			Hostname: opt.Hostname,
			Username: opt.Username,
			ReadOnly: opt.ReadOnly,
		},
	}

	b, err := json.Marshal(&lc)
	if err != nil {
		return nil, fmt.Errorf("encoding config: %w", err)
	}

	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		return nil, fmt.Errorf("writing config: %w", err)
	}

	fatal := &atomic.Pointer[error]{}

	rep, err := repo.Open(ctx, cfg, opt.Password, &repo.Options{
		OnFatalError:         func(err error) { fatal.CompareAndSwap(nil, &err) },
		DoNotWaitForUpgrade:  true,
		DisableRepositoryLog: true,
	})
	if err == nil {
		if f := fatal.Load(); f != nil {
			_ = rep.Close(ctx)
			err = *f
		}
	}

	if err != nil {
		removeConfig(cfg)

		if errors.Is(err, repo.ErrInvalidPassword) {
			return nil, fmt.Errorf("opening repository: %w", errors.Join(ErrWrongPassword, err))
		}

		return nil, fmt.Errorf("opening repository: %w", err)
	}

	r := &Repository{rep: rep, configFile: cfg, owner: opt.Username + "@" + opt.Hostname, fatal: fatal}

	if created {
		if err := r.setup(ctx); err != nil {
			_ = r.Close()
			return nil, err
		}
	}

	return r, nil
}

// createOnly is a storage whose writes never replace a blob (DoNotRecreate), where the
// storage can refuse that (Cairn's blob proxy does, for every writer of a repository); others
// write as usual. Initialize writes through it, so that of two clients initialising one
// repository at once, one fails, rather than each writing a format blob the other cannot read.
type createOnly struct{ blob.Storage }

func (s createOnly) PutBlob(ctx context.Context, id blob.ID, data blob.Bytes, opts blob.PutOptions) error {
	opts.DoNotRecreate = true
	err := s.Storage.PutBlob(ctx, id, data, opts)
	if errors.Is(err, blob.ErrUnsupportedPutBlobOption) {
		opts.DoNotRecreate = false
		err = s.Storage.PutBlob(ctx, id, data, opts)
	}
	return err
}

// waitInitialised waits, a little, for another client's initialisation of the repository in st
// to write its format blob.
func waitInitialised(ctx context.Context, st blob.Storage) error {
	ctx, cancel := context.WithTimeout(ctx, initialiseWait)
	defer cancel()
	for {
		_, err := st.GetMetadata(ctx, format.KopiaRepositoryBlobID)
		if err == nil || !errors.Is(err, blob.ErrBlobNotFound) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func newRepositoryOptions() *repo.NewRepositoryOptions {
	return &repo.NewRepositoryOptions{
		BlockFormat: format.ContentFormat{
			Hash:              hashing.DefaultAlgorithm,
			Encryption:        encryption.DefaultAlgorithm,
			MutableParameters: format.MutableParameters{MaxPackSize: packSize},
		},
		ObjectFormat:                      format.ObjectFormat{Splitter: splitter.DefaultAlgorithm},
		FormatBlockKeyDerivationAlgorithm: keyDerivation,
	}
}

// setup stores the keep-everything global policy and the maintenance owner in a new repository.
func (r *Repository) setup(ctx context.Context) error {
	return repo.WriteSession(ctx, r.rep, repo.WriteSessionOptions{Purpose: "cairn-setup"},
		func(ctx context.Context, w repo.RepositoryWriter) error {
			if err := policy.SetPolicy(ctx, w, policy.GlobalPolicySourceInfo, snapshotPolicy()); err != nil {
				return fmt.Errorf("setting global policy: %w", err)
			}

			p := maintenance.DefaultParams()
			p.Owner = r.owner

			if err := maintenance.SetParams(ctx, w, &p); err != nil {
				return fmt.Errorf("setting maintenance owner: %w", err)
			}

			return nil
		})
}

// snapshotPolicy is the default policy with everything kept, zstd-fastest compression and
// no parallel upload of single files.
func snapshotPolicy() *policy.Policy {
	p := *policy.DefaultPolicy
	keep := policy.OptionalInt(math.MaxInt32)
	p.RetentionPolicy = policy.RetentionPolicy{
		KeepLatest: &keep, KeepHourly: &keep, KeepDaily: &keep,
		KeepWeekly: &keep, KeepMonthly: &keep, KeepAnnual: &keep,
	}
	p.CompressionPolicy = policy.CompressionPolicy{CompressorName: compressor}
	workers := policy.OptionalInt(uploadWorkers)
	never := policy.OptionalInt64(math.MaxInt64)
	p.UploadPolicy = policy.UploadPolicy{MaxParallelFileReads: &workers, ParallelUploadAboveSize: &never}

	return &p
}

// Close closes the repository and removes the local config file.
func (r *Repository) Close() error {
	var err error

	r.closeOnce.Do(func() {
		err = r.rep.Close(context.Background())
		removeConfig(r.configFile)
	})

	return err
}

func removeConfig(cfg string) {
	_ = os.Remove(cfg)
	_ = os.Remove(cfg + ".mlock")
}

// failed is the fatal error kopia reported, if any.
func (r *Repository) failed() error {
	if f := r.fatal.Load(); f != nil {
		return fmt.Errorf("repository failed: %w", *f)
	}

	return nil
}

// reservedTags are labels kopia sets on every snapshot manifest itself.
var reservedTags = []string{"type", "hostname", "username", "path"}

// Snapshot uploads the directory dir as a new snapshot tagged with tags. The latest earlier
// complete snapshot with the same tags is its parent, so unchanged files are not read again.
// progress, if not nil, is called at most once a second. When ctx ends, the upload stops and
// ctx's error is returned; nothing is saved.
func (r *Repository) Snapshot(ctx context.Context, dir string, tags map[string]string, progress func(Progress)) (Result, error) {
	if err := r.failed(); err != nil {
		return Result{}, err
	}

	for _, k := range reservedTags {
		if _, ok := tags[k]; ok {
			return Result{}, fmt.Errorf("tag %q is reserved", k)
		}
	}

	abs, err := filepath.Abs(dir)
	if err != nil {
		return Result{}, err
	}

	root, err := localfs.Directory(abs)
	if err != nil {
		return Result{}, fmt.Errorf("reading %s: %w", dir, err)
	}

	parent, err := r.latest(ctx, tags)
	if err != nil {
		return Result{}, err
	}

	pr := &uploadProgress{report: progress}
	src := sourceFor(r.rep.ClientOptions(), tags)

	// The uploader saves checkpoint manifests of long uploads (every 45 minutes); they
	// protect the data already uploaded from maintenance while the upload runs, and are
	// removed when it ends, whether it succeeded or not.
	defer r.removeIncomplete(context.WithoutCancel(ctx), src)

	var res Result

	err = repo.WriteSession(ctx, r.rep, repo.WriteSessionOptions{Purpose: "cairn-snapshot", OnUpload: pr.uploaded},
		func(ctx context.Context, w repo.RepositoryWriter) error {
			u := upload.NewUploader(w)
			u.ParallelUploads = uploadWorkers
			u.DisableIgnoreRules = true
			u.Progress = pr

			stop := make(chan struct{})
			defer close(stop)

			go func() {
				select {
				case <-ctx.Done():
					u.Cancel()
				case <-stop:
				}
			}()

			var prev []*snapshot.Manifest
			if parent != nil {
				prev = []*snapshot.Manifest{parent}
			}

			man, err := u.Upload(ctx, root, policy.BuildTree(nil, snapshotPolicy()), src, prev...)
			if err != nil {
				return fmt.Errorf("uploading %s: %w", dir, err)
			}

			if err := ctx.Err(); err != nil {
				return err
			}

			if man.IncompleteReason != "" {
				return fmt.Errorf("upload of %s incomplete: %s", dir, man.IncompleteReason)
			}

			if n := man.Stats.ErrorCount; n > 0 {
				return fmt.Errorf("upload of %s: %d entries could not be read", dir, n)
			}

			man.Tags = maps.Clone(tags)
			man.Pins = []string{pinName}

			id, err := snapshot.SaveSnapshot(ctx, w, man)
			if err != nil {
				return fmt.Errorf("saving snapshot: %w", err)
			}

			res = Result{ID: string(id)}
			if man.RootEntry != nil && man.RootEntry.DirSummary != nil {
				// Stats count only the files hashed this time; the summary counts them all.
				res.Bytes = man.RootEntry.DirSummary.TotalFileSize
				res.Files = man.RootEntry.DirSummary.TotalFileCount
			}
			if parent != nil {
				res.Parent = string(parent.ID)
			}

			return nil
		})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return Result{}, ctxErr
		}

		return Result{}, err
	}

	res.UploadedBytes = pr.uploadedBytes.Load()

	return res, nil
}

// removeIncomplete deletes the incomplete (checkpoint) manifests of src. Errors are ignored:
// what is left is removed after the next snapshot of src.
func (r *Repository) removeIncomplete(ctx context.Context, src snapshot.SourceInfo) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	mans, err := r.load(ctx, &src, nil)
	if err != nil {
		return
	}

	var ids []manifest.ID

	for _, m := range mans {
		if m.IncompleteReason != "" {
			ids = append(ids, m.ID)
		}
	}

	if len(ids) == 0 {
		return
	}

	_ = repo.WriteSession(ctx, r.rep, repo.WriteSessionOptions{Purpose: "cairn-remove-checkpoints"},
		func(ctx context.Context, w repo.RepositoryWriter) error {
			for _, id := range ids {
				if err := w.DeleteManifest(ctx, id); err != nil {
					return err
				}
			}

			return nil
		})
}

// load loads the snapshot manifests of src (all sources if nil) that carry tags.
func (r *Repository) load(ctx context.Context, src *snapshot.SourceInfo, tags map[string]string) ([]*snapshot.Manifest, error) {
	ids, err := snapshot.ListSnapshotManifests(ctx, r.rep, src, tags)
	if err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", err)
	}

	mans, err := snapshot.LoadSnapshots(ctx, r.rep, ids)
	if err != nil {
		return nil, fmt.Errorf("loading snapshots: %w", err)
	}

	return mans, nil
}

// sourceFor is the kopia source of a snapshot: stable and logical (from the tags), never
// the local path, which may change between snapshots of the same volume.
func sourceFor(co repo.ClientOptions, tags map[string]string) snapshot.SourceInfo {
	b, _ := json.Marshal(tags) // map keys are sorted: stable
	return snapshot.SourceInfo{Host: co.Hostname, UserName: co.Username, Path: "/cairn/" + string(b)}
}

// latest is the newest complete snapshot carrying tags, or nil.
func (r *Repository) latest(ctx context.Context, tags map[string]string) (*snapshot.Manifest, error) {
	mans, err := r.load(ctx, nil, tags)
	if err != nil {
		return nil, err
	}

	var best *snapshot.Manifest

	for _, m := range mans {
		if m.IncompleteReason != "" || !maps.Equal(m.Tags, tags) {
			continue
		}

		if best == nil || m.StartTime.After(best.StartTime) {
			best = m
		}
	}

	return best, nil
}

type uploadProgress struct {
	upload.NullUploadProgress

	report        func(Progress)
	hashedBytes   atomic.Int64
	uploadedBytes atomic.Int64
	lastReport    atomic.Int64 // unix nanoseconds
}

func (p *uploadProgress) HashedBytes(n int64) {
	p.hashedBytes.Add(n)
	p.maybeReport()
}

func (p *uploadProgress) uploaded(n int64) {
	p.uploadedBytes.Add(n)
	p.maybeReport()
}

func (p *uploadProgress) maybeReport() {
	if p.report == nil {
		return
	}

	now := time.Now().UnixNano()
	last := p.lastReport.Load()

	if last != 0 && now-last < int64(progressEvery) {
		return
	}

	if !p.lastReport.CompareAndSwap(last, now) {
		return
	}

	p.report(Progress{HashedBytes: p.hashedBytes.Load(), UploadedBytes: p.uploadedBytes.Load()})
}

var _ upload.Progress = (*uploadProgress)(nil)

// RestoreOptions say how Restore writes.
type RestoreOptions struct {
	// Overwrite writes into a directory that already holds files: the files and directories of
	// the snapshot replace those of the same names, and nothing else is touched. Without it
	// the target must be empty (or not exist yet).
	Overwrite bool
	// Parallel is how many files are written at once; 0 means restoreWorkers.
	Parallel int
	// Progress, when set, is told the bytes written so far and the snapshot's size, at most
	// once a second.
	Progress func(done, total int64)
	// Of is what the snapshot must be of, or nothing is written: a snapshot of another source
	// is refused, and so is every snapshot when Of is the zero value (a caller cannot forget
	// to say).
	Of SnapshotIdentity
	// Capacity, when positive, bounds the bytes written (holes are not written): a restore that
	// would write more fails with confined.ErrOverBudget.
	Capacity int64
	// PodUser is the user the restored pod runs as, when known: a file keeps its setuid or
	// setgid bit only when that user (not root) owns it.
	PodUser *int64
	// Dropped, when set, is told each file whose setuid or setgid bit was dropped.
	Dropped func(path string, mode os.FileMode)
}

// SnapshotIdentity says what a snapshot is of, as its manifest records it (encrypted and
// authenticated with the repository's key: someone who can write the storage but does not
// know the password cannot forge it): a snapshot matches when its source path
// (SnapshotSource) begins with SourcePrefix, or when it carries every tag of Tags. The zero
// value matches no snapshot. A snapshot Cairn took is tagged as Snapshot was told (and its
// source is "/cairn/" and those tags as JSON): its identity is those tags.
type SnapshotIdentity struct {
	SourcePrefix string
	Tags         map[string]string
}

// matches reports whether a snapshot of source with tags is of w.
func (w SnapshotIdentity) matches(source string, tags map[string]string) bool {
	if w.SourcePrefix != "" && strings.HasPrefix(source, w.SourcePrefix) {
		return true
	}
	if len(w.Tags) == 0 {
		return false
	}
	for k, v := range w.Tags {
		if got, ok := tags[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// String says what w asks for, in errors.
func (w SnapshotIdentity) String() string {
	var parts []string
	if w.SourcePrefix != "" {
		parts = append(parts, fmt.Sprintf("of %s...", w.SourcePrefix))
	}
	if len(w.Tags) > 0 {
		keys := slices.Sorted(maps.Keys(w.Tags))
		tags := make([]string, len(keys))
		for i, k := range keys {
			tags[i] = k + "=" + w.Tags[k]
		}
		parts = append(parts, "tagged "+strings.Join(tags, ","))
	}
	return strings.Join(parts, " or ")
}

// RestoreResult describes a finished restore.
type RestoreResult struct {
	Bytes int64 // bytes of file content written
	Files int64 // files written
}

// Restore writes snapshot id into targetDir, beneath a handle on it and never following a link
// the directory holds (confinedOutput): permissions with setgid and sticky, times and symlinks
// are restored, owners too when running as root, and sparse files stay sparse.
func (r *Repository) Restore(ctx context.Context, id, targetDir string, opt RestoreOptions) (RestoreResult, error) {
	if err := r.failed(); err != nil {
		return RestoreResult{}, err
	}

	if opt.Of.SourcePrefix == "" && len(opt.Of.Tags) == 0 {
		return RestoreResult{}, fmt.Errorf("snapshot %s is not restored: the restore did not say what it must be of", id)
	}

	abs, err := filepath.Abs(targetDir)
	if err != nil {
		return RestoreResult{}, err
	}

	entries, err := os.ReadDir(abs)

	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return RestoreResult{}, err
		}
	case err != nil:
		return RestoreResult{}, err
	case len(entries) > 0 && !opt.Overwrite:
		return RestoreResult{}, fmt.Errorf("restore target %s is not empty", targetDir)
	}

	target, err := confined.OpenRoot(abs)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("restore target: %w", err)
	}
	defer func() { _ = target.Close() }()

	return r.restoreInto(ctx, id, &confinedOutput{root: target, budget: &confined.Budget{Limit: opt.Capacity},
		owners: os.Geteuid() == 0, podUser: opt.PodUser, dropped: opt.Dropped}, opt)
}

// restoreInto writes snapshot id to out, as opt says.
func (r *Repository) restoreInto(ctx context.Context, id string, out restore.Output, opt RestoreOptions) (RestoreResult, error) {
	man, err := snapshot.LoadSnapshot(ctx, r.rep, manifest.ID(id))
	if err != nil {
		return RestoreResult{}, fmt.Errorf("loading snapshot %s: %w", id, err)
	}

	if !opt.Of.matches(man.Source.Path, man.Tags) {
		return RestoreResult{}, fmt.Errorf("snapshot %s is of %q, not %s: it is not restored", id, man.Source.Path, opt.Of)
	}

	root, err := snapshotfs.SnapshotRoot(r.rep, man)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("snapshot %s root: %w", id, err)
	}

	var total int64
	if man.RootEntry != nil && man.RootEntry.DirSummary != nil {
		total = man.RootEntry.DirSummary.TotalFileSize
	}

	cancel := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(cancel) })

	defer stop()

	parallel := opt.Parallel
	if parallel <= 0 {
		parallel = restoreWorkers
	}

	var lastReport atomic.Int64 // unix nanoseconds; the callback runs on the restore's workers

	stats, err := restore.Entry(ctx, r.rep, out, root, restore.Options{
		Parallel:               parallel,
		RestoreDirEntryAtDepth: math.MaxInt32,
		Cancel:                 cancel,
		ProgressCallback: func(_ context.Context, s restore.Stats) {
			now, last := time.Now().UnixNano(), lastReport.Load()
			if opt.Progress == nil || now-last < int64(progressEvery) || !lastReport.CompareAndSwap(last, now) {
				return
			}
			opt.Progress(s.RestoredTotalFileSize, total)
		},
	})

	res := RestoreResult{Bytes: stats.RestoredTotalFileSize, Files: int64(stats.RestoredFileCount)}
	if err != nil {
		return res, fmt.Errorf("restoring snapshot %s: %w", id, err)
	}

	if err := ctx.Err(); err != nil {
		return res, err
	}

	if opt.Progress != nil {
		opt.Progress(res.Bytes, max(total, res.Bytes))
	}

	return res, nil
}

// SnapshotSource is the path of the source snapshot id was taken of: Cairn's are
// "/cairn/<tags as JSON>", Velero's "<namespace>/<pod>/<volume or claim name>". The manifest
// holding it is encrypted and authenticated with the repository's key: someone who can write
// the storage but does not know the password cannot forge it.
func (r *Repository) SnapshotSource(ctx context.Context, id string) (string, error) {
	if err := r.failed(); err != nil {
		return "", err
	}

	man, err := snapshot.LoadSnapshot(ctx, r.rep, manifest.ID(id))
	if err != nil {
		return "", fmt.Errorf("loading snapshot %s: %w", id, err)
	}

	return man.Source.Path, nil
}

// Delete deletes the snapshot id. Its data stays until maintenance reclaims it.
func (r *Repository) Delete(ctx context.Context, id string) error {
	if err := r.failed(); err != nil {
		return err
	}

	if _, err := snapshot.LoadSnapshot(ctx, r.rep, manifest.ID(id)); err != nil {
		return fmt.Errorf("loading snapshot %s: %w", id, err)
	}

	return repo.WriteSession(ctx, r.rep, repo.WriteSessionOptions{Purpose: "cairn-delete"},
		func(ctx context.Context, w repo.RepositoryWriter) error {
			return w.DeleteManifest(ctx, manifest.ID(id))
		})
}

// Snapshots returns the IDs of the complete snapshots carrying tags (all with nil tags).
func (r *Repository) Snapshots(ctx context.Context, tags map[string]string) ([]string, error) {
	mans, err := r.load(ctx, nil, tags)
	if err != nil {
		return nil, err
	}

	out := make([]string, 0, len(mans))

	for _, m := range mans {
		if m.IncompleteReason == "" {
			out = append(out, string(m.ID))
		}
	}

	return out, nil
}

// Maintain runs quick or full maintenance. Without exclusive it keeps kopia's safety margins
// for running beside writers (full maintenance keeps unreferenced data for a day before
// deleting it), and runs only when opened as the maintenance owner, the Username@Hostname that
// initialised the repository. With exclusive the caller guarantees that nothing else reads or
// writes the repository while it runs (Cairn's blob proxy holds it: internal/blobproxy.Locks),
// so it runs whoever the owner is, without margins (kopia's SafetyNone), and full maintenance
// gives back the space of deleted snapshots at once. Callers must run at most one Maintain per
// repository at a time.
func (r *Repository) Maintain(ctx context.Context, full, exclusive bool) error {
	if err := r.failed(); err != nil {
		return err
	}

	dr, ok := r.rep.(repo.DirectRepository)
	if !ok {
		return errors.New("repository does not support maintenance")
	}

	mode := maintenance.ModeQuick
	if full {
		mode = maintenance.ModeFull
	}

	safety := maintenance.SafetyFull
	if exclusive {
		safety = maintenance.SafetyNone
	}

	return repo.DirectWriteSession(ctx, dr, repo.WriteSessionOptions{Purpose: maintenanceName},
		func(ctx context.Context, w repo.DirectRepositoryWriter) error {
			return snapshotmaintenance.Run(ctx, w, mode, exclusive, safety)
		})
}
