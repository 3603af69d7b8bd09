package storage

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"filippo.io/age"
	"golang.org/x/crypto/chacha20poly1305"
)

// Encryption at rest (DESIGN.md section 18, docs/storage.md). Every object is an age file
// (filippo.io/age): a header naming the key the object was written with, then the content in
// 64 KiB chunks, each sealed with ChaCha20-Poly1305 under a random per-object file key, so
// memory stays flat for any size and a changed, cut or reordered chunk fails to decrypt. The
// file key is wrapped by Cairn's own age recipient type, keyStanzaType, under one of the
// location's named 32-byte keys (XChaCha20-Poly1305); the stanza names the key, so a read
// picks it by name and a key can be rotated: new objects are written with the new one while
// the old ones stay readable as long as the old key is kept.

// keyStanzaType is the age recipient stanza of a file key wrapped under a named key.
const keyStanzaType = "cairn-key"

// KeySize is the size of an encryption key: 32 random bytes.
const KeySize = 32

// ErrUnknownKey is wrapped by the error of reading an object written with a key the keyring
// does not hold; ErrWrongKey by that of one whose key of the same name is not the key it was
// written with; ErrNotEncrypted by that of an object that is not encrypted (or not by Cairn).
var (
	ErrUnknownKey   = errors.New("unknown encryption key")
	ErrWrongKey     = errors.New("wrong encryption key")
	ErrNotEncrypted = errors.New("the object is not encrypted")
)

// Keyring is a location's named keys and the one new objects are written with.
type Keyring struct {
	Keys     map[string][]byte
	WriteKey string
}

var keyName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,253}$`)

// Validate says what is wrong with the keyring for a person: a write key it does not hold, a
// key that is not 32 bytes, a name that cannot be recorded in an object.
func (k Keyring) Validate() error {
	if k.WriteKey == "" {
		return errors.New("no write key is named")
	}
	if _, ok := k.Keys[k.WriteKey]; !ok {
		return fmt.Errorf("%w: the write key %q is not among the keys (%s)", ErrUnknownKey, k.WriteKey, strings.Join(k.names(), ", "))
	}
	for name, key := range k.Keys {
		if !keyName.MatchString(name) {
			return fmt.Errorf("key name %q is not letters, digits, '.', '_' or '-'", name)
		}
		if len(key) != KeySize {
			return fmt.Errorf("key %q is %d bytes, not %d (make one with: openssl rand 32)", name, len(key), KeySize)
		}
	}
	return nil
}

func (k Keyring) names() []string {
	names := make([]string, 0, len(k.Keys))
	for n := range k.Keys {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Encrypted returns s with every object encrypted on Put and decrypted on Get with keys.
// Presigned URLs are not offered for it (a URL would hand out ciphertext): downloads of an
// encrypted location are served, decrypted, by the manager.
func Encrypted(s ObjectStore, keys Keyring) (ObjectStore, error) {
	if err := keys.Validate(); err != nil {
		return nil, err
	}
	return encryptedStore{ObjectStore: s, keys: keys}, nil
}

type encryptedStore struct {
	ObjectStore
	keys Keyring
}

// Put encrypts r with the write key as it streams it into key.
func (s encryptedStore) Put(ctx context.Context, key string, r io.Reader) error {
	enc, err := age.EncryptReader(r, keyRecipient{name: s.keys.WriteKey, key: s.keys.Keys[s.keys.WriteKey]})
	if err != nil {
		return fmt.Errorf("encrypting %s: %w", key, err)
	}
	return s.ObjectStore.Put(ctx, key, enc)
}

// Get opens key and decrypts it with the key it names. A missing, changed or wrong key is an
// error naming it; a chunk that does not authenticate is an error of the reader.
func (s encryptedStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.ObjectStore.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	id := &keyIdentity{keys: s.keys}
	plain, err := age.Decrypt(rc, id)
	if err != nil {
		_ = rc.Close()
		return nil, decryptError(key, id, err)
	}
	return decryptedReader{Reader: plain, key: key, closer: rc}, nil
}

// decryptError says why key could not be opened.
func decryptError(key string, id *keyIdentity, err error) error {
	var noMatch *age.NoIdentityMatchError
	switch {
	case errors.Is(err, ErrWrongKey):
		return fmt.Errorf("decrypting %s: %w", key, err)
	case errors.As(err, &noMatch) && id.unknown != "":
		return fmt.Errorf("decrypting %s: %w: it was written with key %q, which the location's key Secret no longer holds (it holds %s)",
			key, ErrUnknownKey, id.unknown, strings.Join(id.keys.names(), ", "))
	case errors.As(err, &noMatch):
		return fmt.Errorf("decrypting %s: %w: it was not written by Cairn with a named key", key, ErrNotEncrypted)
	}
	return fmt.Errorf("decrypting %s: %w: %w", key, ErrNotEncrypted, err)
}

// ListFunc implements Lister as the store it wraps does.
func (s encryptedStore) ListFunc(ctx context.Context, prefix string, fn func(key string) error) error {
	return listEach(ctx, s.ObjectStore, prefix, fn)
}

// AbortIncompleteUploads implements UploadAborter as the store it wraps does.
func (s encryptedStore) AbortIncompleteUploads(ctx context.Context, prefix string) (int, error) {
	return AbortIncompleteUploads(ctx, s.ObjectStore, prefix)
}

type decryptedReader struct {
	io.Reader
	key    string
	closer io.Closer
}

func (d decryptedReader) Read(p []byte) (int, error) {
	n, err := d.Reader.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("decrypting %s: %w", d.key, err)
	}
	return n, err
}

func (d decryptedReader) Close() error { return d.closer.Close() }

// keyRecipient wraps a file key under a named key.
type keyRecipient struct {
	name string
	key  []byte
}

func (r keyRecipient) Wrap(fileKey []byte) ([]*age.Stanza, error) {
	aead, err := chacha20poly1305.NewX(r.key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return []*age.Stanza{{
		Type: keyStanzaType,
		Args: []string{r.name, base64.RawStdEncoding.EncodeToString(nonce)},
		Body: aead.Seal(nil, nonce, fileKey, []byte(keyStanzaType+" "+r.name)),
	}}, nil
}

// keyIdentity unwraps the file key of a stanza naming one of its keys. It remembers a key
// name it does not hold, for the error.
type keyIdentity struct {
	keys    Keyring
	unknown string
}

func (id *keyIdentity) Unwrap(stanzas []*age.Stanza) ([]byte, error) {
	for _, s := range stanzas {
		if s.Type != keyStanzaType || len(s.Args) != 2 {
			continue
		}
		key, ok := id.keys.Keys[s.Args[0]]
		if !ok {
			id.unknown = s.Args[0]
			continue
		}
		nonce, err := base64.RawStdEncoding.DecodeString(s.Args[1])
		if err != nil {
			return nil, fmt.Errorf("%w: a malformed key stanza", ErrNotEncrypted)
		}
		aead, err := chacha20poly1305.NewX(key)
		if err != nil {
			return nil, err
		}
		if len(nonce) != aead.NonceSize() {
			return nil, fmt.Errorf("%w: a malformed key stanza", ErrNotEncrypted)
		}
		fileKey, err := aead.Open(nil, nonce, s.Body, []byte(keyStanzaType+" "+s.Args[0]))
		if err != nil {
			return nil, fmt.Errorf("%w: key %q is not the key the object was written with (was it changed in the Secret?)", ErrWrongKey, s.Args[0])
		}
		return fileKey, nil
	}
	return nil, age.ErrIncorrectIdentity
}
