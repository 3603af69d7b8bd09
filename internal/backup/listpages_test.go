package backup

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// pageServer answers LISTs of configmaps in namespace ns1 with what respond says for each
// request (by its continue parameter and how many requests came before).
func pageServer(t *testing.T, respond func(n int, continueToken string) (int, string)) *httptest.Server {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		code, body := respond(int(calls.Add(1)), req.URL.Query().Get("continue"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func page(continueToken string, names ...string) string {
	items := ""
	for i, n := range names {
		if i > 0 {
			items += ","
		}
		items += fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"ns1"}}`, n)
	}
	return fmt.Sprintf(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"continue":%q},"items":[%s]}`, continueToken, items)
}

func status(code int, reason, continueToken string) string {
	return fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{"continue":%q},"status":"Failure","message":"%s","reason":%q,"code":%d}`,
		continueToken, reason, reason, code)
}

// listAll runs listPages against srv and returns the names it handed on, the error, and the log.
func listAll(t *testing.T, srv *httptest.Server) ([]string, *Log, error) {
	t.Helper()
	raw := discovery.NewDiscoveryClientForConfigOrDie(&rest.Config{Host: srv.URL}).RESTClient()
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cairn-system"}}
	sel, _, err := NewSelection(b, "cairn-system", testResources, []string{"ns1"})
	if err != nil {
		t.Fatal(err)
	}
	log := NewLog()
	ru := &run{Runner: &Runner{Raw: raw, PageSize: 2, Retry: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 4}},
		log: log, selection: sel}
	blocks := make(chan listedItem, 100)
	err = ru.listPages(context.Background(), testConfigMaps, "ns1", blocks)
	close(blocks)
	var names []string
	for it := range blocks {
		names = append(names, it.name)
	}
	return names, log, err
}

func TestListPagesResumesAfterAnExpiredContinueToken(t *testing.T) {
	srv := pageServer(t, func(_ int, token string) (int, string) {
		switch token {
		case "":
			return 200, page("t1", "a", "b")
		case "t1":
			return 410, status(410, "Expired", "t2") // the API server offers an inconsistent continuation
		case "t2":
			return 200, page("", "c")
		}
		return 500, status(500, "InternalError", "")
	})
	names, log, err := listAll(t, srv)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(names) != "[a b c]" {
		t.Errorf("items = %v, want [a b c]: resumed where the server allowed, not from the start", names)
	}
	if w, _ := log.Counts(); w != 1 {
		t.Errorf("warnings = %d, want 1 (the resumed list)", w)
	}
}

func TestListPagesRestartsABoundedNumberOfTimes(t *testing.T) {
	srv := pageServer(t, func(_ int, token string) (int, string) {
		if token == "" {
			return 200, page("t1", "a", "b")
		}
		return 410, status(410, "Expired", "") // no way to resume offered
	})
	names, _, err := listAll(t, srv)
	if err == nil {
		t.Fatal("no error: a LIST whose token always expires must end, not restart forever")
	}
	if len(names) != 2*(maxListRestarts+1) {
		t.Errorf("pages read = %d items, want %d (the first page, then %d restarts)", len(names), 2*(maxListRestarts+1), maxListRestarts)
	}
}

func TestListPagesRetriesTransientErrors(t *testing.T) {
	srv := pageServer(t, func(n int, _ string) (int, string) {
		if n <= 2 {
			return 503, status(503, "ServiceUnavailable", "")
		}
		return 200, page("", "a")
	})
	names, _, err := listAll(t, srv)
	if err != nil {
		t.Fatalf("error = %v: a LIST failing twice with 503 is retried", err)
	}
	if fmt.Sprint(names) != "[a]" {
		t.Errorf("items = %v", names)
	}
}

func TestListPagesGivesUpOnLastingTransientErrors(t *testing.T) {
	srv := pageServer(t, func(int, string) (int, string) { return 503, status(503, "ServiceUnavailable", "") })
	if _, _, err := listAll(t, srv); err == nil {
		t.Fatal("no error: a LIST that keeps failing must fail the backup once the retries run out")
	}
}

func TestListPagesForbiddenIsAnError(t *testing.T) {
	srv := pageServer(t, func(int, string) (int, string) { return 403, status(403, "Forbidden", "") })
	_, log, err := listAll(t, srv)
	if err != nil {
		t.Fatalf("error = %v: one forbidden resource does not stop the others", err)
	}
	if _, errs := log.Counts(); errs != 1 {
		t.Errorf("errors = %d, want 1: a backup missing a resource it may not list is PartiallyFailed, not Completed", errs)
	}
}

func TestListPagesSkipsAResourceThatIsGone(t *testing.T) {
	srv := pageServer(t, func(int, string) (int, string) { return 404, status(404, "NotFound", "") })
	_, log, err := listAll(t, srv)
	if err != nil {
		t.Fatal(err)
	}
	if w, errs := log.Counts(); w != 1 || errs != 0 {
		t.Errorf("warnings, errors = %d, %d; want 1, 0", w, errs)
	}
}
