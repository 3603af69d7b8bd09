package storage

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"filippo.io/age"
	tinkstream "github.com/tink-crypto/tink-go/v2/streamingaead/subtle"
	"golang.org/x/crypto/chacha20poly1305"
)

// Encryption at rest (DESIGN.md sections 18 and 21, docs/storage.md, docs/format.md). Every
// object is written as one header line naming the key it was written with, then the content
// sealed by Tink's streaming AEAD, AES-256-GCM-HKDF in 64 KiB segments: a per-object AES-256
// key derived (HKDF-SHA256) from the named key, a random salt and the associated data, which is
// the header line followed by the object's key relative to the location's prefix, so the header
// and the place the object was written to are bound to every segment: an object moved or
// copied to another key fails to decrypt, while the bucket copied under another prefix, or read
// through a location of another name, still reads. Each segment's nonce holds its number and
// whether it is the last, so a changed, cut or reordered segment fails to decrypt, and memory
// stays flat for any size.
//
//	cairn-aes256gcm/v2 <key name> <key check>\n
//	<Tink header: 1 length byte, 32-byte salt, 7-byte nonce prefix> <segments>
//
// Objects of format v1 (written before issue 40) have the header line alone as associated
// data; they are still read, never written.
//
// The key check (16 bytes of HKDF-SHA256 of the named key, base64) tells a key that is not the
// one an object was written with from an object that was changed. Objects written by earlier
// builds are age files (filippo.io/age: ChaCha20-Poly1305 in 64 KiB chunks, the file key
// wrapped under the named key in a "cairn-key" stanza); they are still read, never written.

// EncryptedFormat starts the header line of every object Cairn writes to an encrypted location.
const EncryptedFormat = "cairn-aes256gcm/v2"

// encryptedFormatV1 is the format earlier builds wrote, whose associated data is the header
// line alone: still read, never written.
const encryptedFormatV1 = "cairn-aes256gcm/v1"

// encryptedFormatFamily starts every version's format name.
const encryptedFormatFamily = "cairn-aes256gcm/"

// KeySize is the size of an encryption key: 32 random bytes.
const KeySize = 32

const (
	// segmentSize is the size of a sealed segment (64 KiB of ciphertext, its 16-byte tag
	// included): what a reader or writer holds of an object at once, twice over.
	segmentSize = 64 << 10
	// keyCheckSize is the size of the key check in the header line.
	keyCheckSize = 16
	// maxHeaderLine bounds the header line a reader looks for: the longest key name, its check
	// and the format name fit in well under it.
	maxHeaderLine = 512
	// ageFormat starts the age files earlier builds wrote; ageKeyStanza is their recipient
	// stanza of a file key wrapped under a named key.
	ageFormat    = "age-encryption.org/v1\n"
	ageKeyStanza = "cairn-key"
)

// ErrUnknownKey is wrapped by the error of reading an object written with a key the keyring
// does not hold; ErrWrongKey by that of one whose key of the same name is not the key it was
// written with; ErrNotEncrypted by that of an object that is not encrypted (or not by Cairn);
// ErrDamaged by that of an encrypted object whose bytes were changed, cut or reordered.
var (
	ErrUnknownKey   = errors.New("unknown encryption key")
	ErrWrongKey     = errors.New("wrong encryption key")
	ErrNotEncrypted = errors.New("the object is not encrypted")
	ErrDamaged      = errors.New("the encrypted object is damaged")
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
// prefix is the location's objectStorage.prefix: each object is bound to its key relative to
// it (relativeKey), so an object read under another key than it was written to fails to
// decrypt. Presigned URLs are not offered for it (a URL would hand out ciphertext): downloads
// of an encrypted location are served, decrypted, by the manager.
func Encrypted(s ObjectStore, keys Keyring, prefix string) (ObjectStore, error) {
	if err := keys.Validate(); err != nil {
		return nil, err
	}
	sealers := make(map[string]sealer, len(keys.Keys))
	for name, key := range keys.Keys {
		sl, err := newSealer(name, key)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", name, err)
		}
		sealers[name] = sl
	}
	return encryptedStore{ObjectStore: s, keys: keys, sealers: sealers, prefix: prefix, ahead: true}, nil
}

