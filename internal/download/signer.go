// Package download serves the files of filesystem storage locations over HTTP to whoever holds
// a URL the DownloadRequest reconciler signed (DESIGN.md section 12). A URL names one object
// of one location and an expiry, under an HMAC-SHA256 signature with a key only the manager
// knows; the server serves exactly what a valid, unexpired signature names and nothing else.
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

// Object is what a URL names: one object of one location, until Expires.
type Object struct {
	Location string
	Key      string
	Expires  time.Time
}

// mac is the signature of o. Each field is length-prefixed, so no two different objects share
// an input ("a"+"b/c" vs "a/b"+"c"), and the expiry is in whole seconds, as the URL carries it.
func (s *Signer) mac(location, key string, expires int64) []byte {
	h := hmac.New(sha256.New, s.key)
	fmt.Fprintf(h, "cairn-download-v1\n%d:%s\n%d:%s\n%d", len(location), location, len(key), key, expires)
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
	q.Set(paramSignature, hex.EncodeToString(s.mac(o.Location, o.Key, expires)))
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
	location, key := query.Get(paramLocation), query.Get(paramKey)
	expires, err := strconv.ParseInt(query.Get(paramExpires), 10, 64)
	if err != nil {
		return Object{}, ErrBadSignature
	}
	got, err := hex.DecodeString(query.Get(paramSignature))
	if err != nil || !hmac.Equal(got, s.mac(location, key, expires)) {
		return Object{}, ErrBadSignature
	}
	if now.Unix() >= expires {
		return Object{}, ErrExpired
	}
	return Object{Location: location, Key: key, Expires: time.Unix(expires, 0)}, nil
}
