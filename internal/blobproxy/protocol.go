package blobproxy

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kopia/kopia/repo/blob"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cairn-backup/cairn/internal/location"
)

const (
	// StorageType is the kopia storage type of the client, in a repository's ConnectionInfo.
	StorageType = "cairn-proxy"
	// Audience is the audience of the tokens node agents present: a token made for the API
	// server (or anything else) is not accepted here, and this one is useless elsewhere.
	Audience = "cairn-repository"

	// queryAtMost on a GET of a blob makes its length a maximum: a client reading ahead
	// does not know where a pack ends.
	queryAtMost = "atMost"

	headerSession       = "Cairn-Session"
	headerDoNotRecreate = "Cairn-Do-Not-Recreate"
	headerError         = "Cairn-Error"

	contentTypeNDJSON = "application/x-ndjson"

	// maxBlobSize bounds a PUT body and every read, in both directions: the repositories'
	// own bound (location.MaxBlobSize says why it is 128 MiB).
	maxBlobSize = location.MaxBlobSize
	// maxBlobIDLength is far above kopia's longest blob IDs (about 80 characters).
	maxBlobIDLength = 256
)

// Error codes, in the Cairn-Error header of an error response.
const (
	codeBadRequest    = "bad-request"
	codeUnauthorized  = "unauthorized"
	codeNotFound      = "not-found"
	codeInvalidRange  = "invalid-range"
	codeAlreadyExists = "already-exists"
	codeNoSession     = "no-session"
	codeReadOnly      = "read-only"
	codeMaintenance   = "maintenance"
	codeNotLeader     = "not-leader"
	codeUnavailable   = "unavailable"
	codeBackend       = "backend"
	codeTooLarge      = "too-large"
)

var (
	// ErrNoSession is wrapped by the errors of requests made without a live session, and by
	// every call of a client whose session was lost.
	ErrNoSession = errors.New("no live session with the blob proxy")
	// ErrMaintenanceRunning is wrapped by the error of a session refused while the repository
	// is being maintained; the caller may try again later.
	ErrMaintenanceRunning = errors.New("repository maintenance running")
	// ErrReadOnly is wrapped by the error of a write to a ReadOnly location.
	ErrReadOnly = errors.New("storage location is ReadOnly")
	// ErrRefused is wrapped by an Authenticator's error for a token it does not accept.
	ErrRefused = errors.New("not allowed to use the blob proxy")
)

// ServerError is an error response of the proxy. Its text is the server's message, which says
// what went wrong for a person (a PodVolumeBackup's status.message); errors.Is matches it with
// the kopia or package error of its code.
type ServerError struct {
	Status  int
	Code    string
	Message string
}

func (e *ServerError) Error() string { return e.Message }

// Is maps the error's code to kopia's errors, so kopia handles a missing blob or an invalid
// range as it does with its own storages.
func (e *ServerError) Is(target error) bool {
	switch e.Code {
	case codeNotFound:
		return target == blob.ErrBlobNotFound
	case codeInvalidRange:
		return target == blob.ErrInvalidRange
	case codeAlreadyExists:
		return target == blob.ErrBlobAlreadyExists
	case codeNoSession:
		return target == ErrNoSession
	case codeMaintenance:
		return target == ErrMaintenanceRunning
	case codeReadOnly:
		return target == ErrReadOnly
	case codeUnauthorized:
		return target == ErrRefused
	case codeTooLarge:
		return target == location.ErrBlobTooLarge
	}
	return false
}

// route is a parsed request path.
type route struct {
	location, namespace string
	kind                string // one of the kind* constants
	id                  string // blob or session ID; "" for the collections
}

const (
	kindBlob     = "blob"
	kindBlobs    = "blobs"
	kindMetadata = "metadata"
	kindSessions = "sessions"
	kindSession  = "session"
)