type encryptedStore struct {
	ObjectStore
	keys    Keyring
	sealers map[string]sealer
	// prefix is the location's prefix, which the key an object is bound to leaves out.
	prefix string
	// ahead has objects decrypted ahead of their reader, and a Put's stream read ahead of
	// its sealing (encrypted_ahead.go).
	ahead bool
}

// sealer is one named key made ready to seal and open objects.
type sealer struct {
	// header is the header line of an object written with the key; checks its key check in
	// each format read.
	header []byte
	checks map[string][]byte
	stream *tinkstream.AESGCMHKDF
}

func newSealer(name string, key []byte) (sealer, error) {
	checks := map[string][]byte{}
	for _, format := range []string{EncryptedFormat, encryptedFormatV1} {
		check, err := keyCheck(format, name, key)
		if err != nil {
			return sealer{}, err
		}
		checks[format] = check
	}
	stream, err := tinkstream.NewAESGCMHKDF(key, "SHA256", KeySize, segmentSize, 0)
	if err != nil {
		return sealer{}, err
	}
	header := fmt.Appendf(nil, "%s %s %s\n", EncryptedFormat, name, base64.RawStdEncoding.EncodeToString(checks[EncryptedFormat]))
	return sealer{header: header, checks: checks, stream: stream}, nil
}

// keyCheck is the value an object's header line of format records to tell that the key of
// its name is the key it was written with. It is derived from the key apart from anything that
// seals data (another salt and info), and says nothing of the key.
func keyCheck(format, name string, key []byte) ([]byte, error) {
	return hkdf.Key(sha256.New, key, []byte("cairn key check"), format+" "+name, keyCheckSize)
}

// associatedData is what an object's key is derived with: its header line (newline included)
// and, from format v2 on, the object's key relative to the location's prefix. The header line
// ends at its one newline, so no two (line, key) pairs give the same bytes.
func associatedData(format string, line []byte, relKey string) []byte {
	ad := bytes.Clone(line)
	if format == encryptedFormatV1 {
		return ad
	}
	return append(ad, relKey...)
}

// relativeKey is key without the location's prefix: what an object is bound to, so that the
// same bucket read under another prefix (copied there) or through a location of another name
// still decrypts. A key outside the prefix (none is made) is bound as it is.
func relativeKey(prefix, key string) string {
	p := strings.Trim(prefix, "/")
	if p == "" {
		return key
	}
	if rest, ok := strings.CutPrefix(key, p+"/"); ok {
		return rest
	}
	return key
}

// headerLine is what an object's header line says.
type headerLine struct {
	format string
	key    string
	check  []byte
}

// parseHeader reads the header line of an object (its final newline included).
func parseHeader(line []byte) (headerLine, error) {
	fields := strings.Split(strings.TrimSuffix(string(line), "\n"), " ")
	format := fields[0]
	known := format == EncryptedFormat || format == encryptedFormatV1
	switch {
	case !known && strings.HasPrefix(format, encryptedFormatFamily):
		return headerLine{}, fmt.Errorf("%w by this version of Cairn: it is in format %q, not %s or %s (was it written by a newer Cairn?)",
			ErrNotEncrypted, format, EncryptedFormat, encryptedFormatV1)
	case !known:
		return headerLine{}, fmt.Errorf("%w: it was not written by Cairn with a named key", ErrNotEncrypted)
	case len(fields) != 3 || !keyName.MatchString(fields[1]):
		return headerLine{}, fmt.Errorf("%w: its %s header line is malformed", ErrDamaged, format)
	}
	check, err := base64.RawStdEncoding.Strict().DecodeString(fields[2])
	if err != nil || len(check) != keyCheckSize {
		return headerLine{}, fmt.Errorf("%w: its %s header line is malformed", ErrDamaged, format)
	}
	return headerLine{format: format, key: fields[1], check: check}, nil
}

// startsLikeHeader says whether b is, or starts with, the start of a header line.
func startsLikeHeader(b []byte) bool {
	prefix := encryptedFormatFamily
	n := min(len(b), len(prefix))
	return string(b[:n]) == prefix[:n]
}

// Put encrypts r with the write key as it streams it into key.
func (s encryptedStore) Put(ctx context.Context, key string, r io.Reader) error {
	if s.ahead {
		a := newAheadReader(r)
		// r is not read any more once Put returns.
		defer a.stop()
		r = a
	}
	enc, err := s.sealers[s.keys.WriteKey].encryptReader(r, relativeKey(s.prefix, key))
	if err != nil {
		return fmt.Errorf("encrypting %s: %w", key, err)
	}
	return s.ObjectStore.Put(ctx, key, enc)
}

