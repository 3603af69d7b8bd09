package restore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/storage"
)

// ErrScratch marks a failure of the restore's own scratch directory (missing, not writable,
// full): not the storage location's, nor the archive's.
var ErrScratch = errors.New("the restore's scratch directory failed")

type scratchError struct{ err error }

func (e scratchError) Error() string        { return e.err.Error() }
func (e scratchError) Unwrap() error        { return e.err }
func (e scratchError) Is(target error) bool { return target == ErrScratch }

// MaxSpoolProblems bounds the problems a spool keeps (odd entries of an archive); the count of
// the others is kept.
const MaxSpoolProblems = 100

// Spool is a backup's archive, checked against its commit marker and unpacked into a scratch
// directory: one file per resource, holding that resource's items as JSON lines. A restore
// reads the items back one resource at a time, in the order it needs, so its memory does not
// grow with the archive. The archive is read once: unpacked and hashed in one pass, and
// nothing of it is used unless the hash matches.
type Spool struct {
	dir string
	// FormatVersion is the archive's metadata/version.
	FormatVersion string
	resources     map[schema.GroupResource]*spooled
	// Problems are entries that were left out (malformed names, items that are not JSON
	// objects), at most MaxSpoolProblems of them; MoreProblems counts the rest.
	Problems     []string
	MoreProblems int
	// VersionedCopies counts the entries left out as copies of items at a named API version
	// (IsVersionedCopy): Velero's archives hold one beside every item.
	VersionedCopies int
}

type spooled struct {
	file  string
	count int
	w     *bufio.Writer
	f     *os.File
}

// SpooledItem is one item read back from a spool.
type SpooledItem struct {
	// Namespace is the item's namespace in the backup ("" for a cluster-scoped item), from its
	// place in the archive.
	Namespace string `json:"namespace,omitempty"`
	// Name is the item's name, from its place in the archive.
	Name string `json:"name"`
	// Object is the item as backed up.
	Object json.RawMessage `json:"object"`
}

// NewSpool reads the archive at key from store into a new directory under scratch ("" means
// the system's temporary directory), checking it against want, the commit marker's digest.
// On any error nothing is left on disk; the error is ReadArchive's (ErrChecksumMismatch when
// the archive is not the one that was committed).
func NewSpool(ctx context.Context, store storage.ObjectStore, key string, want storage.ArchiveDigest, scratch string, opts ...storage.TransferOption) (*Spool, error) {
	dir, err := os.MkdirTemp(scratch, "cairn-restore-")
	if err != nil {
		return nil, scratchError{fmt.Errorf("creating the restore's scratch directory: %w", err)}
	}
	s := &Spool{dir: dir, resources: map[schema.GroupResource]*spooled{}}
	err = storage.ReadArchive(ctx, store, key, want, s.add, opts...)
	if ferr := s.flush(); err == nil && ferr != nil {
		err = scratchError{fmt.Errorf("spooling the archive: %w", ferr)}
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// add spools one archive entry.
func (s *Spool) add(e archive.Entry) error {
	if e.Name == archive.VersionPath {
		s.FormatVersion = strings.TrimSpace(string(e.Data))
		return nil
	}
	if IsVersionedCopy(e.Name) {
		s.VersionedCopies++
		return nil
	}
	gr, namespace, name, err := ParseItemPath(e.Name)
	if err != nil {
		s.problem(err.Error())
		return nil
	}
	var buf bytes.Buffer
	if !isJSONObject(&buf, e.Data) {
		s.problem(fmt.Sprintf("%s is not a JSON object", e.Name))
		return nil
	}
	line := spoolLine(namespace, name, buf.Bytes())
	sp := s.resources[gr]
	if sp == nil {
		file := filepath.Join(s.dir, fmt.Sprintf("r%d.jsonl", len(s.resources)))
		f, err := os.Create(file)
		if err != nil {
			return scratchError{fmt.Errorf("spooling the archive: %w", err)}
		}
		sp = &spooled{file: file, f: f, w: bufio.NewWriterSize(f, 64<<10)}
		s.resources[gr] = sp
	}
	sp.count++
	if _, err := sp.w.Write(append(line, '\n')); err != nil {
		return scratchError{fmt.Errorf("spooling the archive: %w", err)}
	}
	return nil
}

// spoolLine is the JSON of SpooledItem{namespace, name, object}, written without encoding the
// (already compact) object a second time.
func spoolLine(namespace, name string, object []byte) []byte {
	ns, _ := json.Marshal(namespace) // strings always encode
	n, _ := json.Marshal(name)
	line := make([]byte, 0, len(object)+len(ns)+len(n)+40)
	line = append(line, `{"namespace":`...)
	line = append(line, ns...)
	line = append(line, `,"name":`...)
	line = append(line, n...)
	line = append(line, `,"object":`...)
	line = append(line, object...)
	return append(line, '}')
}

// readSpoolLine reads a line that spoolLine wrote without scanning its object again: the
// object was checked and compacted when it was spooled, and a restore reads the spool twice
// (the plan's pass and the restore's), so a full JSON decode of every line cost each item two
// more scans of its bytes (issue 41). ok is false for a line of another shape, which
// json.Unmarshal then reads; Object shares line's memory.
func readSpoolLine(line []byte) (item SpooledItem, ok bool) {
	rest, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\n")), []byte(`{"namespace":`))
	if !ok {
		return item, false
	}
	if item.Namespace, rest, ok = cutJSONString(rest); !ok {
		return item, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"name":`)); !ok {
		return item, false
	}
	if item.Name, rest, ok = cutJSONString(rest); !ok {
		return item, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"object":`)); !ok || len(rest) < 3 || rest[0] != '{' || rest[len(rest)-1] != '}' || rest[len(rest)-2] != '}' {
		return item, false
	}
	item.Object = rest[:len(rest)-1]
	return item, true
}

// cutJSONString reads the JSON string at the start of b, and returns it and what follows it.
func cutJSONString(b []byte) (s string, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", nil, false
	}
	escaped := false
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			if !escaped {
				return string(b[1:i]), b[i+1:], true
			}
			if err := json.Unmarshal(b[:i+1], &s); err != nil {
				return "", nil, false
			}
			return s, b[i+1:], true
		}
	}
	return "", nil, false
}