// parseRoute parses an escaped request path. Each segment is unescaped on its own, so an
// encoded slash stays inside its segment, where validation refuses it; "." and ".." segments
// are refused, never resolved.
func parseRoute(escapedPath string) (route, error) {
	segs := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	if len(segs) < 4 || len(segs) > 5 || segs[0] != "repositories" {
		return route{}, errors.New("no such path: want /repositories/{location}/{namespace}/{blobs|metadata|sessions}[/{id}]")
	}
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil {
			return route{}, fmt.Errorf("path segment %q: %w", s, err)
		}
		segs[i] = u
	}
	r := route{location: segs[1], namespace: segs[2]}
	if errs := validation.IsDNS1123Subdomain(r.location); len(errs) > 0 {
		return route{}, fmt.Errorf("storage location %q: %s", r.location, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(r.namespace); len(errs) > 0 {
		return route{}, fmt.Errorf("namespace %q: %s", r.namespace, strings.Join(errs, "; "))
	}
	hasID := len(segs) == 5
	if hasID {
		r.id = segs[4]
	}
	switch {
	case segs[3] == "blobs" && hasID:
		r.kind = kindBlob
	case segs[3] == "blobs":
		r.kind = kindBlobs
	case segs[3] == "metadata" && hasID:
		r.kind = kindMetadata
	case segs[3] == "sessions" && hasID:
		r.kind = kindSession
	case segs[3] == "sessions":
		r.kind = kindSessions
	default:
		return route{}, fmt.Errorf("no such path: %q", escapedPath)
	}
	if r.kind == kindBlob || r.kind == kindMetadata {
		if err := checkBlobID(r.id, false); err != nil {
			return route{}, err
		}
	}
	if r.kind == kindSession && !isSessionID(r.id) {
		return route{}, fmt.Errorf("session ID %q is not one this proxy makes", r.id)
	}
	return r, nil
}

// checkBlobID accepts kopia's blob IDs (and, when prefix, their prefixes, which may be
// empty): letters, digits, '_', '-' and '.', never "..", never starting with "." (the
// storages' own hidden files, such as .shards and .storageconfig, are not blobs).
func checkBlobID(id string, prefix bool) error {
	what := "blob ID"
	if prefix {
		what = "blob ID prefix"
	}
	switch {
	case id == "" && !prefix:
		return fmt.Errorf("empty %s", what)
	case len(id) > maxBlobIDLength:
		return fmt.Errorf("%s longer than %d characters", what, maxBlobIDLength)
	case strings.HasPrefix(id, ".") || strings.Contains(id, ".."):
		return fmt.Errorf("%s %q starts with '.' or has '..'", what, id)
	}
	for _, c := range id {
		if !isBlobIDChar(c) {
			return fmt.Errorf("%s %q has %q: only letters, digits, '_', '-' and '.' are allowed", what, id, c)
		}
	}
	return nil
}

func isBlobIDChar(c rune) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-' || c == '.'
}

// parseRange reads a GET's offset and length: offset >= 0, length >= 0 or -1 (from offset to
// the end); by default the whole blob.
func parseRange(q url.Values) (offset, length int64, err error) {
	length = -1
	if s := q.Get("offset"); s != "" {
		if offset, err = strconv.ParseInt(s, 10, 64); err != nil || offset < 0 {
			return 0, 0, fmt.Errorf("offset %q must be a number >= 0", s)
		}
	}
	if s := q.Get("length"); s != "" {
		if length, err = strconv.ParseInt(s, 10, 64); err != nil || length < -1 {
			return 0, 0, fmt.Errorf("length %q must be a number >= -1", s)
		}
	}
	return offset, length, nil
}

// blobMetadata is one blob in a metadata answer, a PUT's answer and a listing.
type blobMetadata struct {
	ID        string    `json:"id"`
	Length    int64     `json:"length"`
	Timestamp time.Time `json:"timestamp"`
}

// listLine is one line of a listing: a blob, or the end (End), or the error that cut it short.
// A listing that stops without either was cut off.
type listLine struct {
	ID        string    `json:"id,omitempty"`
	Length    int64     `json:"length,omitempty"`
	Timestamp time.Time `json:"timestamp,omitzero"`
	End       bool      `json:"end,omitempty"`
	Error     string    `json:"error,omitempty"`
}

// sessionInfo is the answer to POST sessions.
type sessionInfo struct {
	ID        string `json:"id"`
	TTLMillis int64  `json:"ttlMillis"`
	ReadOnly  bool   `json:"readOnly"`
}

// RepositoryKey names the repository of namespace in location, for Locks.
func RepositoryKey(location, namespace string) string { return location + "/" + namespace }

// readOnlyMessage is what a write to a ReadOnly location is told.
func readOnlyMessage(location string) string {
	return fmt.Sprintf("storage location %s is ReadOnly: volume data cannot be written to it", location)
}
