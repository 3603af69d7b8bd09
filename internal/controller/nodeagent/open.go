package nodeagent

import (
	"context"
	"os"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/blobproxy"
	"github.com/cairn-backup/cairn/internal/repository"
)

// A restore's client reads packs ahead (blobproxy Options.ReadAheadWindows): windows of 1 MiB
// (about 250 files of 4 KiB), two for each of the default two files restored at once: 4 MiB
// of memory at most.
const (
	restoreReadAheadWindows = 4
	restoreReadAheadBytes   = 1 << 20
)

// ProxyRepositories opens repositories through the manager's repository server at url
// (verified with the CA certificates of caFile when it is https://, the system's roots when
// caFile is ""), with the projected token in tokenFile; each open one keeps its kopia config in its own directory
// under configDir, removed on Close. The manager initialises a repository before it asks for
// a copy into it (never two clients at once); an agent never does. Every agent is the same kopia client (cairn@cairn), so a
// volume's snapshots chain whichever node its pod runs on.
func ProxyRepositories(url, caFile, tokenFile, configDir string) OpenFunc {
	return func(ctx context.Context, ref cairnv1.RepositoryReference, password string, readOnly bool) (Repository, error) {
		opt := &blobproxy.Options{URL: url, Location: ref.StorageLocation, Namespace: ref.Namespace, TokenFile: tokenFile, CAFile: caFile}
		if readOnly {
			// A restore reads packs front to back, many small contents from each.
			opt.ReadAheadWindows, opt.ReadAheadBytes = restoreReadAheadWindows, restoreReadAheadBytes
		}
		st, err := blobproxy.New(ctx, opt, false)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp(configDir, "repository-")
		if err != nil {
			_ = st.Close(ctx)
			return nil, err
		}
		r, err := repository.Open(ctx, repository.Options{Storage: st, Password: password, Hostname: "cairn", Username: "cairn", ConfigDir: dir, MustExist: true, ReadOnly: readOnly})
		if err != nil {
			_ = st.Close(ctx)
			_ = os.RemoveAll(dir)
			return nil, err
		}
		return &openRepository{Repository: r, close: func() {
			_ = st.Close(context.WithoutCancel(ctx))
			_ = os.RemoveAll(dir)
		}}, nil
	}
}

// openRepository closes what was opened with the repository.
type openRepository struct {
	*repository.Repository
	close func()
}

func (r *openRepository) Close() error {
	err := r.Repository.Close()
	r.close()
	return err
}
