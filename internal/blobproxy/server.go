package blobproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/kopia/kopia/repo/blob"
	"k8s.io/utils/clock"

	"github.com/cairn-backup/cairn/internal/location"
)

// notLeaderRetryAfter is the Retry-After of a request to a manager that is not the leader:
// the client tries again soon, reaching the leader once the Service routes to it.
const notLeaderRetryAfter = time.Second

// Server is the blob proxy's HTTP handler (see the package comment for the protocol). Set the
// optional fields before it serves.
type Server struct {
	auth  Authenticator
	locks *Locks
	cache *backendCache

	// Leader, when set, says whether this manager leads; when it does not, every request is
	// answered 503 "not the leader" (only the leader's Locks are the truth).
	Leader func() bool
	// Log receives the requests that failed on the server's side.
	Log logr.Logger

	// create serialises the PUTs with DoNotRecreate, which the proxy carries out itself
	// (check, then write): kopia's filesystem and S3 storages do not support it, and every
	// writer of a repository goes through this one proxy.
	create chan struct{}
}

// NewServer returns a proxy to the storages of b, authenticating with a and keeping the
// sessions in locks. Opened storages are reused for DefaultBackendTTL.
func NewServer(b Backends, a Authenticator, locks *Locks) *Server {
	return newServer(b, a, locks, DefaultBackendTTL, clock.RealClock{})
}

func newServer(b Backends, a Authenticator, locks *Locks, ttl time.Duration, clk clock.PassiveClock) *Server {
	return &Server{auth: a, locks: locks, cache: newBackendCache(b, ttl, clk), create: make(chan struct{}, 1)}
}

