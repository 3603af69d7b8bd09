package velerofmt

import (
	"bytes"
	"compress/gzip"
	"reflect"
	"testing"
)

func TestCopiedVolumes(t *testing.T) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	_, _ = gz.Write([]byte(`[
	 {"spec":{"pod":{"namespace":"shop","name":"db-0"},"volume":"data","uploaderType":"kopia"},"status":{"phase":"Completed","snapshotID":"k1"}},
	 {"spec":{"pod":{"namespace":"shop","name":"db-0"},"volume":"cache","uploaderType":"kopia"},"status":{"phase":"Failed"}},
	 {"spec":{"pod":{"namespace":"shop","name":"db-0"},"volume":"old"},"status":{"phase":"Completed","snapshotID":"r1"}},
	 {"spec":{"pod":{"namespace":"other","name":"db-0"},"volume":"data","uploaderType":"kopia"},"status":{"phase":"Completed","snapshotID":"k9"}}]`))
	_ = gz.Close()
	pvbs, err := ReadPodVolumeBackups(&buf, "b-podvolumebackups.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range CopiedVolumes(pvbs, "shop", "db-0") {
		got = append(got, p.Spec.Volume+" "+p.Uploader()+" "+p.Status.SnapshotID)
	}
	want := []string{"data kopia k1", "old restic r1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CopiedVolumes = %q, want %q (no snapshot: nothing was copied)", got, want)
	}
	if got := CopiedVolumes(pvbs, "shop", "web-0"); got != nil {
		t.Errorf("CopiedVolumes of a pod with none = %v", got)
	}
	if _, err := ReadPodVolumeBackups(bytes.NewReader([]byte("not gzip")), "k"); err == nil {
		t.Error("ReadPodVolumeBackups of garbage = nil error")
	}
}
