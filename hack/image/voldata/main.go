// Command voldata is the volume-data app of the one-node cluster's e2e suite: run as a pod, it
// fills each of its mounted volumes with known data, then stays running and reports what the
// volumes hold, so that a test compares what a backup copied (and later what a restore wrote
// back) with what was written.
//
//	voldata -seed 7 -volume /data/claim:209715200:0 -volume /data/scratch:0:10000 -listen :8080
//
// Each -volume is DIR:LARGE:SMALL. DIR gets large.bin, LARGE random bytes; SMALL small files
// (0 to 8 KiB of random bytes each) under small/NN/; a file of every mode in modes/; an empty
// directory empty/; a symbolic link link -> marker.txt; and marker.txt, which holds the
// distinctive marker string of the seed (Marker), as does the name of one file. Every byte comes
// from ChaCha8 seeded with the seed and the volume's base name, so the data of a seed is always
// the same and its digests are known. A volume that already holds files is left as it is (a
// restored one), and only reported.
//
// The report: one JSON line per volume on stdout once the data is written (the pod's log), and
// the same, computed again from the files, at GET /digest. GET /ready answers 200 once every
// volume is written, for a readiness probe.
//
// `voldata hook ...` is the command the suite's backup and restore hooks run in its container
// (hook.go).
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// volumeSpec is one -volume: where, and how much.
type volumeSpec struct {
	dir   string
	large int64
	small int
}

type volumeFlags []volumeSpec

func (v *volumeFlags) String() string { return fmt.Sprint(*v) }

func (v *volumeFlags) Set(s string) error {
	parts := strings.Split(s, ":")
	if len(parts) != 3 || !filepath.IsAbs(parts[0]) {
		return fmt.Errorf("want DIR:LARGE:SMALL with an absolute DIR, got %q", s)
	}
	large, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || large < 0 {
		return fmt.Errorf("LARGE of %q: want a number of bytes", s)
	}
	small, err := strconv.Atoi(parts[2])
	if err != nil || small < 0 {
		return fmt.Errorf("SMALL of %q: want a number of files", s)
	}
	*v = append(*v, volumeSpec{dir: parts[0], large: large, small: small})
	return nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "hook" {
		os.Exit(hook(os.Args[2:], os.Stdout, os.Stderr))
	}
	var volumes volumeFlags
	seed := flag.Uint64("seed", 1, "The seed of every byte written.")
	listen := flag.String("listen", ":8080", "The address to serve /ready and /digest on.")
	flag.Var(&volumes, "volume", "DIR:LARGE:SMALL, a volume to fill (repeatable).")
	flag.Parse()
	if len(volumes) == 0 {
		log.Fatal("at least one -volume is required")
	}
	var ready atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "writing", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /digest", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "writing", http.StatusServiceUnavailable)
			return
		}
		var reports []Report
		for _, v := range volumes {
			r, err := Digest(v.dir)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			reports = append(reports, r)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(reports)
	})
	server := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { log.Fatal(server.ListenAndServe()) }()

	for _, v := range volumes {
		started := time.Now()
		written, err := Fill(v, *seed)
		if err != nil {
			log.Fatalf("filling %s: %v", v.dir, err)
		}
		r, err := Digest(v.dir)
		if err != nil {
			log.Fatalf("reading %s back: %v", v.dir, err)
		}
		r.Written, r.Seconds = written, time.Since(started).Seconds()
		line, _ := json.Marshal(r)
		fmt.Println(string(line))
	}
	ready.Store(true)
	select {}
}

// Marker is the distinctive string of a seed, written in plain text in every volume, which a
// test looks for where the data must be encrypted.
func Marker(seed uint64) string {
	sum := sha256.Sum256([]byte("cairn-voldata-marker/" + strconv.FormatUint(seed, 10)))
	return "cairn-plaintext-marker-" + hex.EncodeToString(sum[:12])
}

// Random is the byte stream of a seed for a name: ChaCha8, whose seed is the SHA-256 of both.
func Random(seed uint64, name string) *rand.ChaCha8 {
	return rand.NewChaCha8(sha256.Sum256([]byte("cairn-voldata/" + strconv.FormatUint(seed, 10) + "/" + name)))
}

// modes are the modes of the files of modes/ (and of the directory modes/private).
var modes = []fs.FileMode{0o400, 0o440, 0o444, 0o600, 0o640, 0o644, 0o700, 0o750, 0o755, 0o777}

