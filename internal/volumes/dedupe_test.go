package volumes

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var created = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// replica is a Running pod of namespace shop, created minutesOld minutes before 12:00.
func replica(name string, minutesOld int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", CreationTimestamp: metav1.NewTime(created.Add(-time.Duration(minutesOld) * time.Minute))},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func claim(volume, claimName string) Volume {
	return Volume{Name: volume, Kind: PersistentVolumeClaim, ClaimName: claimName}
}

func TestDedupe(t *testing.T) {
	web1, web2, web3 := replica("web-1", 60), replica("web-2", 30), replica("web-3", 30)
	terminating := replica("web-0", 90)
	terminating.DeletionTimestamp = &metav1.Time{Time: created}
	other := replica("web-2", 30)
	other.Namespace = "shop-staging"
	uploads := claim("uploads", "uploads")
	copiedFrom := func(pod string) Skipped {
		return Skipped{Volume: "uploads", Reason: "claim uploads is copied from pod " + pod}
	}
	tests := []struct {
		name string
		pods []PodVolumes
		want []PodVolumes
	}{
		{name: "a claim mounted by one pod", pods: []PodVolumes{{Pod: web1, Copy: []Volume{uploads}}},
			want: []PodVolumes{{Pod: web1, Copy: []Volume{uploads}}}},
		{name: "a ReadWriteMany claim of a Deployment: the oldest pod copies it",
			pods: []PodVolumes{{Pod: web2, Copy: []Volume{uploads}}, {Pod: web1, Copy: []Volume{uploads}}},
			want: []PodVolumes{{Pod: web2, Skipped: []Skipped{copiedFrom("web-1")}}, {Pod: web1, Copy: []Volume{uploads}}}},
		{name: "pods created the same second: by name",
			pods: []PodVolumes{{Pod: web3, Copy: []Volume{uploads}}, {Pod: web2, Copy: []Volume{uploads}}},
			want: []PodVolumes{{Pod: web3, Skipped: []Skipped{copiedFrom("web-2")}}, {Pod: web2, Copy: []Volume{uploads}}}},
		{name: "an older pod being deleted does not copy it, a Running one does",
			pods: []PodVolumes{{Pod: terminating, Copy: []Volume{uploads}}, {Pod: web2, Copy: []Volume{uploads}}},
			want: []PodVolumes{{Pod: terminating, Skipped: []Skipped{copiedFrom("web-2")}}, {Pod: web2, Copy: []Volume{uploads}}}},
		{name: "a pod's own volumes, its emptyDirs and unshared claims, are all kept",
			pods: []PodVolumes{
				{Pod: web1, Copy: []Volume{uploads, claim("data", "data-web-1"), {Name: "cache", Kind: EmptyDir}}},
				{Pod: web2, Copy: []Volume{claim("data", "data-web-2"), {Name: "cache", Kind: EmptyDir}, uploads}},
			},
			want: []PodVolumes{
				{Pod: web1, Copy: []Volume{uploads, claim("data", "data-web-1"), {Name: "cache", Kind: EmptyDir}}},
				{Pod: web2, Copy: []Volume{claim("data", "data-web-2"), {Name: "cache", Kind: EmptyDir}}, Skipped: []Skipped{copiedFrom("web-1")}},
			}},
		{name: "what Select skipped is kept, the duplicate added after it",
			pods: []PodVolumes{
				{Pod: web1, Copy: []Volume{uploads}},
				{Pod: web2, Copy: []Volume{uploads}, Skipped: []Skipped{{Volume: "tls", Reason: "secret volumes are not copied"}}},
			},
			want: []PodVolumes{
				{Pod: web1, Copy: []Volume{uploads}},
				{Pod: web2, Skipped: []Skipped{{Volume: "tls", Reason: "secret volumes are not copied"}, copiedFrom("web-1")}},
			}},
		{name: "claims of the same name in two namespaces are two claims",
			pods: []PodVolumes{{Pod: web2, Copy: []Volume{uploads}}, {Pod: other, Copy: []Volume{uploads}}},
			want: []PodVolumes{{Pod: web2, Copy: []Volume{uploads}}, {Pod: other, Copy: []Volume{uploads}}}},
		{name: "one pod mounting a claim twice copies it once",
			pods: []PodVolumes{{Pod: web1, Copy: []Volume{uploads, claim("uploads-ro", "uploads")}}},
			want: []PodVolumes{{Pod: web1, Copy: []Volume{uploads},
				Skipped: []Skipped{{Volume: "uploads-ro", Reason: "claim uploads is copied from this pod's volume uploads"}}}}},
		{name: "two shared claims over three pods: each copied once, by its oldest pod",
			pods: []PodVolumes{
				{Pod: web3, Copy: []Volume{claim("media", "media")}},
				{Pod: web2, Copy: []Volume{uploads, claim("media", "media")}},
				{Pod: web1, Copy: []Volume{uploads}},
			},
			want: []PodVolumes{
				{Pod: web3, Skipped: []Skipped{{Volume: "media", Reason: "claim media is copied from pod web-2"}}},
				{Pod: web2, Copy: []Volume{claim("media", "media")}, Skipped: []Skipped{copiedFrom("web-1")}},
				{Pod: web1, Copy: []Volume{uploads}},
			}},
		{name: "no pods", pods: []PodVolumes{}, want: []PodVolumes{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Dedupe(tt.pods); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Dedupe =\n%s\nwant\n%s", summary(got), summary(tt.want))
			}
		})
	}
}

func TestDedupeLeavesItsInputAlone(t *testing.T) {
	// Room after Select's skipped volumes, which an append that did not copy would write into.
	skipped := append(make([]Skipped, 0, 4), Skipped{Volume: "tls", Reason: "secret volumes are not copied"})
	pods := []PodVolumes{
		{Pod: replica("web-1", 60), Copy: []Volume{claim("uploads", "uploads")}},
		{Pod: replica("web-2", 30), Copy: []Volume{claim("uploads", "uploads")}, Skipped: skipped},
	}
	before := []PodVolumes{
		{Pod: pods[0].Pod, Copy: []Volume{claim("uploads", "uploads")}},
		{Pod: pods[1].Pod, Copy: []Volume{claim("uploads", "uploads")}, Skipped: []Skipped{{Volume: "tls", Reason: "secret volumes are not copied"}}},
	}
	Dedupe(pods)
	if !reflect.DeepEqual(pods, before) || skipped[:2][1] != (Skipped{}) {
		t.Errorf("Dedupe changed its input to\n%s(and wrote %+v after its skipped volumes)", summary(pods), skipped[:2][1])
	}
}

// summary shows pod selections by pod name, not whole pods.
func summary(pods []PodVolumes) string {
	s := ""
	for _, p := range pods {
		s += fmt.Sprintf("  %s/%s: copy %+v, skipped %+v\n", p.Pod.Namespace, p.Pod.Name, p.Copy, p.Skipped)
	}
	return s
}
