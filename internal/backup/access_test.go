package backup

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestAccessCache(t *testing.T) {
	secrets := schema.GroupResource{Resource: "secrets"}
	configMaps := schema.GroupResource{Resource: "configmaps"}
	var asked atomic.Int32
	c := &accessCache{access: func(_ context.Context, gr schema.GroupResource, ns, verb string) (bool, string, error) {
		asked.Add(1)
		return gr != secrets, "RBAC: no rule", nil
	}}
	ctx := context.Background()
	for i, tt := range []struct {
		gr        schema.GroupResource
		verb      string
		wantOK    bool
		wantFirst bool
	}{
		{secrets, "list", false, true},
		{secrets, "list", false, false}, // named once
		{secrets, "get", false, true},   // another question
		{configMaps, "list", true, false},
		{configMaps, "list", true, false},
	} {
		ok, first, reason, err := c.allowed(ctx, tt.gr, "team-a", tt.verb)
		if err != nil || ok != tt.wantOK || first != tt.wantFirst {
			t.Errorf("%d: allowed = %v, first = %v, err = %v; want %v, %v", i, ok, first, err, tt.wantOK, tt.wantFirst)
		}
		if first && reason != "RBAC: no rule" {
			t.Errorf("%d: reason = %q", i, reason)
		}
	}
	if asked.Load() != 3 {
		t.Errorf("Access asked %d times, want 3 (each question once)", asked.Load())
	}

	failing := &accessCache{access: func(context.Context, schema.GroupResource, string, string) (bool, string, error) {
		return false, "", errors.New("API server down")
	}}
	if _, _, _, err := failing.allowed(ctx, secrets, "team-a", "list"); err == nil {
		t.Error("no error: a failure to find out is not a denial")
	}
	if ok, _, _, err := (*accessCache)(nil).allowed(ctx, secrets, "", "list"); !ok || err != nil {
		t.Errorf("no Access: allowed = %v, %v; want everything the operator may read", ok, err)
	}
}

func TestLeftOutMessage(t *testing.T) {
	got := leftOutMessage(schema.GroupResource{Resource: "secrets"}, "team-a", "list", "no RBAC rule")
	want := "Left out secrets in namespace team-a: the backup's requester may not list them (no RBAC rule)"
	if got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
	if got := leftOutMessage(schema.GroupResource{Group: "storage.k8s.io", Resource: "storageclasses"}, "", "list", ""); !strings.Contains(got, "storageclasses.storage.k8s.io cluster-scoped") {
		t.Errorf("message = %q", got)
	}
}

// A resource the requester may not list is never listed: the API server is not asked, the
// backup warns once, and it is not an error (the backup is Completed without it).
func TestListPagesLeavesOutWhatTheRequesterMayNotList(t *testing.T) {
	var lists atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		lists.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(page("", "a")))
	}))
	t.Cleanup(srv.Close)
	raw := discovery.NewDiscoveryClientForConfigOrDie(&rest.Config{Host: srv.URL}).RESTClient()
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns1"}}
	sel, _, err := NewSelection(b, "cairn-system", testResources, []string{"ns1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		allow     bool
		wantItems int
		wantLists int32
		wantWarns int32
	}{
		{name: "denied", allow: false, wantItems: 0, wantLists: 0, wantWarns: 1},
		{name: "allowed", allow: true, wantItems: 2, wantLists: 2, wantWarns: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lists.Store(0)
			log := NewLog()
			access := func(_ context.Context, gr schema.GroupResource, ns, verb string) (bool, string, error) {
				if gr != testConfigMaps.GroupResource() || ns != "ns1" || verb != "list" {
					t.Errorf("asked about %s %s %s", verb, gr, ns)
				}
				return tt.allow, "RBAC: no rule", nil
			}
			ru := &run{Runner: &Runner{Raw: raw, Retry: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 2}},
				log: log, selection: sel, access: &accessCache{access: access}}
			blocks := make(chan listedItem, 10)
			for range 2 { // the second time, the answer is remembered and not warned about again
				if err := ru.listPages(context.Background(), testConfigMaps, "ns1", blocks); err != nil {
					t.Fatal(err)
				}
			}
			close(blocks)
			if len(blocks) != tt.wantItems || lists.Load() != tt.wantLists {
				t.Errorf("items = %d, LISTs = %d; want %d, %d", len(blocks), lists.Load(), tt.wantItems, tt.wantLists)
			}
			if w, e := log.Counts(); w != tt.wantWarns || e != 0 {
				t.Errorf("warnings, errors = %d, %d; want %d, 0", w, e, tt.wantWarns)
			}
		})
	}
}
