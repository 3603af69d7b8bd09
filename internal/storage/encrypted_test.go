package storage

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func encryptedFixture(t *testing.T, keys Keyring) (ObjectStore, *Filesystem, string) {
	t.Helper()
	dir := t.TempDir()
	fs, err := NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Encrypted(fs, keys)
	if err != nil {
		t.Fatal(err)
	}
	return s, fs, dir
}

func readAll(t *testing.T, s ObjectStore, key string) ([]byte, error) {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func TestEncryptedRoundTrip(t *testing.T) {
	k1 := newKey(t)
	s, plain, dir := encryptedFixture(t, Keyring{Keys: map[string][]byte{"k1": k1}, WriteKey: "k1"})
	secret := []byte("password=hunter2-distinctive-7d1e")
	big := make([]byte, 3<<20+17) // several chunks, not a multiple of their size
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	copy(big[1<<20:], secret)
	for key, data := range map[string][]byte{"backups/ns/b/b.tar.gz": big, "backups/ns/b/small": secret, "backups/ns/b/empty": nil} {
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
		if !bytes.Contains(stored, []byte(keyStanzaType+" k1")) {
			t.Errorf("%s: the stored object does not name its key", key)
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
	if keys, err := s.List(t.Context(), "backups/ns/b/"); err != nil || len(keys) != 3 {
		t.Fatalf("List = %v, %v", keys, err)
	}
}

// TestEncryptedRotation: objects written with k1 stay readable once k2 writes; one written with
// a key the keyring lost, or whose key was changed, is a clear error, as is a plain object.
func TestEncryptedRotation(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	s1, plain, _ := encryptedFixture(t, Keyring{Keys: map[string][]byte{"k1": k1}, WriteKey: "k1"})
	if err := s1.Put(t.Context(), "old", strings.NewReader("written with k1")); err != nil {
		t.Fatal(err)
	}
	s2, err := Encrypted(plain, Keyring{Keys: map[string][]byte{"k1": k1, "k2": k2}, WriteKey: "k2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Put(t.Context(), "new", strings.NewReader("written with k2")); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"old": "written with k1", "new": "written with k2"} {
		if got, err := readAll(t, s2, key); err != nil || string(got) != want {
			t.Fatalf("%s = %q, %v", key, got, err)
		}
	}

	onlyK2, _ := Encrypted(plain, Keyring{Keys: map[string][]byte{"k2": k2}, WriteKey: "k2"})
	_, err = readAll(t, onlyK2, "old")
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), `written with key "k1"`) {
		t.Fatalf("a lost key: %v", err)
	}
	changed, _ := Encrypted(plain, Keyring{Keys: map[string][]byte{"k1": newKey(t)}, WriteKey: "k1"})
	_, err = readAll(t, changed, "old")
	if !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), `key "k1" is not the key`) {
		t.Fatalf("a changed key: %v", err)
	}
	if err := plain.Put(t.Context(), "plain", strings.NewReader("not encrypted")); err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(t, s2, "plain"); !errors.Is(err, ErrNotEncrypted) {
		t.Fatalf("a plain object: %v", err)
	}
}

// TestEncryptedTampering: a changed byte or a cut object fails to read; no garbage comes out.
func TestEncryptedTampering(t *testing.T) {
	s, plain, _ := encryptedFixture(t, Keyring{Keys: map[string][]byte{"k1": newKey(t)}, WriteKey: "k1"})
	data := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320 KB: several chunks
	if err := s.Put(t.Context(), "obj", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	stored, _ := readAll(t, plain, "obj")
	for name, mutate := range map[string]func([]byte) []byte{
		"a flipped byte": func(b []byte) []byte { b = bytes.Clone(b); b[len(b)/2] ^= 1; return b },
		"cut short":      func(b []byte) []byte { return b[:len(b)-70000] },
		// Its last (short) chunk cut off: what is left ends on a chunk's end, which age reads
		// as a message cut short (io.ErrUnexpectedEOF), never as its end.
		"cut at a chunk's end": func(b []byte) []byte { return b[:len(b)-(len(data)%(64<<10)+16)] },
		"the header's key renamed": func(b []byte) []byte {
			return bytes.Replace(bytes.Clone(b), []byte(keyStanzaType+" k1"), []byte(keyStanzaType+" k2"), 1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			if err := plain.Put(t.Context(), "bad", bytes.NewReader(mutate(stored))); err != nil {
				t.Fatal(err)
			}
			got, err := readAll(t, s, "bad")
			if err == nil {
				t.Fatalf("read %d bytes without an error", len(got))
			}
			if !strings.Contains(err.Error(), "decrypting bad") {
				t.Fatalf("error %v does not name the object", err)
			}
		})
	}
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
			if _, err := Encrypted(nil, tc.k); err == nil {
				t.Fatal("Encrypted accepted it")
			}
		})
	}
}
