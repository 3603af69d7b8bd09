package cli

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// requestURL asks the manager for a URL of one file of a backup or restore in namespace: it
// creates a DownloadRequest, waits (by a watch) for the answer, and deletes the request.
func (e *env) requestURL(ctx context.Context, namespace, name string, kind cairnv1.DownloadTargetKind) (string, error) {
	c, err := e.client()
	if err != nil {
		return "", err
	}
	dr := &cairnv1.DownloadRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: downloadRequestPrefix(name, kind)},
		Spec:       cairnv1.DownloadRequestSpec{Target: cairnv1.DownloadTarget{Kind: kind, Name: name}},
	}
	if err := c.Create(ctx, dr); err != nil {
		return "", err
	}
	defer func() { _ = c.Delete(context.Background(), dr) }()
	ctx, cancel := context.WithTimeout(ctx, e.requestTimeout)
	defer cancel()
	err = watchUntil(ctx, c, dr, &cairnv1.DownloadRequestList{}, func(o client.Object) bool {
		cur, ok := o.(*cairnv1.DownloadRequest)
		if ok {
			dr.Status = cur.Status
		}
		return ok && (cur.Status.Phase == cairnv1.DownloadRequestPhaseProcessed || cur.Status.Phase == cairnv1.DownloadRequestPhaseFailed)
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return "", fmt.Errorf("the Cairn manager did not answer DownloadRequest %s/%s within %s: is it running?", namespace, dr.Name, e.requestTimeout)
	}
	if err != nil {
		return "", err
	}
	if dr.Status.Phase == cairnv1.DownloadRequestPhaseFailed {
		return "", errors.New(dr.Status.Message)
	}
	return dr.Status.DownloadURL, nil
}

// downloadRequestPrefix is the generateName of a request: the target's name and the kind, cut
// to leave room for the random suffix.
func downloadRequestPrefix(name string, kind cairnv1.DownloadTargetKind) string {
	prefix := name + "-" + strings.ToLower(string(kind))
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	return prefix + "-"
}

// Download timeouts. A download URL's server must accept the connection and answer with its
// headers in time, and a body must keep arriving: one that stops for downloadIdleTimeout
// fails (errStalled). The whole transfer has no limit: an archive can be large, and a slow
// link takes its time.
const (
	downloadConnectTimeout = 30 * time.Second
	downloadHeaderTimeout  = time.Minute
	downloadIdleTimeout    = time.Minute
)

// errStalled is a download whose body stopped arriving.
var errStalled = errors.New("the transfer stalled")

// newHTTPClient is the client that fetches download URLs: http.DefaultTransport's proxy and
// connection settings, with a bounded connect and TLS handshake, and headerTimeout for the
// response's headers.
func newHTTPClient(headerTimeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: downloadConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = downloadConnectTimeout
	t.ResponseHeaderTimeout = headerTimeout
	return &http.Client{Transport: t}
}

// open fetches a download URL with the user's own bearer token (withCredentials): a URL made
// for a team member is served only to them. The caller closes the body. A body that stops
// arriving for e.idleTimeout fails with errStalled; ctx ending (Ctrl-C) ends the transfer too.
func (e *env) open(ctx context.Context, url string) (io.ReadCloser, error) {
	cfg, err := e.restConfig()
	if err != nil {
		return nil, err
	}
	rt, err := withCredentials(cfg, e.httpClient.Transport)
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig's credentials: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel(nil)
		return nil, err
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		cancel(nil)
		return nil, fmt.Errorf("downloading: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_ = resp.Body.Close()
		cancel(nil)
		return nil, fmt.Errorf("downloading: %s: %s%s", resp.Status, strings.TrimSpace(string(msg)), refusalHint(resp.StatusCode, cfg))
	}
	stalled := fmt.Errorf("%w: no data came for %s", errStalled, e.idleTimeout)
	timer := time.AfterFunc(e.idleTimeout, func() { cancel(stalled) })
	timer.Stop() // runs only while a Read waits
	return &idleBody{body: resp.Body, ctx: ctx, cancel: cancel, idle: e.idleTimeout, timer: timer}, nil
}

