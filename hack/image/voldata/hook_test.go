package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHook(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	var out, errOut bytes.Buffer
	if code := hook([]string{"-require", marker}, &out, &errOut); code != 3 || !strings.Contains(errOut.String(), "is not there") {
		t.Fatalf("a missing file: exit %d, %s", code, errOut.String())
	}
	if code := hook([]string{"-write", marker, "-exit", "7"}, &out, &errOut); code != 7 {
		t.Fatalf("exit %d", code)
	}
	data, err := os.ReadFile(marker)
	if err != nil || !strings.HasPrefix(string(data), "hook marker written at ") {
		t.Fatalf("marker %q, %v", data, err)
	}
	started := time.Now()
	if code := hook([]string{"-require", marker, "-sleep", "200ms"}, &out, &errOut); code != 0 || time.Since(started) < 200*time.Millisecond {
		t.Fatalf("exit %d after %s", code, time.Since(started))
	}
	if code := hook([]string{"-sleep", "soon"}, &out, &errOut); code != 2 {
		t.Fatalf("a bad flag: exit %d", code)
	}
}