// Get opens key and decrypts it with the key it names. A missing, changed or wrong key is an
// error naming it; a segment that does not authenticate is an error of the reader.
func (s encryptedStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.ObjectStore.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	plain, err := s.open(key, rc)
	if err != nil {
		_ = rc.Close()
		return nil, err
	}
	if s.ahead {
		return aheadReadCloser{aheadReader: newAheadReader(plain), closer: rc}, nil
	}
	return plain, nil
}

// open reads the header of the object rc holds and returns the reader of its content: the
// format's, or age's for an object an earlier build wrote. openAge's key is already relative.
func (s encryptedStore) open(key string, rc io.ReadCloser) (io.ReadCloser, error) {
	// Errors name the object by its key relative to the location's prefix, as the object is
	// bound to it: a team's member is told which object, never where the location stores it.
	name := relativeKey(s.prefix, key)
	src := &sourceErrors{r: rc}
	br := bufio.NewReaderSize(src, maxHeaderLine)
	if start, _ := br.Peek(len(ageFormat)); string(start) == ageFormat {
		return s.openAge(name, br, rc)
	}
	line, err := br.ReadSlice('\n')
	switch {
	case src.err != nil:
		return nil, fmt.Errorf("decrypting %s: %w", name, src.err)
	case len(line) == 0:
		return nil, fmt.Errorf("decrypting %s: %w: it is empty", name, ErrNotEncrypted)
	case err != nil && startsLikeHeader(line):
		return nil, fmt.Errorf("decrypting %s: %w: its %s header line is cut short or too long", name, ErrDamaged, encryptedFormatFamily)
	case err != nil:
		return nil, fmt.Errorf("decrypting %s: %w: it was not written by Cairn with a named key", name, ErrNotEncrypted)
	}
	h, err := parseHeader(line)
	if err != nil {
		return nil, fmt.Errorf("decrypting %s: %w", name, err)
	}
	sl, ok := s.sealers[h.key]
	if !ok {
		return nil, fmt.Errorf("decrypting %s: %w: it was written with key %q, which the location's key Secret no longer holds (it holds %s)",
			name, ErrUnknownKey, h.key, strings.Join(s.keys.names(), ", "))
	}
	if subtle.ConstantTimeCompare(h.check, sl.checks[h.format]) != 1 {
		return nil, fmt.Errorf("decrypting %s: %w: key %q is not the key the object was written with (was it changed in the Secret?)", name, ErrWrongKey, h.key)
	}
	// The whole header line, and the object's key (v2), are the associated data the object's
	// key is derived with: a key name or check changed after writing, or the object moved to
	// another key, fails every segment.
	plain, err := sl.stream.NewDecryptingReader(br, associatedData(h.format, line, name))
	if err != nil {
		if src.err != nil {
			return nil, fmt.Errorf("decrypting %s: %w", name, src.err)
		}
		return nil, fmt.Errorf("decrypting %s: %w: its segment header is cut short or malformed: %w", name, ErrDamaged, err)
	}
	return &decryptingReader{r: plain, src: src, key: name, bound: h.format != encryptedFormatV1, closer: rc}, nil
}

// openAge opens an age file written by an earlier build.
func (s encryptedStore) openAge(key string, r io.Reader, closer io.Closer) (io.ReadCloser, error) {
	id := &ageKeyIdentity{keys: s.keys}
	plain, err := age.Decrypt(r, id)
	if err != nil {
		return nil, ageDecryptError(key, id, err)
	}
	return &decryptingReader{r: plain, key: key, closer: closer}, nil
}

// ListFunc implements Lister as the store it wraps does.
func (s encryptedStore) ListFunc(ctx context.Context, prefix string, fn func(key string) error) error {
	return listEach(ctx, s.ObjectStore, prefix, fn)
}

// AbortIncompleteUploads implements UploadAborter as the store it wraps does.
func (s encryptedStore) AbortIncompleteUploads(ctx context.Context, prefix string) (int, error) {
	return AbortIncompleteUploads(ctx, s.ObjectStore, prefix)
}

