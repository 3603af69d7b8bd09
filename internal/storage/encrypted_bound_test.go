package storage

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-backup/cairn/internal/archive"
)

func TestRelativeKey(t *testing.T) {
	for _, tc := range []struct {
		name, prefix, key, want string
	}{
		{"no prefix", "", "backups/team-a/b1/b1.tar.gz", "backups/team-a/b1/b1.tar.gz"},
		{"a prefix", "cluster-1", "cluster-1/backups/team-a/b1/b1.tar.gz", "backups/team-a/b1/b1.tar.gz"},
		{"a prefix with slashes around it", "/cluster-1/", "cluster-1/backups/team-a/b1/b1.tar.gz", "backups/team-a/b1/b1.tar.gz"},
		{"a nested prefix", "dc/cluster-1", "dc/cluster-1/restores/team-a/r1/r1-logs.gz", "restores/team-a/r1/r1-logs.gz"},
		{"a key that only starts like the prefix", "cluster-1", "cluster-10/backups/x", "cluster-10/backups/x"},
		{"a key outside the prefix", "cluster-1", "elsewhere/x", "elsewhere/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := relativeKey(tc.prefix, tc.key); got != tc.want {
				t.Fatalf("relativeKey(%q, %q) = %q, want %q", tc.prefix, tc.key, got, tc.want)
			}
		})
	}
}

// TestEncryptedBoundToKey: an object copied over another key of the same location (a bucket
// writer putting team-b's archive in team-a's place) fails to decrypt, naming the object it
// was read as (its key within the location); the whole location copied under another prefix, or read through a location of
// another name (the same prefix), still reads.
func TestEncryptedBoundToKey(t *testing.T) {
	keys := Keyring{Keys: map[string][]byte{"k1": newKey(t)}, WriteKey: "k1"}
	dir := t.TempDir()
	plain, err := NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Encrypted(plain, keys, "cluster-1")
	if err != nil {
		t.Fatal(err)
	}
	layout := Layout{Prefix: "cluster-1"}
	teamA, teamB := layout.Backup("team-a", "nightly").Archive, layout.Backup("team-b", "nightly").Archive
	data := randomBytes(t, 3*segmentSize)
	for _, key := range []string{teamA, teamB} {
		if err := s.Put(t.Context(), key, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	stored, err := readAll(t, plain, teamB)
	if err != nil || !bytes.HasPrefix(stored, []byte(EncryptedFormat+" k1 ")) {
		t.Fatalf("stored %.40q (%v), want format %s", stored, err, EncryptedFormat)
	}

	// team-b's archive copied over team-a's.
	if err := plain.Put(t.Context(), teamA, bytes.NewReader(stored)); err != nil {
		t.Fatal(err)
	}
	// The error names the object by its key within the location, not the location's prefix:
	// a team's member is told which object, never where the location keeps it.
	got, err := readAll(t, s, teamA)
	name := strings.TrimPrefix(teamA, "cluster-1/")
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "decrypting "+name+":") ||
		strings.Contains(err.Error(), "cluster-1") || !strings.Contains(err.Error(), "moved or copied here") || len(got) != 0 {
		t.Fatalf("the moved archive read %d bytes, err %v; want nothing and %v naming %s only", len(got), err, ErrDamaged, name)
	}

	// The bucket copied under another prefix, read through a location of that prefix.
	moved := strings.Replace(teamB, "cluster-1/", "copy/of/cluster-1/", 1)
	if err := plain.Put(t.Context(), moved, bytes.NewReader(stored)); err != nil {
		t.Fatal(err)
	}
	copied, err := Encrypted(plain, keys, "copy/of/cluster-1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(t, copied, moved); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the object copied under another prefix read %d bytes, %v", len(got), err)
	}
	// Under the other prefix, but read as if it were still at the old one: its key differs.
	if _, err := readAll(t, s, moved); !errors.Is(err, ErrDamaged) {
		t.Fatalf("read through the old prefix: %v, want %v", err, ErrDamaged)
	}
}

// TestEncryptedReadsFormatV1: objects written in format v1 (bound to their header line only,
// before issue 40) still read, after a rotation too (testdata/aes256gcm-v1: the archive and
// marker of testdata/age-v1, written by the v1 build with key k1 = bytes 0 to 31).
func TestEncryptedReadsFormatV1(t *testing.T) {
	k1 := make([]byte, KeySize)
	for i := range k1 {
		k1[i] = byte(i)
	}
	dir, err := filepath.Abs("testdata/aes256gcm-v1")
	if err != nil {
		t.Fatal(err)
	}
	fs, err := NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	keys := Layout{}.Backup("team-a", "nightly")
	if stored, err := readAll(t, fs, keys.Archive); err != nil || !bytes.HasPrefix(stored, []byte(encryptedFormatV1+" k1 ")) {
		t.Fatalf("the fixture is not of format %s with key k1 (%v)", encryptedFormatV1, err)
	}
	s, err := Encrypted(fs, Keyring{Keys: map[string][]byte{"k1": k1, "k2": newKey(t)}, WriteKey: "k2"}, "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadMetadata(t.Context(), s, keys)
	if err != nil {
		t.Fatal(err)
	}
	var config []byte
	err = ReadArchive(t.Context(), s, keys.Archive, ArchiveDigest{SHA256: m.ArchiveSHA256, Size: m.ArchiveSize}, func(e archive.Entry) error {
		if strings.HasSuffix(e.Name, "/app-config.json") {
			config = e.Data
		}
		return nil
	})
	if err != nil || !bytes.Contains(config, []byte(`"password":"age-fixture-4b9e"`)) {
		t.Fatalf("reading the v1 archive: %v, app-config %q", err, config)
	}
	wrong, _ := Encrypted(fs, Keyring{Keys: map[string][]byte{"k1": newKey(t)}, WriteKey: "k1"}, "")
	if _, err := ReadMetadata(t.Context(), wrong, keys); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("the v1 fixture with a wrong key: %v, want %v", err, ErrWrongKey)
	}
}
