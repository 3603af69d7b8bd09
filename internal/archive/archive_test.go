package archive

import (
	"archive/tar"
	"bytes"
	stdgzip "compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestItemPath(t *testing.T) {
	tests := []struct{ resource, group, ns, name, want string }{
		{"configmaps", "", "team-a", "cfg", "resources/configmaps/namespaces/team-a/cfg.json"},
		{"deployments", "apps", "team-a", "web", "resources/deployments.apps/namespaces/team-a/web.json"},
		{"persistentvolumes", "", "", "pv-1", "resources/persistentvolumes/cluster/pv-1.json"},
		{"customresourcedefinitions", "apiextensions.k8s.io", "", "widgets.example.com", "resources/customresourcedefinitions.apiextensions.k8s.io/cluster/widgets.example.com.json"},
	}
	for _, tt := range tests {
		if got := ItemPath(tt.resource, tt.group, tt.ns, tt.name); got != tt.want {
			t.Errorf("ItemPath = %s, want %s", got, tt.want)
		}
	}
}

func TestWriteRead(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddItem("configmaps", "", "ns", "a", []byte(`{"kind":"ConfigMap"}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddItem("persistentvolumes", "", "", "pv", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.AddItem("x", "", "", "y", nil); err == nil {
		t.Error("a write after Close succeeded")
	}
	entries, err := ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 || entries[0].Name != VersionPath || string(entries[0].Data) != FormatVersion+"\n" {
		t.Fatalf("entries = %+v", entries)
	}
	if entries[1].Name != "resources/configmaps/namespaces/ns/a.json" || !strings.HasPrefix(entries[2].Name, "resources/") {
		t.Errorf("item entries = %s, %s", entries[1].Name, entries[2].Name)
	}
	if string(entries[1].Data) != `{"kind":"ConfigMap"}` {
		t.Errorf("data = %s", entries[1].Data)
	}
}

// The archive is written with klauspost/compress for speed; it must stay plain gzip+tar that
// the standard library (and Velero, and tar(1)) reads.
func TestArchiveReadsWithTheStandardLibrary(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddItem("configmaps", "", "ns", "a", []byte(`{"kind":"ConfigMap"}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	gz, err := stdgzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if len(names) != 2 || names[1] != "resources/configmaps/namespaces/ns/a.json" {
		t.Errorf("entries read by the standard library = %v", names)
	}
}

// EachMax reads the gzip stream to its trailer: a damaged CRC is caught even when every tar
// entry read well (nothing else checks it for an archive with no recorded digest).
func TestEachMaxChecksTheGzipTrailer(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddEntry(ItemPath("configmaps", "", "shop", "a"), []byte(`{"kind":"ConfigMap"}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	data[len(data)-8] ^= 0xff // the CRC-32
	err = EachMax(bytes.NewReader(data), 0, func(Entry) error { return nil })
	if err == nil {
		t.Fatal("EachMax of an archive whose gzip CRC is wrong = nil, want an error")
	}
}