// encryptReader returns the object that holds r's content sealed with the key and bound to
// relKey (its key relative to the location's prefix), as a stream: header line, then
// segments, each sealed as soon as r has filled it.
func (sl sealer) encryptReader(r io.Reader, relKey string) (io.Reader, error) {
	e := &encryptingReader{src: r, buf: make([]byte, 32<<10)}
	e.out.Write(sl.header)
	w, err := sl.stream.NewEncryptingWriter(&e.out, associatedData(EncryptedFormat, sl.header, relKey))
	if err != nil {
		return nil, err
	}
	e.w = w
	return e, nil
}

// encryptingReader pulls plaintext from src, seals it into out through w, and hands out what
// is sealed. An error of src is returned as it is.
type encryptingReader struct {
	src  io.Reader
	w    io.WriteCloser
	out  bytes.Buffer
	buf  []byte
	done bool
	err  error
}

func (e *encryptingReader) Read(p []byte) (int, error) {
	for e.out.Len() == 0 {
		switch {
		case e.err != nil:
			return 0, e.err
		case e.done:
			return 0, io.EOF
		}
		e.fill()
	}
	return e.out.Read(p)
}

// fill reads once from src and seals what it read; at src's end, it seals the last segment.
func (e *encryptingReader) fill() {
	n, err := e.src.Read(e.buf)
	if n > 0 {
		if _, werr := e.w.Write(e.buf[:n]); werr != nil {
			e.err = fmt.Errorf("encrypting: %w", werr)
			return
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		if cerr := e.w.Close(); cerr != nil {
			e.err = fmt.Errorf("encrypting: %w", cerr)
			return
		}
		e.done = true
	case err != nil:
		e.err = err
	}
}

// sourceErrors remembers the last error of the stored object's stream other than its end, to
// tell the store's failures (passed on as they are) from a segment that does not authenticate.
type sourceErrors struct {
	r   io.Reader
	err error
}

func (s *sourceErrors) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.err = err
	}
	return n, err
}

// decryptingReader is the content of an encrypted object. Its first error is kept and
// returned by every later Read, so that nothing reads past a segment that failed.
type decryptingReader struct {
	r   io.Reader
	src *sourceErrors // nil for an age file
	key string
	// bound says the object is bound to its key (format v2): a segment that does not
	// authenticate may also be one of an object moved from another key.
	bound  bool
	closer io.Closer
	n      int64
	err    error
}

func (d *decryptingReader) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	n, err := d.r.Read(p)
	d.n += int64(n)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		d.err = io.EOF
	case d.src != nil && d.src.err != nil:
		d.err = fmt.Errorf("decrypting %s: %w", d.key, d.src.err)
	case d.src != nil:
		d.err = fmt.Errorf("decrypting %s: %w: the segment after its first %d bytes does not authenticate: %s",
			d.key, ErrDamaged, d.n, damageCauses(d.bound))
	default:
		d.err = fmt.Errorf("decrypting %s: %w", d.key, err)
	}
	if d.err != nil {
		return n, d.err
	}
	return n, nil
}

func (d *decryptingReader) Close() error { return d.closer.Close() }

// damageCauses says what makes a segment fail to authenticate: for an object bound to its key,
// also that it was written to another key (moved or copied there in the bucket).
func damageCauses(bound bool) string {
	if bound {
		return "it was changed, cut short or reordered, or the object was written to another key and moved or copied here"
	}
	return "it was changed, cut short or reordered"
}

// ageDecryptError says why an age file could not be opened.
func ageDecryptError(key string, id *ageKeyIdentity, err error) error {
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

// ageKeyIdentity unwraps the file key of an age file's stanza naming one of its keys. It
// remembers a key name it does not hold, for the error.
type ageKeyIdentity struct {
	keys    Keyring
	unknown string
}

func (id *ageKeyIdentity) Unwrap(stanzas []*age.Stanza) ([]byte, error) {
	for _, s := range stanzas {
		if s.Type != ageKeyStanza || len(s.Args) != 2 {
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
		fileKey, err := aead.Open(nil, nonce, s.Body, []byte(ageKeyStanza+" "+s.Args[0]))
		if err != nil {
			return nil, fmt.Errorf("%w: key %q is not the key the object was written with (was it changed in the Secret?)", ErrWrongKey, s.Args[0])
		}
		return fileKey, nil
	}
	return nil, age.ErrIncorrectIdentity
}
