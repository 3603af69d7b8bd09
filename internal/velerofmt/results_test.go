package velerofmt

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestConvertResults(t *testing.T) {
	// shop-broken's results, as Velero wrote them.
	f, err := os.Open(filepath.Join("..", "..", "testdata", "velero", "bucket", "velero", "backups", "shop-broken", "shop-broken-results.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := ConvertResults(f, "shop-broken-results.gz")
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var got results
	if err := json.NewDecoder(gz).Decode(&got); err != nil {
		t.Fatal(err)
	}
	var items []string
	for _, e := range got.Errors {
		items = append(items, e.Item)
		if !strings.Contains(e.Message, "conversion webhook") || strings.HasPrefix(e.Message, " ") {
			t.Errorf("error %+v", e)
		}
	}
	if want := []string{"velero", "velero/broken/-"}; !reflect.DeepEqual(items, want) {
		t.Errorf("error items = %q, want %q", items, want)
	}
	if len(got.Warnings) != 0 {
		t.Errorf("warnings = %v", got.Warnings)
	}
	if _, err := ConvertResults(strings.NewReader("not gzip"), "k"); err == nil {
		t.Error("ConvertResults of garbage = nil error")
	}
}