// isJSONObject compacts data into buf and reports whether it is one JSON object.
func isJSONObject(buf *bytes.Buffer, data []byte) bool {
	return json.Compact(buf, data) == nil && bytes.HasPrefix(buf.Bytes(), []byte("{"))
}

func (s *Spool) problem(msg string) {
	if len(s.Problems) < MaxSpoolProblems {
		s.Problems = append(s.Problems, msg)
		return
	}
	s.MoreProblems++
}

// flush closes every spool file for writing.
func (s *Spool) flush() error {
	var errs []error
	for _, sp := range s.resources {
		if sp.f == nil {
			continue
		}
		errs = append(errs, sp.w.Flush(), sp.f.Close())
		sp.f, sp.w = nil, nil
	}
	return errors.Join(errs...)
}

// ParseItemPath reads an item entry's name (archive.ItemPath): its group/resource, namespace
// ("" for a cluster-scoped item) and name. Anything else, or a name that could not be a
// Kubernetes object's, is an error.
func ParseItemPath(entry string) (gr schema.GroupResource, namespace, name string, err error) {
	bad := func(why string) (schema.GroupResource, string, string, error) {
		return schema.GroupResource{}, "", "", fmt.Errorf("archive entry %q: %s", entry, why)
	}
	parts := strings.Split(entry, "/")
	if len(parts) < 4 || parts[0] != "resources" || !strings.HasSuffix(entry, ".json") {
		return bad("not an item entry")
	}
	resource, group, dotted := strings.Cut(parts[1], ".")
	if resource == "" || (dotted && group == "") {
		return bad("no resource, or an empty group")
	}
	gr = schema.GroupResource{Group: group, Resource: resource}
	switch {
	case parts[2] == "cluster" && len(parts) == 4:
		name = strings.TrimSuffix(parts[3], ".json")
	case parts[2] == "namespaces" && len(parts) == 5:
		namespace, name = parts[3], strings.TrimSuffix(parts[4], ".json")
		if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
			return bad("namespace " + strings.Join(errs, "; "))
		}
	default:
		return bad("not an item entry")
	}
	if name == "" || name == "." || name == ".." || len(name) > validation.DNS1123SubdomainMaxLength {
		return bad("not an object name")
	}
	return gr, namespace, name, nil
}

// versionDir is an API version's directory in Velero's archive layout: "v1", "v2beta1", with
// "-preferredversion" for the copy at the version the backed-up cluster preferred.
var versionDir = regexp.MustCompile(`^v[0-9]+((alpha|beta)[0-9]+)?(-preferredversion)?$`)

// IsVersionedCopy reports whether an archive entry is a copy of an item at a named API version:
// resources/<resource>[.<group>]/<version>[-preferredversion]/namespaces/<ns>/<name>.json (or
// .../cluster/<name>.json). Velero writes one such copy beside every item (the item at the
// preferred version under v1-preferredversion, and with its EnableAPIGroupVersions feature the
// other versions too); the item without a version directory is the one a restore uses, as
// Velero's own restore does when it does not choose among versions. Cairn writes none.
func IsVersionedCopy(entry string) bool {
	parts := strings.Split(entry, "/")
	return len(parts) >= 5 && parts[0] == "resources" && versionDir.MatchString(parts[2]) &&
		(parts[3] == "namespaces" || parts[3] == "cluster")
}

// Resources returns the group/resources the spool holds, sorted.
func (s *Spool) Resources() []schema.GroupResource {
	out := make([]schema.GroupResource, 0, len(s.resources))
	for gr := range s.resources {
		out = append(out, gr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Count is the number of items of gr in the spool.
func (s *Spool) Count(gr schema.GroupResource) int {
	if sp := s.resources[gr]; sp != nil {
		return sp.count
	}
	return 0
}

// Each calls fn with every item of gr, in archive order, one at a time.
func (s *Spool) Each(gr schema.GroupResource, fn func(SpooledItem) error) error {
	sp := s.resources[gr]
	if sp == nil {
		return nil
	}
	f, err := os.Open(sp.file)
	if err != nil {
		return fmt.Errorf("reading the spooled %s: %w", gr, err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			item, ok := readSpoolLine(line)
			if !ok {
				if jerr := json.Unmarshal(line, &item); jerr != nil {
					return fmt.Errorf("reading the spooled %s: %w", gr, jerr)
				}
			}
			if ferr := fn(item); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the spooled %s: %w", gr, err)
		}
	}
}

// Close removes the spool's directory.
func (s *Spool) Close() {
	_ = s.flush()
	_ = os.RemoveAll(s.dir)
}
