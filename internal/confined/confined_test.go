package confined

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCheckName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"file", true}, {".hidden", true}, {"...", true}, {"a b", true},
		{"", false}, {".", false}, {"..", false}, {"a/b", false}, {"/", false}, {"a\x00b", false},
	} {
		if err := CheckName(tt.name); (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrBadName)) {
			t.Errorf("CheckName(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

func TestDataRuns(t *testing.T) {
	block := func(fill byte) []byte { return bytes.Repeat([]byte{fill}, blockSize) }
	join := slices.Concat[[]byte]
	for _, tt := range []struct {
		name  string
		chunk []byte
		want  []span
	}{
		{"empty", nil, nil},
		{"all zeros", join(block(0), block(0)), nil},
		{"all data", join(block(1), block(1)), []span{{0, 2 * blockSize}}},
		{"a hole between", join(block(1), block(0), block(1)), []span{{0, blockSize}, {2 * blockSize, 3 * blockSize}}},
		{"a short tail of data", join(block(0), []byte{0, 7}), []span{{blockSize, blockSize + 2}}},
		{"a short tail of zeros", join(block(1), []byte{0, 0}), []span{{0, blockSize}}},
		{"one byte of data in a block", join(block(0), append(make([]byte, blockSize-1), 1)), []span{{blockSize, 2 * blockSize}}},
	} {
		if got := dataRuns(tt.chunk); !slices.Equal(got, tt.want) {
			t.Errorf("%s: dataRuns = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// eachResolver runs f with openat2, then with the component-by-component walk of kernels
// without it.
func eachResolver(t *testing.T, f func(t *testing.T)) {
	t.Run("openat2", f)
	t.Run("walk", func(t *testing.T) {
		openat2Missing.Store(true)
		defer openat2Missing.Store(false)
		f(t)
	})
}

// fixture is a volume root with a victim directory beside it.
func fixture(t *testing.T) (*Root, string, string) {
	t.Helper()
	base := t.TempDir()
	vol, victim := filepath.Join(base, "volume"), filepath.Join(base, "victim")
	for _, d := range []string{vol, victim} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(victim, "secret"), []byte("victim"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRoot(vol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, vol, victim
}

func victimIntact(t *testing.T, victim string) {
	t.Helper()
	entries, _ := os.ReadDir(victim)
	b, _ := os.ReadFile(filepath.Join(victim, "secret"))
	if len(entries) != 1 || string(b) != "victim" {
		t.Fatalf("the victim changed: %d entries, secret %q", len(entries), b)
	}
}

func TestNoLinkIsFollowed(t *testing.T) {
	eachResolver(t, func(t *testing.T) {
		for _, tt := range []struct {
			name  string
			plant func(vol, victim string) error
			write string
		}{
			{"the parent a link out", func(vol, victim string) error { return os.Symlink(victim, filepath.Join(vol, "d")) }, "d/secret"},
			{"a link to ..", func(vol, _ string) error { return os.Symlink("../victim", filepath.Join(vol, "d")) }, "d/secret"},
			{"a link to the volume itself", func(vol, _ string) error { return os.Symlink(".", filepath.Join(vol, "d")) }, "d/secret"},
			{"a link two deep", func(vol, victim string) error {
				if err := os.Mkdir(filepath.Join(vol, "a"), 0o755); err != nil {
					return err
				}
				return os.Symlink(victim, filepath.Join(vol, "a", "b"))
			}, "a/b/secret"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r, vol, victim := fixture(t)
				if err := tt.plant(vol, victim); err != nil {
					t.Fatal(err)
				}
				_, err := r.WriteFile(tt.write, strings.NewReader("tenant"), FileOptions{Attributes: Attributes{Mode: 0o644}})
				if err == nil {
					t.Fatalf("WriteFile(%s) through a link succeeded", tt.write)
				}
				if err := r.SetDirAttributes(filepath.Dir(tt.write), Attributes{Mode: 0o777}); err == nil {
					t.Fatal("SetDirAttributes through a link succeeded")
				}
				victimIntact(t, victim)
				if _, err := os.Stat(filepath.Join(vol, "secret")); tt.name == "a link to the volume itself" && err == nil {
					t.Fatal("written through the link to the volume itself")
				}
			})
		}
	})
}

func TestReplacesWhatIsInTheWay(t *testing.T) {
	eachResolver(t, func(t *testing.T) {
		r, vol, victim := fixture(t)
		if err := os.Symlink(filepath.Join(victim, "secret"), filepath.Join(vol, "link")); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(victim, "secret"), filepath.Join(vol, "hard")); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(filepath.Join(vol, "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, filepath.Join(vol, "dir")); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"link", "hard", "fifo"} {
			if _, err := r.WriteFile(name, strings.NewReader("restored"), FileOptions{Attributes: Attributes{Mode: 0o640}}); err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(vol, name), &st); err != nil || st.Mode != unix.S_IFREG|0o640 || st.Nlink != 1 {
				t.Fatalf("%s: mode %o, %d links, %v", name, st.Mode, st.Nlink, err)
			}
		}
		if err := r.EnsureDir("dir"); err != nil {
			t.Fatal(err)
		}
		if err := r.Symlink("link", "/anywhere", Attributes{}); err != nil {
			t.Fatal(err)
		}
		if target, err := os.Readlink(filepath.Join(vol, "link")); err != nil || target != "/anywhere" {
			t.Fatalf("link -> %q, %v", target, err)
		}
		if info, err := os.Lstat(filepath.Join(vol, "dir")); err != nil || !info.IsDir() {
			t.Fatalf("dir: %v, %v", info, err)
		}
		if _, err := r.WriteFile("dir", strings.NewReader("x"), FileOptions{}); !errors.Is(err, unix.EISDIR) {
			t.Fatalf("a file over a directory: %v, want EISDIR", err)
		}
		victimIntact(t, victim)
		if entries, _ := os.ReadDir(vol); len(entries) != 4 {
			t.Fatalf("the volume holds %d entries, want 4 (no temporary file left)", len(entries))
		}
	})
}

func TestBudget(t *testing.T) {
	r, _, _ := fixture(t)
	b := &Budget{Limit: 10 << 10}
	if _, err := r.WriteFile("a", bytes.NewReader(bytes.Repeat([]byte{1}, 8<<10)), FileOptions{Sparse: true, Budget: b}); err != nil {
		t.Fatal(err)
	}
	// 1 MiB of zeros and one block of data: only the block counts.
	big := append(make([]byte, 1<<20), bytes.Repeat([]byte{1}, 2<<10)...)
	if _, err := r.WriteFile("b", bytes.NewReader(big), FileOptions{Sparse: true, Budget: b}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteFile("c", bytes.NewReader(bytes.Repeat([]byte{1}, 4<<10)), FileOptions{Sparse: true, Budget: b}); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("over the budget: %v", err)
	}
	if r.Exists("c") {
		t.Fatal("the file over the budget was left")
	}
	if b.Used() != 10<<10 {
		t.Fatalf("used %d", b.Used())
	}
}
