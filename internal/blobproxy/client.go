package blobproxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kopia/kopia/repo/blob"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"

	"github.com/cairn-backup/cairn/internal/location"
)

func init() {
	blob.AddSupportedStorage(StorageType, Options{}, New)
}

// Options say which repository a client reaches through which proxy. They are what kopia
// keeps in a repository's ConnectionInfo (and its config file), so they hold no secret: the
// token is read from TokenFile.
type Options struct {
	// URL is the proxy's base URL, http:// or https://.
	URL string `json:"url"`
	// Location and Namespace name the repository: the storage location and the source
	// namespace of the volumes.
	Location  string `json:"location"`
	Namespace string `json:"namespace"`
	// TokenFile holds the bearer token: a projected ServiceAccount token for Audience, which
	// the kubelet rotates; it is read again at most every tokenRereadInterval.
	TokenFile string `json:"tokenFile"`
	// CAFile, if set, holds the PEM certificates that verify an https:// proxy.
	CAFile string `json:"caFile,omitempty"`
	// ReadAheadWindows, if above zero, is how many windows of ReadAheadBytes of packs the
	// client keeps (readAhead): a restore reads many small contents one after another from
	// each pack. They cost ReadAheadWindows x ReadAheadBytes of memory at most.
	ReadAheadWindows int   `json:"readAheadWindows,omitempty"`
	ReadAheadBytes   int64 `json:"readAheadBytes,omitempty"`
}

// tokenRereadInterval is how often the token file is read again: the kubelet rotates a
// projected token well before it expires (at 80% of its life, an hour at least).
const tokenRereadInterval = time.Minute

// closeTimeout bounds releasing the session when the storage is closed.
const closeTimeout = 10 * time.Second

// maxErrorBody bounds how much of an error response is read as its message.
const maxErrorBody = 4 << 10

// responseHeaderTimeout bounds the wait for the proxy's answer once a request is sent. The
// proxy reads a whole blob from the storage before it answers, so this covers the storage.
const responseHeaderTimeout = 2 * time.Minute

// retryPolicy bounds the retries of transient failures: a delay doubling from initial up to
// maxDelay (or the server's Retry-After, capped the same), within budget in all.
type retryPolicy struct {
	initial, maxDelay, budget time.Duration
}

// defaultRetry rides out a manager restart or leader change (a Lease lasts 15 s).
var defaultRetry = retryPolicy{initial: 100 * time.Millisecond, maxDelay: 5 * time.Second, budget: time.Minute}

// delay is the wait before retry number attempt (0 for the first retry).
func (p retryPolicy) delay(attempt int, retryAfter time.Duration) time.Duration {
	d := p.initial
	for i := 0; i < attempt && d < p.maxDelay; i++ {
		d *= 2
	}
	d = max(d, retryAfter)
	return min(d, p.maxDelay)
}

// retryableStatus reports the statuses worth another try: a gateway or load balancer that
// lost the proxy, or a proxy that is not ready (not the leader, maintenance running).
func retryableStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// transient reports a network failure worth another try: the proxy restarting or moving
// (connection refused or reset, a connection closed under a request, a dial that timed out).
// Context ends, TLS and DNS failures are not.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// proxyStorage is the kopia blob.Storage that reaches a repository through the proxy.
type proxyStorage struct {
	blob.DefaultProviderImplementation

	opt      Options
	base     string // URL of the repository: .../repositories/{location}/{namespace}/
	hc       *http.Client
	token    *tokenSource
	retry    retryPolicy
	session  string
	readOnly bool
	ahead    *readAhead // nil: every read is a request

	// lost is set when the session is gone (expired, refused, or the storage closed): every
	// call fails with it from then on.
	lost       atomic.Pointer[error]
	stop       context.CancelFunc
	refreshing sync.WaitGroup
	closeOnce  sync.Once
}

// New opens a session of the repository opt names through the proxy and keeps it alive until
// Close. It is kopia's constructor for StorageType (isCreate is not used: the proxy makes
// directories as needed).
func New(ctx context.Context, opt *Options, isCreate bool) (blob.Storage, error) {
	_ = isCreate
	return newClient(ctx, opt, defaultRetry)
}

