// Package download serves the files of storage locations over HTTP for the URLs the
// DownloadRequest reconciler signed (DESIGN.md sections 12 and 21). A URL names one object of
// one location, an expiry, the digest the object's bytes must have (its backup's commit
// marker's) and the requester it serves, under an HMAC-SHA256 signature with a key only the
// manager knows; the server serves exactly what a valid, unexpired signature names, to the
// requester it names (their Kubernetes token, checked by a TokenReview), and nothing else.
package download

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Path is the URL path of the download server's one endpoint.
const Path = "/download"

// The query parameters of a signed URL.
const (
	paramLocation  = "location"
	paramKey       = "key"
	paramExpires   = "expires"
	paramSignature = "signature"
	paramSHA256    = "sha256"
	paramSize      = "size"
	paramUser      = "user"
	paramUID       = "uid"
)

// KeySize is the size in bytes of a signing key.
const KeySize = 32

var (
	// ErrBadSignature means a URL's signature does not match what it names.
	ErrBadSignature = errors.New("the signature does not match")
	// ErrExpired means a URL's validity has ended.
	ErrExpired = errors.New("the URL has expired")
)

// Signer signs and verifies download URLs with one key.
type Signer struct {
	key []byte
}

// NewSigner returns a signer with key, which must be at least KeySize bytes.
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < KeySize {
		return nil, fmt.Errorf("a signing key needs at least %d bytes, got %d", KeySize, len(key))
	}
	return &Signer{key: append([]byte(nil), key...)}, nil
}

// NewRandomSigner returns a signer with a fresh random key: URLs it signs are valid only on
// this process's server.
func NewRandomSigner() (*Signer, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generating the download signing key: %w", err)
	}
	return NewSigner(key)
}

// Object is what a URL names: one object of one location, until Expires, for Requester.
type Object struct {
	Location string
	Key      string
	Expires  time.Time
	// Digest is what the object's bytes must be (its backup's commit marker's record): the
	// server verifies them as it streams. Nil when nothing is recorded (a restore's files, a
	// backup that never committed, a marker older than the record).
	Digest *Digest
	// Requester is the one person the URL serves: the caller's Kubernetes token must be
	// theirs. Nil serves whoever holds the URL (the operator's namespace, where the operator
	// acts with its own rights).
	Requester *Requester
}

// Digest is the SHA-256 (hex) and size of an object's bytes.
type Digest struct {
	SHA256 string
	Size   int64
}

// Requester is who a URL serves: a Kubernetes username and, when the request recorded one,
// their UID.
type Requester struct {
	Username string
	UID      string
}

// fields are what a URL's signature covers, in order: absent ones are empty.
func (o Object) fields(expires int64) []string {
	f := []string{o.Location, o.Key, strconv.FormatInt(expires, 10), "", "", "", ""}
	if o.Digest != nil {
		f[3], f[4] = o.Digest.SHA256, strconv.FormatInt(o.Digest.Size, 10)
	}
	if o.Requester != nil {
		f[5], f[6] = o.Requester.Username, o.Requester.UID
	}
	return f
}

// mac is the signature of fields. Each field is length-prefixed, so no two different objects
// share an input ("a"+"b/c" vs "a/b"+"c"), and the expiry is in whole seconds, as the URL
// carries it.
func (s *Signer) mac(fields []string) []byte {
	h := hmac.New(sha256.New, s.key)
	fmt.Fprint(h, "cairn-download-v2\n")
	for _, f := range fields {
		fmt.Fprintf(h, "%d:%s\n", len(f), f)
	}
	return h.Sum(nil)
}

// URL returns the signed URL of o on the server reached at base (such as
// http://cairn.cairn-system:8086).
func (s *Signer) URL(base string, o Object) string {
	expires := o.Expires.Unix()
	q := url.Values{}
	q.Set(paramLocation, o.Location)
	q.Set(paramKey, o.Key)
	q.Set(paramExpires, strconv.FormatInt(expires, 10))
	if o.Digest != nil {
		q.Set(paramSHA256, o.Digest.SHA256)
		q.Set(paramSize, strconv.FormatInt(o.Digest.Size, 10))
	}
	if o.Requester != nil {
		q.Set(paramUser, o.Requester.Username)
		q.Set(paramUID, o.Requester.UID)
	}
	q.Set(paramSignature, hex.EncodeToString(s.mac(o.fields(expires))))
	return strings.TrimSuffix(base, "/") + Path + "?" + q.Encode()
}

// Verify returns the object a URL's query names if its signature is valid and it has not
// expired at now: ErrBadSignature or ErrExpired otherwise. The signature is compared in
// constant time, and checked before the expiry so that an answer says nothing about a forged
// URL's fields.
func (s *Signer) Verify(query url.Values, now time.Time) (Object, error) {
	for _, p := range []string{paramLocation, paramKey, paramExpires, paramSignature} {
		if len(query[p]) != 1 {
			return Object{}, ErrBadSignature
		}
	}
	for _, p := range []string{paramSHA256, paramSize, paramUser, paramUID} {
		if len(query[p]) > 1 {
			return Object{}, ErrBadSignature
		}
	}
	o := Object{Location: query.Get(paramLocation), Key: query.Get(paramKey)}
	expires, err := strconv.ParseInt(query.Get(paramExpires), 10, 64)
	if err != nil {
		return Object{}, ErrBadSignature
	}
	if query.Has(paramSHA256) || query.Has(paramSize) {
		size, err := strconv.ParseInt(query.Get(paramSize), 10, 64)
		if err != nil || size < 0 || query.Get(paramSHA256) == "" {
			return Object{}, ErrBadSignature
		}
		o.Digest = &Digest{SHA256: query.Get(paramSHA256), Size: size}
	}
	if query.Get(paramUser) != "" {
		o.Requester = &Requester{Username: query.Get(paramUser), UID: query.Get(paramUID)}
	}
	got, err := hex.DecodeString(query.Get(paramSignature))
	if err != nil || !hmac.Equal(got, s.mac(o.fields(expires))) {
		return Object{}, ErrBadSignature
	}
	if now.Unix() >= expires {
		return Object{}, ErrExpired
	}
	o.Expires = time.Unix(expires, 0)
	return o, nil
}
