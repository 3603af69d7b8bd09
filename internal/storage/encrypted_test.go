package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"golang.org/x/crypto/chacha20poly1305"

	"github.com/cairn-backup/cairn/internal/archive"
)

func newKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func encryptedFixture(t *testing.T, keys Keyring) (ObjectStore, *Filesystem, string) {
	t.Helper()
	dir := t.TempDir()
	fs, err := NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Encrypted(fs, keys, "")
	if err != nil {
		t.Fatal(err)
	}
	return s, fs, dir
}

// readAll reads key to its end; what was read before an error is returned with it.
func readAll(t *testing.T, s ObjectStore, key string) ([]byte, error) {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// The sizes of a sealed object's parts: Tink's header (a length byte, the salt, the nonce
// prefix), a segment's tag, and the plaintext of the first segment and of the others.
const (
	tinkHeaderSize    = 1 + KeySize + 7
	tagSize           = 16
	firstSegmentPlain = segmentSize - tinkHeaderSize - tagSize
	segmentPlain      = segmentSize - tagSize
)

func TestEncryptedRoundTrip(t *testing.T) {
	k1 := newKey(t)
	s, plain, dir := encryptedFixture(t, Keyring{Keys: map[string][]byte{"k1": k1}, WriteKey: "k1"})
	secret := []byte("password=hunter2-distinctive-7d1e")
	big := randomBytes(t, 3<<20+17) // several segments, not a multiple of their size
	copy(big[1<<20:], secret)
	objects := map[string][]byte{"big": big, "small": secret, "empty": nil}
	// Sizes around the segments' ends: a stored object that ends exactly where a segment
	// does, one byte either side, and one that fills two segments.
	for _, n := range []int{1, firstSegmentPlain - 1, firstSegmentPlain, firstSegmentPlain + 1, segmentSize, firstSegmentPlain + segmentPlain} {
		objects[fmt.Sprintf("size-%d", n)] = randomBytes(t, n)
	}
	for name, data := range objects {
		key := "backups/ns/b/" + name
		if err := s.Put(t.Context(), key, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		got, err := readAll(t, s, key)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: read back %d bytes, err %v; want %d bytes", key, len(got), err, len(data))
		}
		stored, err := readAll(t, plain, key)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(stored, []byte(EncryptedFormat+" k1 ")) {
			t.Errorf("%s: the stored object does not start with the format and its key: %q", key, stored[:min(len(stored), 40)])
		}
		header := bytes.IndexByte(stored, '\n') + 1
		segments := max(1, (len(data)+tinkHeaderSize+segmentPlain-1)/segmentPlain)
		if want := header + tinkHeaderSize + len(data) + segments*tagSize; len(stored) != want {
			t.Errorf("%s: stored %d bytes, want %d (%d segments)", key, len(stored), want, segments)
		}
	}
	// Nothing stored holds the secret in plain text.
	if err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if bytes.Contains(b, secret) {
			t.Errorf("%s holds the secret in plain text", path)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The listing and deletion are the wrapped store's.
	if keys, err := s.List(t.Context(), "backups/ns/b/"); err != nil || len(keys) != len(objects) {
		t.Fatalf("List = %v, %v", keys, err)
	}
}

// TestEncryptedRotation: objects written with k1 stay readable once k2 writes, in this format
// and in the age files earlier builds wrote; one written with a key the keyring lost, or whose
// key was changed, is a clear error, as is a plain object.
func TestEncryptedRotation(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	s1, plain, _ := encryptedFixture(t, Keyring{Keys: map[string][]byte{"k1": k1}, WriteKey: "k1"})
	if err := s1.Put(t.Context(), "old", strings.NewReader("written with k1")); err != nil {
		t.Fatal(err)
	}
	putAge(t, plain, "old-age", "k1", k1, []byte("written with k1 by an earlier build"))
	s2, err := Encrypted(plain, Keyring{Keys: map[string][]byte{"k1": k1, "k2": k2}, WriteKey: "k2"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Put(t.Context(), "new", strings.NewReader("written with k2")); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"old": "written with k1", "old-age": "written with k1 by an earlier build", "new": "written with k2"} {
		if got, err := readAll(t, s2, key); err != nil || string(got) != want {
			t.Fatalf("%s = %q, %v", key, got, err)
		}
	}

	onlyK2, _ := Encrypted(plain, Keyring{Keys: map[string][]byte{"k2": k2}, WriteKey: "k2"}, "")
	changed, _ := Encrypted(plain, Keyring{Keys: map[string][]byte{"k1": newKey(t)}, WriteKey: "k1"}, "")
	for _, key := range []string{"old", "old-age"} {
		_, err = readAll(t, onlyK2, key)
		if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), `decrypting `+key+`: unknown encryption key: it was written with key "k1", which the location's key Secret no longer holds (it holds k2)`) {
			t.Fatalf("%s with a lost key: %v", key, err)
		}
		_, err = readAll(t, changed, key)
		if !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), `decrypting `+key+`: wrong encryption key: key "k1" is not the key`) {
			t.Fatalf("%s with a changed key: %v", key, err)
		}
	}
	if err := plain.Put(t.Context(), "plain", strings.NewReader("not encrypted")); err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(t, s2, "plain"); !errors.Is(err, ErrNotEncrypted) || !strings.Contains(err.Error(), "decrypting plain") {
		t.Fatalf("a plain object: %v", err)
	}
}