func newClient(ctx context.Context, opt *Options, retry retryPolicy) (*proxyStorage, error) {
	base, err := repositoryURL(*opt)
	if err != nil {
		return nil, err
	}
	hc, err := httpClientFor(opt.CAFile)
	if err != nil {
		return nil, err
	}
	c := &proxyStorage{opt: *opt, base: base, hc: hc, token: &tokenSource{file: opt.TokenFile, clock: clock.RealClock{}}, retry: retry}
	var info sessionInfo
	err = c.do(ctx, request{method: http.MethodPost, path: "sessions"}, func(resp *http.Response) error {
		return json.NewDecoder(resp.Body).Decode(&info)
	})
	if err != nil {
		return nil, fmt.Errorf("opening a session of repository %s through the blob proxy: %w", RepositoryKey(opt.Location, opt.Namespace), err)
	}
	if !isSessionID(info.ID) || info.TTLMillis <= 0 {
		return nil, fmt.Errorf("the blob proxy at %s answered a session with ID %q and TTL %dms", opt.URL, info.ID, info.TTLMillis)
	}
	c.session, c.readOnly = info.ID, info.ReadOnly
	if opt.ReadAheadWindows > 0 && opt.ReadAheadBytes > 0 {
		c.ahead = &readAhead{size: opt.ReadAheadBytes, slots: opt.ReadAheadWindows}
	}
	refreshCtx, stop := context.WithCancel(context.Background())
	c.stop = stop
	c.refreshing.Add(1)
	go c.keepAlive(refreshCtx, time.Duration(info.TTLMillis)*time.Millisecond/3)
	return c, nil
}

// repositoryURL checks opt and builds the URL of its repository, with a trailing slash.
func repositoryURL(opt Options) (string, error) {
	u, err := url.Parse(opt.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("blob proxy URL %q must be an http:// or https:// URL", opt.URL)
	}
	if errs := validation.IsDNS1123Subdomain(opt.Location); len(errs) > 0 {
		return "", fmt.Errorf("storage location %q: %s", opt.Location, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(opt.Namespace); len(errs) > 0 {
		return "", fmt.Errorf("namespace %q: %s", opt.Namespace, strings.Join(errs, "; "))
	}
	if opt.TokenFile == "" {
		return "", errors.New("blob proxy options: tokenFile is required")
	}
	return strings.TrimRight(opt.URL, "/") + "/repositories/" + opt.Location + "/" + opt.Namespace + "/", nil
}

// keepAlive refreshes the session every interval. A refresh that fails for a passing reason is
// retried at the next tick (the session outlives two missed ones); a session the proxy no
// longer knows is lost for good.
func (c *proxyStorage) keepAlive(ctx context.Context, every time.Duration) {
	defer c.refreshing.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		err := c.do(rctx, request{method: http.MethodPut, path: "sessions/" + c.session}, discard)
		cancel()
		if errors.Is(err, ErrNoSession) {
			c.lose(err)
			return
		}
	}
}

func (c *proxyStorage) lose(err error) {
	err = fmt.Errorf("the session with the blob proxy is lost, the repository must be opened again: %w", err)
	c.lost.CompareAndSwap(nil, &err)
}

// check is the error every call returns once the session is lost.
func (c *proxyStorage) check() error {
	if p := c.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// request is one call to the proxy.
type request struct {
	method string
	path   string // relative to the repository's URL
	query  url.Values
	header http.Header
	body   blob.Bytes
	// retryBody retries a transient failure while reading the answer (a GET, read again
	// from the start); a listing already handed to kopia is never retried.
	retryBody bool
}

func discard(*http.Response) error { return nil }

// do sends req, retrying transient failures within c.retry, and hands a successful answer to
// handle. Its errors are the server's (*ServerError), handle's, or the network's.
func (c *proxyStorage) do(ctx context.Context, req request, handle func(*http.Response) error) error {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		retryAfter, retry, err := c.once(ctx, req, handle)
		if err == nil || !retry {
			return err
		}
		d := c.retry.delay(attempt, retryAfter)
		if time.Since(start)+d > c.retry.budget {
			return fmt.Errorf("%w (gave up after %d attempts in %s)", err, attempt+1, time.Since(start).Round(time.Millisecond))
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// once sends req once: its error, and whether (and after how long at least) to try again.
func (c *proxyStorage) once(ctx context.Context, req request, handle func(*http.Response) error) (retryAfter time.Duration, retry bool, err error) {
	if err := ctx.Err(); err != nil {
		return 0, false, context.Cause(ctx)
	}
	u := c.base + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	hreq, err := http.NewRequestWithContext(ctx, req.method, u, nil)
	if err != nil {
		return 0, false, err
	}
	if req.body != nil {
		// A fresh reader each attempt: the body is replayed from its start.
		hreq.Body = req.body.Reader()
		hreq.ContentLength = int64(req.body.Length())
	}
	for k, v := range req.header {
		hreq.Header[k] = v
	}
	token, err := c.token.get()
	if err != nil {
		return 0, false, err
	}
	hreq.Header.Set("Authorization", "Bearer "+token)
	if c.session != "" {
		hreq.Header.Set(headerSession, c.session)
	}
	resp, err := c.hc.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return 0, false, context.Cause(ctx)
		}
		return 0, transient(err), fmt.Errorf("blob proxy %s: %w", c.opt.URL, err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody)) // lets the connection be reused
		_ = resp.Body.Close()
	}()
	if resp.StatusCode >= 300 {
		serr := serverError(resp)
		if serr.Code == codeNoSession {
			c.lose(serr)
		}
		return retryAfterOf(resp), retryableStatus(resp.StatusCode), serr
	}
	if err := handle(resp); err != nil {
		if ctx.Err() != nil {
			return 0, false, context.Cause(ctx)
		}
		return 0, req.retryBody && transient(err), err
	}
	return 0, false, nil
}

// serverError reads an error response. An answer without a code comes from something between
// the client and the proxy (a load balancer), and says so.
func serverError(resp *http.Response) *ServerError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	msg := strings.TrimSpace(string(b))
	code := resp.Header.Get(headerError)
	if code == "" {
		msg = fmt.Sprintf("the blob proxy answered %s: %s", resp.Status, msg)
	}
	return &ServerError{Status: resp.StatusCode, Code: code, Message: msg}
}