// Fill writes a volume's data, unless it already holds files (lost+found aside): then it
// writes nothing and says so.
func Fill(v volumeSpec, seed uint64) (bool, error) {
	entries, err := os.ReadDir(v.dir)
	if err != nil {
		return false, err
	}
	if slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() != "lost+found" }) {
		return false, nil
	}
	rnd := Random(seed, filepath.Base(v.dir))
	w := fileWriter{buf: make([]byte, 1<<20)}
	if v.large > 0 {
		if err := w.write(filepath.Join(v.dir, "large.bin"), io.LimitReader(rnd, v.large), 0o644); err != nil {
			return false, err
		}
	}
	for i := range v.small {
		sub := filepath.Join(v.dir, "small", fmt.Sprintf("%02d", i%100))
		if i < 100 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return false, err
			}
		}
		size := int64(rnd.Uint64() % 8192)
		if err := w.write(filepath.Join(sub, fmt.Sprintf("file-%05d", i)), io.LimitReader(rnd, size), 0o644); err != nil {
			return false, err
		}
	}
	marker := Marker(seed)
	if err := os.MkdirAll(filepath.Join(v.dir, "modes", "private"), 0o755); err != nil {
		return false, err
	}
	for _, m := range modes {
		name := filepath.Join(v.dir, "modes", fmt.Sprintf("mode-%04o", m))
		if err := w.write(name, strings.NewReader(name+"\n"), m); err != nil {
			return false, err
		}
	}
	if err := w.write(filepath.Join(v.dir, "modes", "private", marker+".txt"), strings.NewReader("named after the marker\n"), 0o600); err != nil {
		return false, err
	}
	if err := os.Chmod(filepath.Join(v.dir, "modes", "private"), 0o700); err != nil {
		return false, err
	}
	if err := os.Mkdir(filepath.Join(v.dir, "empty"), 0o755); err != nil {
		return false, err
	}
	if err := w.write(filepath.Join(v.dir, "marker.txt"), strings.NewReader("The marker: "+marker+"\n"), 0o644); err != nil {
		return false, err
	}
	return true, os.Symlink("marker.txt", filepath.Join(v.dir, "link"))
}

// fileWriter writes files through one buffer.
type fileWriter struct{ buf []byte }

// write writes r to a new file of mode m (whatever the umask).
func (w fileWriter) write(name string, r io.Reader, m fs.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(f, r, w.buf); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(m); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Report is what a volume holds.
type Report struct {
	Dir string `json:"dir"`
	// Files and Bytes count the regular files and their sizes; Dirs the directories (the
	// volume's own included), Symlinks the symbolic links.
	Files    int64 `json:"files"`
	Bytes    int64 `json:"bytes"`
	Dirs     int64 `json:"dirs"`
	Symlinks int64 `json:"symlinks"`
	// LargeSHA256 is the SHA-256 of large.bin, if any.
	LargeSHA256 string `json:"largeSHA256,omitempty"`
	// Digest is the SHA-256 of the tree: every entry's path, type, permissions, and content's
	// SHA-256 or link target, in path order (owners and times left out).
	Digest string `json:"digest"`
	// Written says whether this process wrote the data, and in how many seconds (stdout only).
	Written bool    `json:"written,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
}

// Digest reads a volume's tree and reports it.
func Digest(dir string) (Report, error) {
	r := Report{Dir: dir}
	tree := sha256.New()
	buf := make([]byte, 1<<20)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel == "lost+found" && d.IsDir() {
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var what string
		switch {
		case d.IsDir():
			r.Dirs++
			what = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			r.Symlinks++
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			what = "symlink " + target
		case d.Type().IsRegular():
			r.Files++
			r.Bytes += info.Size()
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.CopyBuffer(h, f, buf)
			_ = f.Close()
			if err != nil {
				return err
			}
			sum := hex.EncodeToString(h.Sum(nil))
			if rel == "large.bin" {
				r.LargeSHA256 = sum
			}
			what = "file " + sum
		default:
			return fmt.Errorf("%s: unexpected file type %v", path, d.Type())
		}
		_, err = fmt.Fprintf(tree, "%q %04o %s\n", rel, info.Mode().Perm(), what)
		return err
	})
	if err != nil {
		return r, err
	}
	if r.Files == 0 && r.Dirs <= 1 {
		return r, errors.New("the volume is empty")
	}
	r.Digest = hex.EncodeToString(tree.Sum(nil))
	return r, nil
}
