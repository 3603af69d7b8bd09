package main

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestParseUser(t *testing.T) {
	tests := []struct {
		in       string
		uid, gid int
		wantErr  bool
	}{
		{in: "65532:65532", uid: 65532, gid: 65532},
		{in: "0:0", uid: 0, gid: 0},
		{in: "65532", wantErr: true},
		{in: "nonroot:65532", wantErr: true},
		{in: "65532:", wantErr: true},
	}
	for _, tt := range tests {
		uid, gid, err := parseUser(tt.in)
		if (err != nil) != tt.wantErr || uid != tt.uid || gid != tt.gid {
			t.Errorf("parseUser(%q) = %d, %d, %v; want %d, %d, error %t", tt.in, uid, gid, err, tt.uid, tt.gid, tt.wantErr)
		}
	}
}

// The tarball holds one image of one layer, which ctr imports under the given name: the binary
// as the entrypoint, executable and owned by root, the user's passwd entry, and /tmp.
func TestRunWritesAOneLayerImage(t *testing.T) {
	dir := t.TempDir()
	binary := filepath.Join(dir, "manager")
	if err := os.WriteFile(binary, []byte("#!static\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "images", "manager.tar")
	if err := run(options{binary: binary, ref: "cairn-manager:dev", user: "65532:65532", out: out}); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("cairn-manager:dev")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config.Entrypoint; len(got) != 1 || got[0] != "/manager" {
		t.Errorf("entrypoint %v, want [/manager]", got)
	}
	if cfg.Config.User != "65532:65532" || cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("user %q, platform %s/%s; want 65532:65532, linux/amd64", cfg.Config.User, cfg.OS, cfg.Architecture)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	files := map[string]int64{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		files[h.Name] = h.Mode
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s is owned by %d:%d, want root", h.Name, h.Uid, h.Gid)
		}
	}
	want := map[string]int64{"manager": 0o755, "etc": 0o755, "etc/passwd": 0o644, "etc/group": 0o644, "tmp": 0o1777}
	for name, mode := range want {
		if got, ok := files[name]; !ok || got != mode {
			t.Errorf("%s: mode %o (present %t), want %o; the layer has %v", name, got, ok, mode, files)
		}
	}
}