// Close closes the storages the server holds (those in use are closed when their requests end).
func (s *Server) Close() { s.cache.closeAll() }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.Leader != nil && !s.Leader() {
		w.Header().Set("Retry-After", strconv.Itoa(int(notLeaderRetryAfter.Seconds())))
		writeError(w, http.StatusServiceUnavailable, codeNotLeader, "this manager is not the leader; try again")
		return
	}
	rt, err := parseRoute(r.URL.EscapedPath())
	if err != nil {
		writeError(w, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	if !methodAllowed(rt.kind, r.Method) {
		writeError(w, http.StatusMethodNotAllowed, codeBadRequest, fmt.Sprintf("%s is not allowed on %s", r.Method, rt.kind))
		return
	}
	if ok := s.authenticate(w, r); !ok {
		return
	}
	key := RepositoryKey(rt.location, rt.namespace)
	switch rt.kind {
	case kindSessions:
		s.openSession(w, r, rt, key)
	case kindSession:
		s.session(w, r, rt, key)
	default:
		s.blobRequest(w, r, rt, key)
	}
}

// methodAllowed is the proxy's method table.
func methodAllowed(kind, method string) bool {
	switch kind {
	case kindBlob:
		return method == http.MethodGet || method == http.MethodPut || method == http.MethodDelete
	case kindBlobs, kindMetadata:
		return method == http.MethodGet
	case kindSessions:
		return method == http.MethodPost
	case kindSession:
		return method == http.MethodPut || method == http.MethodDelete
	}
	return false
}

// bearerToken is the token of an Authorization header, "" when there is none.
func bearerToken(h string) string {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) bool {
	token := bearerToken(r.Header.Get("Authorization"))
	if token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="cairn-blob-proxy"`)
		writeError(w, http.StatusUnauthorized, codeUnauthorized, "a bearer token is required")
		return false
	}
	_, err := s.auth.Authenticate(r.Context(), token)
	switch {
	case errors.Is(err, ErrRefused):
		s.Log.V(1).Info("Refused a blob proxy request", "path", r.URL.Path, "reason", err.Error())
		writeError(w, http.StatusForbidden, codeUnauthorized, err.Error())
		return false
	case err != nil:
		s.Log.Error(err, "Could not check a blob proxy token")
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, err.Error())
		return false
	}
	return true
}

func (s *Server) openSession(w http.ResponseWriter, r *http.Request, rt route, key string) {
	// Opening the storage first makes a missing or unusable location fail here, at once and
	// with its reason, rather than at the client's first blob.
	_, readOnly, release, err := s.cache.acquire(r.Context(), rt.location, rt.namespace)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	release()
	sess, err := s.locks.Open(key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, sessionInfo{ID: sess.ID, TTLMillis: sess.TTL.Milliseconds(), ReadOnly: readOnly})
}

func (s *Server) session(w http.ResponseWriter, r *http.Request, rt route, key string) {
	if r.Method == http.MethodDelete {
		s.locks.Close(key, rt.id)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err := s.locks.Refresh(key, rt.id); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// blobRequest serves the blob routes: a live session, the storage, then the operation.
func (s *Server) blobRequest(w http.ResponseWriter, r *http.Request, rt route, key string) {
	if err := checkQuery(rt, r); err != nil {
		writeError(w, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	done, err := s.locks.begin(key, r.Header.Get(headerSession))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	st, readOnly, release, err := s.cache.acquire(r.Context(), rt.location, rt.namespace)
	if err != nil {
		done()
		s.fail(w, r, err)
		return
	}
	// Both are released when the storage call returns, which may be after this handler:
	// until then the request counts as in flight for Maintain.
	finish := func() { release(); done() }
	isWrite := r.Method == http.MethodPut || r.Method == http.MethodDelete
	if isWrite && readOnly {
		finish()
		writeError(w, http.StatusForbidden, codeReadOnly, readOnlyMessage(rt.location))
		return
	}
	switch {
	case rt.kind == kindBlobs:
		s.list(w, r, st, finish)
	case rt.kind == kindMetadata:
		s.metadata(w, r, st, rt, finish)
	case r.Method == http.MethodGet:
		s.get(w, r, st, rt, finish)
	case r.Method == http.MethodPut:
		s.put(w, r, st, rt, finish)
	default:
		s.delete(w, r, st, rt, finish)
	}
}

// checkQuery checks a blob request's parameters before anything is touched.
func checkQuery(rt route, r *http.Request) error {
	switch {
	case rt.kind == kindBlobs:
		return checkBlobID(r.URL.Query().Get("prefix"), true)
	case rt.kind == kindBlob && r.Method == http.MethodGet:
		_, _, err := parseRange(r.URL.Query())
		return err
	}
	return nil
}

// call runs fn with the request's context and returns its error, or the context's as soon as
// it ends, even if fn (a storage call that ignores its context) has not returned: a stalled
// storage never holds a request. finish runs when fn returns.
func call(ctx context.Context, finish func(), fn func(ctx context.Context) error) error {
	errc := make(chan error, 1)
	go func() {
		defer finish()
		errc <- fn(ctx)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// outputBuffer is the blob.OutputBuffer a GET reads into.
type outputBuffer struct{ bytes.Buffer }

func (b *outputBuffer) Length() int { return b.Len() }

func (s *Server) get(w http.ResponseWriter, r *http.Request, st blob.Storage, rt route, finish func()) {
	offset, length, _ := parseRange(r.URL.Query()) // checked by checkQuery
	id := blob.ID(rt.id)
	var buf outputBuffer
	err := call(r.Context(), finish, func(ctx context.Context) error {
		if length < 0 {
			// Kopia reads whole blobs only from offset 0; "from offset to the end" is cut here.
			if err := st.GetBlob(ctx, id, 0, -1, &buf); err != nil {
				return err
			}
			if offset > int64(buf.Len()) {
				return fmt.Errorf("%w: offset %d is past the end of blob %s (%d bytes)", blob.ErrInvalidRange, offset, id, buf.Len())
			}
			buf.Next(int(offset))
			return nil
		}
		if r.URL.Query().Get(queryAtMost) == "true" {
			md, err := st.GetMetadata(ctx, id)
			if err != nil {
				return err
			}
			if offset > md.Length {
				return fmt.Errorf("%w: offset %d is past the end of blob %s (%d bytes)", blob.ErrInvalidRange, offset, id, md.Length)
			}
			length = min(length, md.Length-offset)
		}
		err := st.GetBlob(ctx, id, offset, length, &buf)
		if err != nil && !errors.Is(err, blob.ErrBlobNotFound) && !errors.Is(err, blob.ErrInvalidRange) {
			// Kopia's filesystem storage reports a range past the end as a plain error.
			if md, merr := st.GetMetadata(ctx, id); merr == nil && offset+length > md.Length {
				return fmt.Errorf("%w: bytes %d-%d are past the end of blob %s (%d bytes)", blob.ErrInvalidRange, offset, offset+length, id, md.Length)
			}
		}
		return err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = buf.WriteTo(w)
}

func (s *Server) metadata(w http.ResponseWriter, r *http.Request, st blob.Storage, rt route, finish func()) {
	var md blob.Metadata
	err := call(r.Context(), finish, func(ctx context.Context) error {
		var err error
		md, err = st.GetMetadata(ctx, blob.ID(rt.id))
		return err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, blobMetadata{ID: string(md.BlobID), Length: md.Length, Timestamp: md.Timestamp})
}

// sliceBytes is the blob.Bytes of a byte slice.
type sliceBytes []byte

func (b sliceBytes) Length() int                        { return len(b) }
func (b sliceBytes) WriteTo(w io.Writer) (int64, error) { n, err := w.Write(b); return int64(n), err }
func (b sliceBytes) Reader() io.ReadSeekCloser          { return nopSeekCloser{bytes.NewReader(b)} }

type nopSeekCloser struct{ *bytes.Reader }

func (nopSeekCloser) Close() error { return nil }

func (s *Server) put(w http.ResponseWriter, r *http.Request, st blob.Storage, rt route, finish func()) {
	// The body is read whole (a pack, 10 MiB): kopia's storages take blob.Bytes, which they
	// may read more than once when they retry.
	body, err := readBody(r)
	if err != nil {
		finish()
		writeError(w, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	id := blob.ID(rt.id)
	doNotRecreate := r.Header.Get(headerDoNotRecreate) == "true"
	var modTime time.Time
	err = call(r.Context(), finish, func(ctx context.Context) error {
		if doNotRecreate {
			return s.putNew(ctx, st, id, body, &modTime)
		}
		return st.PutBlob(ctx, id, body, blob.PutOptions{GetModTime: &modTime})
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, blobMetadata{ID: rt.id, Length: int64(len(body)), Timestamp: modTime})
}

// putNew writes a blob that must not exist yet.
func (s *Server) putNew(ctx context.Context, st blob.Storage, id blob.ID, body sliceBytes, modTime *time.Time) error {
	select {
	case s.create <- struct{}{}:
		defer func() { <-s.create }()
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	switch _, err := st.GetMetadata(ctx, id); {
	case err == nil:
		return fmt.Errorf("%w: %s", blob.ErrBlobAlreadyExists, id)
	case !errors.Is(err, blob.ErrBlobNotFound):
		return err
	}
	return st.PutBlob(ctx, id, body, blob.PutOptions{GetModTime: modTime})
}

func readBody(r *http.Request) (sliceBytes, error) {
	if r.ContentLength > maxBlobSize {
		return nil, fmt.Errorf("a blob may have at most %d bytes, not %d", maxBlobSize, r.ContentLength)
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(nil, r.Body, maxBlobSize)); err != nil {
		return nil, fmt.Errorf("reading the blob: %w", err)
	}
	if r.ContentLength >= 0 && int64(buf.Len()) != r.ContentLength {
		return nil, fmt.Errorf("the blob has %d bytes, its Content-Length says %d", buf.Len(), r.ContentLength)
	}
	return buf.Bytes(), nil
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, st blob.Storage, rt route, finish func()) {
	err := call(r.Context(), finish, func(ctx context.Context) error { return st.DeleteBlob(ctx, blob.ID(rt.id)) })
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// list streams the listing as NDJSON while the storage lists, so a large one is never held
// in memory. Once the 200 is sent, an error can only be told in the stream.
func (s *Server) list(w http.ResponseWriter, r *http.Request, st blob.Storage, finish func()) {
	prefix := r.URL.Query().Get("prefix") // checked by checkQuery
	w.Header().Set("Content-Type", contentTypeNDJSON)
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	// The storage's callback runs in call's goroutine; once the handler has returned it must
	// not write to w any more.
	var mu sync.Mutex
	closed := false
	emit := func(l listLine) error {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return errors.New("the client went away")
		}
		return enc.Encode(l)
	}
	err := call(r.Context(), finish, func(ctx context.Context) error {
		return st.ListBlobs(ctx, blob.ID(prefix), func(m blob.Metadata) error {
			return emit(listLine{ID: string(m.BlobID), Length: m.Length, Timestamp: m.Timestamp})
		})
	})
	if err != nil {
		s.logFailure(r, err)
		_ = emit(listLine{Error: err.Error()})
	} else {
		_ = emit(listLine{End: true})
	}
	mu.Lock()
	closed = true
	_ = bw.Flush()
	mu.Unlock()
}

// fail answers err with its status and code.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // nobody is listening
	}
	status, code := statusOf(err)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int(maintenanceRetryAfter.Seconds())))
	}
	if status >= 500 {
		s.logFailure(r, err)
	}
	writeError(w, status, code, err.Error())
}

func (s *Server) logFailure(r *http.Request, err error) {
	if r.Context().Err() == nil {
		s.Log.Error(err, "Blob proxy request failed", "method", r.Method, "path", r.URL.Path)
	}
}

// statusOf is the HTTP status and code of an error. Errors from the storage that match none
// of kopia's are 500, which the client does not retry: kopia's storages have retried already.
func statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, blob.ErrBlobNotFound):
		return http.StatusNotFound, codeNotFound
	case errors.Is(err, blob.ErrInvalidRange):
		return http.StatusRequestedRangeNotSatisfiable, codeInvalidRange
	case errors.Is(err, blob.ErrBlobAlreadyExists):
		return http.StatusConflict, codeAlreadyExists
	case errors.Is(err, ErrNoSession):
		return http.StatusConflict, codeNoSession
	case errors.Is(err, ErrMaintenanceRunning):
		return http.StatusServiceUnavailable, codeMaintenance
	case errors.Is(err, location.ErrBlobTooLarge):
		// 500, which the client does not retry: the blob stays too large.
		return http.StatusInternalServerError, codeTooLarge
	}
	return http.StatusInternalServerError, codeBackend
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set(headerError, code)
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