// TestEncryptedReadsEarlierBuilds: a backup written to an encrypted location by the build
// before this format (testdata/age-v1: an archive of two ConfigMaps, over 64 KiB so that it
// spans two age chunks, and its commit marker, written by that build's Encrypted with key "k1"
// = the bytes 0, 1, ..., 31) is still read and verified as a restore reads it.
func TestEncryptedReadsEarlierBuilds(t *testing.T) {
	k1 := make([]byte, KeySize)
	for i := range k1 {
		k1[i] = byte(i)
	}
	dir, err := filepath.Abs("testdata/age-v1")
	if err != nil {
		t.Fatal(err)
	}
	fs, err := NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	keys := Layout{}.Backup("team-a", "nightly")
	if stored, err := readAll(t, fs, keys.Archive); err != nil || !bytes.HasPrefix(stored, []byte(ageFormat+"-> "+ageKeyStanza+" k1 ")) {
		t.Fatalf("the fixture is not an age file of key k1 (%v)", err)
	}
	// Read as the location reads it after a rotation to k2.
	s, err := Encrypted(fs, Keyring{Keys: map[string][]byte{"k1": k1, "k2": newKey(t)}, WriteKey: "k2"}, "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadMetadata(t.Context(), s, keys)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var config []byte
	err = ReadArchive(t.Context(), s, keys.Archive, ArchiveDigest{SHA256: m.ArchiveSHA256, Size: m.ArchiveSize}, func(e archive.Entry) error {
		names = append(names, e.Name)
		if strings.HasSuffix(e.Name, "/app-config.json") {
			config = e.Data
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "nightly" || len(names) != 3 || !bytes.Contains(config, []byte(`"password":"age-fixture-4b9e"`)) {
		t.Fatalf("read marker %s/%s and entries %v, app-config %q", m.Namespace, m.Name, names, config)
	}
	// The wrong key is as clear an error on it as on the new format.
	wrong, _ := Encrypted(fs, Keyring{Keys: map[string][]byte{"k1": newKey(t)}, WriteKey: "k1"}, "")
	if _, err := ReadMetadata(t.Context(), wrong, keys); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("the fixture with a wrong key: %v", err)
	}
}

// TestEncryptedHostileBucketWriter: whoever can write the bucket changes a stored object; its
// read fails with an error naming the object, and whatever came out before the error is a
// prefix of what was written (never garbage). Reads after the error keep failing.
func TestEncryptedHostileBucketWriter(t *testing.T) {
	_, plain, _ := encryptedFixture(t, Keyring{Keys: map[string][]byte{"k": newKey(t)}, WriteKey: "k"})
	testHostileBucketWriter(t, plain)
}

// testHostileBucketWriter is TestEncryptedHostileBucketWriter over the plain store plain (the
// bucket writer's view); hostile_cloud_test.go runs it over azure and gcs.
func testHostileBucketWriter(t *testing.T, plain ObjectStore) {
	// k1-copy holds the same bytes as k1 under another name: an object's key name must still
	// not be changed from one to the other.
	k1, k2 := newKey(t), newKey(t)
	ring := func(write string) Keyring {
		return Keyring{Keys: map[string][]byte{"k1": k1, "k2": k2, "k1-copy": k1}, WriteKey: write}
	}
	s, _ := Encrypted(plain, ring("k1"), "")
	sK2, _ := Encrypted(plain, ring("k2"), "")
	sCopy, _ := Encrypted(plain, ring("k1-copy"), "")
	data := randomBytes(t, firstSegmentPlain+2*segmentPlain+1000) // three full segments and a short one
	put := func(s ObjectStore, key string, data []byte) []byte {
		if err := s.Put(t.Context(), key, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		b, err := readAll(t, plain, key)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Under the key readTampered reads it at: an object is bound to its key.
	stored := put(s, "bad", data)
	otherK2 := put(sK2, "other-k2", data)
	otherK1 := put(s, "other-k1", data)
	otherCopy := put(sCopy, "other-k1-copy", data)
	header := bytes.IndexByte(stored, '\n') + 1
	// segment i of an object with this header line: its start and end in stored.
	segment := func(i int) (int, int) {
		if i == 0 {
			return header + tinkHeaderSize, header + segmentSize
		}
		start := header + segmentSize + (i-1)*segmentSize
		return start, min(start+segmentSize, len(stored))
	}
	s1, e1 := segment(1)
	s2, e2 := segment(2)
	s3, _ := segment(3)
	cat := slices.Concat[[]byte]
	flip := func(i int) func([]byte) []byte {
		return func(b []byte) []byte { b = bytes.Clone(b); b[i] ^= 1; return b }
	}

	for _, tc := range []struct {
		name   string
		object []byte
		want   error
		says   string
	}{
		{"empty", nil, ErrNotEncrypted, "it is empty"},
		{"plain text", []byte("apiVersion: v1\nkind: ConfigMap\n"), ErrNotEncrypted, "not written by Cairn"},
		{"no line end in the first bytes", bytes.Repeat([]byte("x"), 4096), ErrNotEncrypted, "not written by Cairn"},
		{"the header line cut short", stored[:header-5], ErrDamaged, "header line is cut short"},
		{"the header line never ends", cat(stored[:header-1], bytes.Repeat([]byte("A"), 1000)), ErrDamaged, "header line is cut short or too long"},
		{"a newer format", cat([]byte("cairn-aes256gcm/v3"), stored[len(EncryptedFormat):]), ErrNotEncrypted, `format "cairn-aes256gcm/v3"`},
		{"a header line with a field more", cat(stored[:header-1], []byte(" x\n"), stored[header:]), ErrDamaged, "header line is malformed"},
		{"the key renamed to one the keyring lacks", bytes.Replace(stored, []byte(" k1 "), []byte(" k9 "), 1), ErrUnknownKey, `written with key "k9"`},
		{"the key renamed to another key of the keyring", bytes.Replace(stored, []byte(" k1 "), []byte(" k2 "), 1), ErrWrongKey, `key "k2" is not the key`},
		{"the whole header line of another key's object", cat(otherK2[:bytes.IndexByte(otherK2, '\n')+1], stored[header:]), ErrDamaged, "first 0 bytes does not authenticate"},
		{"the header line of the same key under another name", cat(otherCopy[:bytes.IndexByte(otherCopy, '\n')+1], stored[header:]), ErrDamaged, "first 0 bytes does not authenticate"},
		{"only the header line", stored[:header], ErrDamaged, "segment header is cut short"},
		{"cut in the segment header", stored[:header+20], ErrDamaged, "segment header is cut short"},
		{"cut right after the segment header", stored[:header+tinkHeaderSize], ErrDamaged, "first 0 bytes does not authenticate"},
		{"cut at the end of the first segment", stored[:header+segmentSize], ErrDamaged, fmt.Sprintf("first %d bytes does not authenticate", 0)},
		{"cut at the end of the second segment", stored[:e1], ErrDamaged, fmt.Sprintf("first %d bytes does not authenticate", firstSegmentPlain)},
		{"cut at the end of the third segment", stored[:e2], ErrDamaged, fmt.Sprintf("first %d bytes does not authenticate", firstSegmentPlain+segmentPlain)},
		{"cut in a segment", stored[:s2+100], ErrDamaged, fmt.Sprintf("first %d bytes does not authenticate", firstSegmentPlain+segmentPlain)},
		{"the last byte cut", stored[:len(stored)-1], ErrDamaged, "does not authenticate"},
		{"a byte added", cat(stored, []byte{0}), ErrDamaged, "does not authenticate"},
		{"two segments swapped", cat(stored[:s1], stored[s2:e2], stored[s1:e1], stored[s3:]), ErrDamaged, fmt.Sprintf("first %d bytes does not authenticate", firstSegmentPlain)},
		{"a segment dropped", cat(stored[:s1], stored[s2:]), ErrDamaged, fmt.Sprintf("first %d bytes does not authenticate", firstSegmentPlain)},
		{"a segment repeated", cat(stored[:e1], stored[s1:]), ErrDamaged, fmt.Sprintf("first %d bytes does not authenticate", firstSegmentPlain+segmentPlain)},
		{"the last segment dropped", stored[:s3], ErrDamaged, "does not authenticate"},
		{"a segment of another object with the same key", cat(stored[:s1], otherK1[s1:e1], stored[e1:]), ErrDamaged, fmt.Sprintf("first %d bytes does not authenticate", firstSegmentPlain)},
		{"the salt changed", flip(header + 5)(stored), ErrDamaged, "first 0 bytes does not authenticate"},
		{"the segment header's length changed", flip(header)(stored), ErrDamaged, "segment header is cut short or malformed"},
		{"a bit of a middle segment flipped", flip(s2 + 500)(stored), ErrDamaged, fmt.Sprintf("first %d bytes does not authenticate", firstSegmentPlain+segmentPlain)},
		{"a bit of the last tag flipped", flip(len(stored) - 1)(stored), ErrDamaged, "does not authenticate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readTampered(t, s, plain, tc.object, data)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("read %d bytes, err %v; want %v saying %q", len(got), err, tc.want, tc.says)
			}
		})
	}

	// Every bit of both headers (the line and the segment header) flipped, one at a time.
	t.Run("every bit of the headers flipped", func(t *testing.T) {
		for i := 0; i < header+tinkHeaderSize; i++ {
			for bit := range 8 {
				b := bytes.Clone(stored)
				b[i] ^= 1 << bit
				got, err := readTampered(t, s, plain, b, data)
				if !errors.Is(err, ErrDamaged) && !errors.Is(err, ErrNotEncrypted) && !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrWrongKey) {
					t.Fatalf("byte %d bit %d: read %d bytes, err %v", i, bit, len(got), err)
				}
			}
		}
	})
}

// readTampered stores object as "bad" and reads it through s: the read must fail, naming the
// object, after handing out nothing but a prefix of data, and keep failing when read again.
func readTampered(t *testing.T, s, plain ObjectStore, object, data []byte) ([]byte, error) {
	t.Helper()
	if err := plain.Put(t.Context(), "bad", bytes.NewReader(object)); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Get(t.Context(), "bad")
	if err != nil {
		if !strings.Contains(err.Error(), "decrypting bad") {
			t.Fatalf("error %v does not name the object", err)
		}
		return nil, err
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err == nil {
		t.Fatalf("read %d bytes without an error", len(got))
	}
	if !strings.Contains(err.Error(), "decrypting bad") {
		t.Fatalf("error %v does not name the object", err)
	}
	if !bytes.HasPrefix(data, got) {
		t.Fatalf("read %d bytes that are not what was written", len(got))
	}
	if n, again := rc.Read(make([]byte, 10)); n != 0 || again == nil || errors.Is(again, io.EOF) {
		t.Fatalf("read again after %v: %d bytes, %v", err, n, again)
	}
	return got, err
}

// TestEncryptedPutFails: an error of the stream being stored fails the Put as it is, and
// leaves no object.
func TestEncryptedPutFails(t *testing.T) {
	s, plain, _ := encryptedFixture(t, Keyring{Keys: map[string][]byte{"k1": newKey(t)}, WriteKey: "k1"})
	broken := errors.New("the archive writer broke")
	err := s.Put(t.Context(), "obj", io.MultiReader(bytes.NewReader(randomBytes(t, 200<<10)), iotestErrReader{broken}))
	if !errors.Is(err, broken) {
		t.Fatalf("Put = %v, want %v", err, broken)
	}
	if ok, err := plain.Exists(t.Context(), "obj"); ok || err != nil {
		t.Fatalf("the object is there after a failed Put (%v)", err)
	}
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

// TestEncryptedPresignRefused: an encrypted location hands out no presigned URL (it would hand
// out ciphertext), read-only or not.
func TestEncryptedPresignRefused(t *testing.T) {
	s3, err := NewS3(S3Config{Bucket: "b", Endpoint: "http://127.0.0.1:1", ForcePathStyle: true,
		Credentials: S3Credentials{AccessKeyID: "a", SecretAccessKey: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PresignGet(t.Context(), s3, "backups/ns/b/b.tar.gz", 60, ""); err != nil {
		t.Fatalf("the plain store cannot presign: %v", err)
	}
	enc, err := Encrypted(s3, Keyring{Keys: map[string][]byte{"k1": newKey(t)}, WriteKey: "k1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []ObjectStore{enc, ReadOnly(enc)} {
		if url, err := PresignGet(t.Context(), s, "backups/ns/b/b.tar.gz", 60, ""); !errors.Is(err, ErrCannotPresign) {
			t.Fatalf("PresignGet = %q, %v", url, err)
		}
	}
}

// TestEncryptedMemoryFlat: encrypting and decrypting a 32 MiB object allocates a few segment
// buffers, not a buffer per segment (nor the object).
func TestEncryptedMemoryFlat(t *testing.T) {
	mem := &memStore{}
	s, err := Encrypted(mem, Keyring{Keys: map[string][]byte{"k1": newKey(t)}, WriteKey: "k1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	const size = 32 << 20
	data := randomBytes(t, size)
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	mem.discard = true
	put := allocated(func() {
		if err := s.Put(t.Context(), "obj", onlyRead{bytes.NewReader(data)}); err != nil {
			t.Fatal(err)
		}
	})
	mem.discard = false
	if err := s.Put(t.Context(), "obj", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32<<10)
	var n int64
	get := allocated(func() {
		rc, err := s.Get(t.Context(), "obj")
		if err != nil {
			t.Fatal(err)
		}
		n, err = io.CopyBuffer(io.Discard, onlyRead{rc}, buf)
		if err != nil {
			t.Fatal(err)
		}
		_ = rc.Close()
	})
	if n != size {
		t.Fatalf("read %d bytes", n)
	}
	const bound = 1 << 20
	if put > bound || get > bound {
		t.Fatalf("a 32 MiB object allocated %d bytes to encrypt and %d to decrypt, want at most %d each", put, get, bound)
	}
}

type onlyRead struct{ io.Reader }

// memStore keeps objects in memory (or, with discard, reads and drops them).
type memStore struct {
	mu      sync.Mutex
	objects map[string][]byte
	discard bool
}

func (m *memStore) Put(_ context.Context, key string, r io.Reader) error {
	if m.discard {
		_, err := io.Copy(io.Discard, r)
		return err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.objects == nil {
		m.objects = map[string][]byte{}
	}
	m.objects[key] = b
	return nil
}

func (m *memStore) Get(_ context.Context, key string) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[key]
	if !ok {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (m *memStore) List(_ context.Context, prefix string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.objects {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

func (m *memStore) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, key)
	return nil
}

func (m *memStore) Exists(_ context.Context, key string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.objects[key]
	return ok, nil
}

// putAge stores data as the age file an earlier build's encrypted location wrote with the
// named key: the format Cairn still reads and no longer writes.
func putAge(t testing.TB, s ObjectStore, key, name string, k, data []byte) {
	t.Helper()
	var buf bytes.Buffer
	w, err := age.Encrypt(&buf, ageRecipient{name: name, key: k})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), key, &buf); err != nil {
		t.Fatal(err)
	}
}

// ageRecipient wraps an age file key under a named key, as earlier builds did.
type ageRecipient struct {
	name string
	key  []byte
}

func (r ageRecipient) Wrap(fileKey []byte) ([]*age.Stanza, error) {
	aead, err := chacha20poly1305.NewX(r.key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return []*age.Stanza{{
		Type: ageKeyStanza,
		Args: []string{r.name, base64.RawStdEncoding.EncodeToString(nonce)},
		Body: aead.Seal(nil, nonce, fileKey, []byte(ageKeyStanza+" "+r.name)),
	}}, nil
}

func TestKeyringValidate(t *testing.T) {
	good := newKey(t)
	for _, tc := range []struct {
		name string
		k    Keyring
		want string
	}{
		{"no write key", Keyring{Keys: map[string][]byte{"k1": good}}, "no write key"},
		{"a write key not held", Keyring{Keys: map[string][]byte{"k1": good}, WriteKey: "k2"}, `the write key "k2" is not among the keys (k1)`},
		{"a short key", Keyring{Keys: map[string][]byte{"k1": good[:16]}, WriteKey: "k1"}, `key "k1" is 16 bytes, not 32`},
		{"a name with a space", Keyring{Keys: map[string][]byte{"k 1": good}, WriteKey: "k 1"}, `key name "k 1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.k.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if _, err := Encrypted(nil, tc.k, ""); err == nil {
				t.Fatal("Encrypted accepted it")
			}
		})
	}
}

func TestParseHeader(t *testing.T) {
	check := base64.RawStdEncoding.EncodeToString(make([]byte, keyCheckSize))
	for _, tc := range []struct {
		name, line string
		key        string
		want       error
	}{
		{"a header", EncryptedFormat + " k1 " + check + "\n", "k1", nil},
		{"a long key name", EncryptedFormat + " " + strings.Repeat("k", 253) + " " + check + "\n", strings.Repeat("k", 253), nil},
		{"another format", "age-encryption.org/v1\n", "", ErrNotEncrypted},
		{"the format before", "cairn-aes256gcm/v1 k1 " + check + "\n", "k1", nil},
		{"a newer version", "cairn-aes256gcm/v3 k1 " + check + "\n", "", ErrNotEncrypted},
		{"no check", EncryptedFormat + " k1\n", "", ErrDamaged},
		{"a short check", EncryptedFormat + " k1 " + check[:20] + "\n", "", ErrDamaged},
		{"a check that is not base64", EncryptedFormat + " k1 " + strings.Repeat("!", len(check)) + "\n", "", ErrDamaged},
		{"a key name with a slash", EncryptedFormat + " k/1 " + check + "\n", "", ErrDamaged},
		{"an empty key name", EncryptedFormat + "  " + check + "\n", "", ErrDamaged},
		{"a key name too long", EncryptedFormat + " " + strings.Repeat("k", 254) + " " + check + "\n", "", ErrDamaged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := parseHeader([]byte(tc.line))
			if !errors.Is(err, tc.want) || (tc.want == nil && h.key != tc.key) {
				t.Fatalf("parseHeader = %+v, %v; want key %q, error %v", h, err, tc.key, tc.want)
			}
		})
	}
}

// BenchmarkEncryptedFormats64MiB: the cost of the formats alone, in memory (no disk, no
// checksum, no gunzip): reading an object of the age format earlier builds wrote next to one
// of this format, and writing one. docs/benchmarks.md quotes it beside the 256 MiB rows.
func BenchmarkEncryptedFormats64MiB(b *testing.B) {
	const size = 64 << 20
	data := randomBytes(b, size)
	mem := &memStore{}
	s, err := Encrypted(mem, Keyring{Keys: map[string][]byte{"k1": newKey(b)}, WriteKey: "k1"}, "")
	if err != nil {
		b.Fatal(err)
	}
	putAge(b, mem, "age", "k1", s.(encryptedStore).keys.Keys["k1"], data)
	if err := s.Put(b.Context(), "aes256gcm", bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 32<<10)
	for _, format := range []string{"age", "aes256gcm"} {
		b.Run("read-"+format, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				rc, err := s.Get(b.Context(), format)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.CopyBuffer(io.Discard, onlyRead{rc}, buf); err != nil || n != size {
					b.Fatalf("read %d bytes: %v", n, err)
				}
				_ = rc.Close()
			}
		})
	}
	mem.discard = true
	b.Run("write-aes256gcm", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if err := s.Put(b.Context(), "written", onlyRead{bytes.NewReader(data)}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncryptedAhead256MiB: a 256 MiB archive read back verified (ReadArchive, as a
// restore reads it) from a filesystem location, plain, decrypted directly in the reader's
// goroutine, and decrypted ahead of it in a goroutine of its own (what Encrypted does): the A/B
// of encrypted_ahead.go. Each iteration is one round of all three, in an order that turns from
// round to round, so that the load of a shared machine falls on each alike; the medians of the
// rounds are reported, and their ratios to plain.
func BenchmarkEncryptedAhead256MiB(b *testing.B) {
	fs, err := NewFilesystem(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	var arch bytes.Buffer
	w, err := archive.NewWriter(&arch, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		b.Fatal(err)
	}
	entry := make([]byte, 1<<20)
	for i := range 256 {
		if _, err := rand.Read(entry); err != nil {
			b.Fatal(err)
		}
		if err := w.AddEntry(fmt.Sprintf("part-%04d", i), entry); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	e, err := Encrypted(fs, Keyring{Keys: map[string][]byte{"k1": newKey(b)}, WriteKey: "k1"}, "")
	if err != nil {
		b.Fatal(err)
	}
	direct := e.(encryptedStore)
	direct.ahead = false
	names := []string{"plain", "direct", "ahead"}
	stores := []ObjectStore{fs, direct, e}
	digests := map[string]ArchiveDigest{}
	for i, s := range stores {
		d, err := PutArchive(b.Context(), s, names[i], bytes.NewReader(arch.Bytes()))
		if err != nil {
			b.Fatal(err)
		}
		digests[names[i]] = d
	}
	read := map[string][]float64{}
	round := 0
	for b.Loop() {
		for j := range stores {
			i := (j + round) % len(stores)
			start := time.Now()
			if err := ReadArchive(b.Context(), stores[i], names[i], digests[names[i]], func(archive.Entry) error { return nil }); err != nil {
				b.Fatal(err)
			}
			read[names[i]] = append(read[names[i]], time.Since(start).Seconds()*1000)
		}
		round++
	}
	for _, n := range names {
		b.ReportMetric(median(read[n]), "verified-read-"+n+"-ms")
	}
	for _, n := range names[1:] {
		b.ReportMetric(median(read[n])/median(read["plain"]), "verified-read-"+n+"-ratio")
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
