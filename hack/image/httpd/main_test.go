package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFetch(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/config/greeting.txt" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("hello"))
	}))
	defer server.Close()
	// localhost is resolved (from /etc/hosts), as a Service's name is in a pod.
	url := strings.Replace(server.URL, "127.0.0.1", "localhost", 1)

	var out bytes.Buffer
	if err := fetch(url+"/config/greeting.txt", &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "localhost resolves to ") || !strings.Contains(out.String(), "127.0.0.1") ||
		!strings.HasSuffix(out.String(), "\nhello") {
		t.Fatalf("output %q", out.String())
	}
	out.Reset()
	if err := fetch(url+"/missing", &out); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("a missing file: %v, output %q", err, out.String())
	}
	if err := fetch("http://no-such-name.invalid/", &out); err == nil {
		t.Fatal("a name that does not resolve: no error")
	}
}
