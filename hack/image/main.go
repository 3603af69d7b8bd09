// Command image builds a one-binary container image without Docker, for the one-node cluster
// of hack/node-up.sh (whose containerd can pull nothing): a static binary, appended as a single
// layer to an empty base with go-containerregistry, written as an image tarball that
// `ctr images import` reads.
//
//	go run . -binary ../../bin/manager -name cairn-manager:dev -out ../../bin/images/manager.tar
//
// The layer holds the binary, /etc/passwd and /etc/group naming the non-root user it runs as
// (65532, "nonroot", as in the Dockerfile's distroless base) and a world-writable /tmp. Every
// timestamp is the Unix epoch, so the same binary gives the same image.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// options are the command's flags.
type options struct {
	binary string
	path   string
	ref    string
	user   string
	out    string
}

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "", "The static binary to put in the image.")
	flag.StringVar(&o.path, "path", "", "Where the binary goes in the image, its entrypoint (default: /<the binary's name>).")
	flag.StringVar(&o.ref, "name", "", "The image's name, for example cairn-manager:dev.")
	flag.StringVar(&o.user, "user", "65532:65532", "The uid:gid the image runs as.")
	flag.StringVar(&o.out, "out", "", "The image tarball to write.")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.binary == "" || o.ref == "" || o.out == "" {
		return fmt.Errorf("-binary, -name and -out are required")
	}
	if o.path == "" {
		o.path = "/" + filepath.Base(o.binary)
	}
	uid, gid, err := parseUser(o.user)
	if err != nil {
		return err
	}
	tag, err := name.NewTag(o.ref)
	if err != nil {
		return fmt.Errorf("-name %q: %w", o.ref, err)
	}
	binary, err := os.ReadFile(o.binary)
	if err != nil {
		return err
	}
	layerTar, err := layerArchive(binary, o.path, uid, gid)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.Entrypoint = []string{o.path}
	cfg.Config.User = o.user
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	// Written next to the target and renamed, so that a reader never sees half an image.
	tmp := o.out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return err
	}
	return os.Rename(tmp, o.out)
}

// parseUser reads "uid:gid".
func parseUser(s string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("-user %q: want uid:gid", s)
	}
	if uid, err = strconv.Atoi(u); err != nil {
		return 0, 0, fmt.Errorf("-user %q: %w", s, err)
	}
	if gid, err = strconv.Atoi(g); err != nil {
		return 0, 0, fmt.Errorf("-user %q: %w", s, err)
	}
	return uid, gid, nil
}

// layerArchive is the image's one layer: the binary at binPath (mode 0755, owned by root, so
// the user it runs as cannot change it), the user's passwd and group entries, and /tmp.
func layerArchive(binary []byte, binPath string, uid, gid int) ([]byte, error) {
	epoch := time.Unix(0, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	addDirs := func(p string) error {
		var parents []string
		for d := path.Dir(p); d != "/" && d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return err
			}
		}
		return nil
	}
	addFile := func(p string, mode int64, data []byte) error {
		if err := addDirs(p); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, gid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", gid)
	if err := addFile("/etc/passwd", 0o644, []byte(passwd)); err != nil {
		return nil, err
	}
	if err := addFile("/etc/group", 0o644, []byte(group)); err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch}); err != nil {
		return nil, err
	}
	if err := addFile(binPath, 0o755, binary); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