func retryAfterOf(resp *http.Response) time.Duration {
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || s < 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}

func blobPath(id blob.ID) string { return "blobs/" + url.PathEscape(string(id)) }

// GetBlob implements blob.Storage.
func (c *proxyStorage) GetBlob(ctx context.Context, id blob.ID, offset, length int64, output blob.OutputBuffer) error {
	if err := c.check(); err != nil {
		return err
	}
	if c.ahead != nil && length >= 0 && cacheablePack(id) && c.ahead.covers(offset, length) {
		if ok, err := c.readAhead(ctx, id, offset, length, output); ok || err != nil {
			return err
		}
	}
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}, "length": {strconv.FormatInt(length, 10)}}
	err := c.do(ctx, request{method: http.MethodGet, path: blobPath(id), query: q, retryBody: true}, func(resp *http.Response) error {
		output.Reset()
		// The proxy sends no blob over the cap; the agent's memory does not rest on that.
		n, err := io.Copy(output, io.LimitReader(resp.Body, maxBlobSize+1))
		if err == nil && n > maxBlobSize {
			return fmt.Errorf("%w: the blob proxy sent more than %d bytes of blob %s", location.ErrBlobTooLarge, int64(maxBlobSize), id)
		}
		return err
	})
	if err != nil {
		return err
	}
	return blob.EnsureLengthExactly(output.Length(), length)
}

// GetMetadata implements blob.Storage.
func (c *proxyStorage) GetMetadata(ctx context.Context, id blob.ID) (blob.Metadata, error) {
	if err := c.check(); err != nil {
		return blob.Metadata{}, err
	}
	var md blobMetadata
	err := c.do(ctx, request{method: http.MethodGet, path: "metadata/" + url.PathEscape(string(id)), retryBody: true},
		func(resp *http.Response) error { return json.NewDecoder(resp.Body).Decode(&md) })
	if err != nil {
		return blob.Metadata{}, err
	}
	return blob.Metadata{BlobID: blob.ID(md.ID), Length: md.Length, Timestamp: md.Timestamp}, nil
}

// PutBlob implements blob.Storage. DoNotRecreate is carried out by the proxy; a modification
// time cannot be set, nor a retention (object lock), which Cairn's repositories do not use.
func (c *proxyStorage) PutBlob(ctx context.Context, id blob.ID, data blob.Bytes, opts blob.PutOptions) error {
	if err := c.check(); err != nil {
		return err
	}
	switch {
	case opts.HasRetentionOptions():
		return fmt.Errorf("%w: blob retention (object lock) is not supported by the Cairn blob proxy", blob.ErrUnsupportedPutBlobOption)
	case !opts.SetModTime.IsZero():
		return fmt.Errorf("%w: the Cairn blob proxy cannot set a blob's modification time", blob.ErrSetTimeUnsupported)
	}
	var h http.Header
	if opts.DoNotRecreate {
		h = http.Header{headerDoNotRecreate: {"true"}}
	}
	var md blobMetadata
	err := c.do(ctx, request{method: http.MethodPut, path: blobPath(id), header: h, body: data},
		func(resp *http.Response) error { return json.NewDecoder(resp.Body).Decode(&md) })
	if err != nil {
		return err
	}
	if opts.GetModTime != nil {
		*opts.GetModTime = md.Timestamp
	}
	return nil
}