// withCredentials wraps rt (nil: http.DefaultTransport) so that each request carries the
// user's bearer token from the kubeconfig: a token, a token file, or the token an exec or
// auth-provider plugin gives; the download server checks it with a TokenReview. Nothing else of
// the kubeconfig goes with it: no impersonation, no basic auth. A user who authenticates with
// a client certificate sends no token, and a team namespace's URL refuses them (docs/cli.md).
func withCredentials(cfg *rest.Config, rt http.RoundTripper) (http.RoundTripper, error) {
	if rt == nil {
		rt = http.DefaultTransport
	}
	only := &rest.Config{
		Host: cfg.Host, BearerToken: cfg.BearerToken, BearerTokenFile: cfg.BearerTokenFile,
		ExecProvider: cfg.ExecProvider, AuthProvider: cfg.AuthProvider, AuthConfigPersister: cfg.AuthConfigPersister,
	}
	only.CAData, only.CAFile = cfg.CAData, cfg.CAFile // an exec plugin may be given the cluster's
	return rest.HTTPWrappersForConfig(only, rt)
}

// refusalHint says, for a download refused (403) to a user whose kubeconfig gives no token,
// why: a client certificate cannot be checked by the download server, and --as is not sent
// (docs/cli.md, "The limit"). Empty otherwise.
func refusalHint(status int, cfg *rest.Config) string {
	if status != http.StatusForbidden || cfg.BearerToken != "" || cfg.BearerTokenFile != "" || cfg.ExecProvider != nil || cfg.AuthProvider != nil {
		return ""
	}
	hint := " (your kubeconfig has no token to send: a client certificate cannot be checked by the download server, so in a team's namespace use a token credential; docs/cli.md"
	if cfg.Impersonate.UserName != "" {
		hint += "; --as is not sent to it, a download is the kubeconfig's own"
	}
	return hint + ")"
}

// errCut explains a download body that ended before the length the server announced.
const errCut = "the download ended before its end: the manager's download server cuts a download whose file does not match what its backup's commit marker records (see the manager's log), or the connection broke"

// idleBody is a response body whose Read fails when no data comes for idle: its timer runs
// only while a Read waits, so a slow reader of the body is never taken for a stalled server.
// The timer cancels the request's context, which ends the Read blocked on the connection.
type idleBody struct {
	body   io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   time.Duration
	timer  *time.Timer
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.idle)
	n, err := b.body.Read(p)
	b.timer.Stop()
	if err != nil && errors.Is(context.Cause(b.ctx), errStalled) {
		return n, context.Cause(b.ctx)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return n, fmt.Errorf("%s: %w", errCut, err)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	b.cancel(nil)
	return b.body.Close()
}

// fetchGzip reads a gzipped file of a backup or restore (logs, results, lists) into w.
func (e *env) fetchGzip(ctx context.Context, namespace, name string, kind cairnv1.DownloadTargetKind, w io.Writer) error {
	url, err := e.requestURL(ctx, namespace, name, kind)
	if err != nil {
		return err
	}
	body, err := e.open(ctx, url)
	if err != nil {
		return err
	}
	defer body.Close()
	zr, err := gzip.NewReader(body)
	if err != nil {
		return fmt.Errorf("reading the %s: %w", kind, err)
	}
	if _, err := io.Copy(w, zr); err != nil {
		return fmt.Errorf("reading the %s: %w", kind, err)
	}
	return zr.Close()
}

// saveVerified streams r into path and checks its SHA-256 against want (hex) on the way: the
// file appears under path only when it matches (or when there is nothing to check against,
// want "") and ctx has not ended. It returns the digest. The temp file it writes to (an
// archive holds the cluster's Secrets) is removed on every other way out: a failed or stalled
// read, a mismatch, ctx ending (Ctrl-C, which the caller's context catches), a panic.
func saveVerified(ctx context.Context, r io.Reader, path, want string) (string, error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), r); err != nil {
		_ = tmp.Close()
		return "", fmt.Errorf("downloading: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	got := hex.EncodeToString(h.Sum(nil))
	if want != "" && !strings.EqualFold(got, want) {
		return got, fmt.Errorf("archive checksum mismatch: the download has SHA-256 %s, the backup records %s; nothing was saved", got, want)
	}
	if err := ctx.Err(); err != nil {
		return got, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return got, err
	}
	return got, nil
}
