package testenv

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	. "github.com/onsi/gomega"
)

// TestStallingProxy shows the proxy forwarding reads and writes, and, while stalled, holding a
// write (the server has not seen it, and its client has no answer) while a read still goes
// through, until Unstall lets the write through; stalled with StallReads, it holds a read too.
// A proxy that did not stall would forward the write before the read; one that did not
// forward would give no answer at all.
func TestStallingProxy(t *testing.T) {
	g := NewWithT(t)
	var (
		received = make(chan string, 10) // the requests the server saw, in order
		server   = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			received <- r.Method + " " + r.URL.Path
			_, _ = io.WriteString(w, "answered "+r.URL.Path)
		}))
	)
	t.Cleanup(server.Close)
	p := StartStallingProxy(t, server.URL)
	u, err := url.Parse(p.URL)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(u.Hostname()).To(Equal("127.0.0.1"))

	do := func(method, path string) string {
		req, err := http.NewRequestWithContext(t.Context(), method, p.URL+path, nil)
		if err != nil {
			return err.Error()
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err.Error()
		}
		return string(body)
	}

	g.Expect(do(http.MethodPut, "/before")).To(Equal("answered /before"))
	g.Expect(p.Held()).To(Equal(0))

	p.Stall()
	held := make(chan string, 1)
	go func() { held <- do(http.MethodPut, "/held") }()
	g.Eventually(p.Held).Should(Equal(1))
	g.Expect(do(http.MethodGet, "/read")).To(Equal("answered /read"))
	g.Expect(held).NotTo(Receive(), "the held write was answered while stalled")

	p.Unstall()
	g.Eventually(held).Should(Receive(Equal("answered /held")))
	g.Expect(do(http.MethodDelete, "/after")).To(Equal("answered /after"))
	g.Expect(p.Held()).To(Equal(1))

	p.StallReads()
	heldRead := make(chan string, 1)
	go func() { heldRead <- do(http.MethodGet, "/held-read") }()
	g.Eventually(p.Held).Should(Equal(2))
	g.Consistently(heldRead, "100ms").ShouldNot(Receive(), "the held read was answered while stalled")
	p.Unstall()
	g.Eventually(heldRead).Should(Receive(Equal("answered /held-read")))
	g.Expect(do(http.MethodGet, "/read-after")).To(Equal("answered /read-after"))

	close(received)
	var seen []string
	for r := range received {
		seen = append(seen, r)
	}
	g.Expect(seen).To(Equal([]string{"PUT /before", "GET /read", "PUT /held", "DELETE /after", "GET /held-read", "GET /read-after"}))
}