// DeleteBlob implements blob.Storage.
func (c *proxyStorage) DeleteBlob(ctx context.Context, id blob.ID) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.do(ctx, request{method: http.MethodDelete, path: blobPath(id)}, discard)
}

// ListBlobs implements blob.Storage, handing each blob to cb as its line arrives.
func (c *proxyStorage) ListBlobs(ctx context.Context, prefix blob.ID, cb func(blob.Metadata) error) error {
	if err := c.check(); err != nil {
		return err
	}
	q := url.Values{"prefix": {string(prefix)}}
	return c.do(ctx, request{method: http.MethodGet, path: "blobs", query: q}, func(resp *http.Response) error {
		dec := json.NewDecoder(resp.Body)
		for {
			var l listLine
			if err := dec.Decode(&l); err != nil {
				if errors.Is(err, io.EOF) {
					return errors.New("the blob proxy's listing was cut off")
				}
				return fmt.Errorf("reading the blob proxy's listing: %w", err)
			}
			switch {
			case l.Error != "":
				return &ServerError{Status: http.StatusInternalServerError, Code: codeBackend, Message: l.Error}
			case l.End:
				return nil
			}
			if err := cb(blob.Metadata{BlobID: blob.ID(l.ID), Length: l.Length, Timestamp: l.Timestamp}); err != nil {
				return err
			}
		}
	})
}

// ConnectionInfo implements blob.Storage: the options, which hold no secret.
func (c *proxyStorage) ConnectionInfo() blob.ConnectionInfo {
	opt := c.opt
	return blob.ConnectionInfo{Type: StorageType, Config: &opt}
}

// DisplayName implements blob.Storage.
func (c *proxyStorage) DisplayName() string {
	return fmt.Sprintf("Cairn blob proxy %s, repository %s", c.opt.URL, RepositoryKey(c.opt.Location, c.opt.Namespace))
}

// IsReadOnly implements blob.Storage: the location is ReadOnly.
func (c *proxyStorage) IsReadOnly() bool { return c.readOnly }

// Close implements blob.Storage: it stops refreshing the session and releases it. Every later
// call fails.
func (c *proxyStorage) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.stop()
		c.refreshing.Wait()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		// Best effort: a session not released expires within its TTL.
		_ = c.do(ctx, request{method: http.MethodDelete, path: "sessions/" + c.session}, discard)
		closed := errors.New("the blob proxy storage is closed")
		c.lost.Store(&closed)
	})
	return nil
}

// tokenSource reads the token file, again at most every tokenRereadInterval.
type tokenSource struct {
	file  string
	clock clock.PassiveClock

	mu     sync.Mutex
	token  string
	readAt time.Time
}

func (t *tokenSource) get() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	if t.token != "" && now.Sub(t.readAt) < tokenRereadInterval {
		return t.token, nil
	}
	b, err := os.ReadFile(t.file)
	if err != nil {
		return "", fmt.Errorf("reading the blob proxy token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("the blob proxy token file %s is empty", t.file)
	}
	t.token, t.readAt = token, now
	return token, nil
}

// httpClients are the clients by CA bundle (the empty key: the system's roots), shared by
// every storage: kopia opens a storage for each repository it opens, and one transport keeps
// the connections alive across them.
var (
	httpClientsMu sync.Mutex
	httpClients   = map[[sha256.Size]byte]*http.Client{}
)

func httpClientFor(caFile string) (*http.Client, error) {
	var pem []byte
	if caFile != "" {
		var err error
		if pem, err = os.ReadFile(caFile); err != nil {
			return nil, fmt.Errorf("reading the blob proxy's CA file: %w", err)
		}
	}
	key := sha256.Sum256(pem)
	httpClientsMu.Lock()
	defer httpClientsMu.Unlock()
	if hc, ok := httpClients[key]; ok {
		return hc, nil
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	// The proxy is a Service of the cluster, never reached through an outgoing HTTP proxy.
	t.Proxy = nil
	t.MaxIdleConnsPerHost = 16
	t.ResponseHeaderTimeout = responseHeaderTimeout
	if len(pem) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the blob proxy's CA file %s holds no PEM certificate", caFile)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	hc := &http.Client{
		Transport: t,
		// A redirect is never part of the protocol: it is answered as an error, not followed
		// (with the token) somewhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	httpClients[key] = hc
	return hc, nil
}
