package testenv

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// StallingProxy stands between the manager and an S3 server: while it is stalled, writes (PUT,
// POST, DELETE) hang until Unstall lets them through or their client goes away, like an object
// store that takes requests and never answers them. Reads (GET, HEAD) go through, unless it was
// stalled with StallReads: then they hang too, as a restore's reads do on a store that stopped
// answering. Safe for concurrent use.
type StallingProxy struct {
	// URL is where the proxy listens, for a storage location's endpoint.
	URL string

	mu      sync.Mutex
	release chan struct{} // closed by Unstall; nil while requests pass
	reads   bool          // reads are held too
	held    int
}

// StartStallingProxy starts a proxy to target (a URL) on 127.0.0.1, on a free port, and stops
// it when the test ends, letting what it holds go first.
func StartStallingProxy(t TB, target string) *StallingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ServeStallingProxy(t, l, target)
}

// ServeStallingProxy is StartStallingProxy on a listener the test opened, for a proxy that
// must be reached at another address than 127.0.0.1: the node suite's pods reach the node's
// address, on the loopback of the suite's own network namespace. It closes l when the test ends.
func ServeStallingProxy(t TB, l net.Listener, target string) *StallingProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		_ = l.Close()
		t.Fatalf("the stalling proxy's target: %v", err)
	}
	p := &StallingProxy{URL: "http://" + l.Addr().String()}
	forward := httputil.NewSingleHostReverseProxy(u) // keeps the Host header, which SigV4 signed
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.wait(r) {
			return
		}
		forward.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { p.Unstall(); _ = srv.Close() })
	return p
}

// wait holds r while the proxy is stalled for its kind of request. It reports whether r may
// go on: false when its client went away first.
func (p *StallingProxy) wait(r *http.Request) bool {
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	p.mu.Lock()
	release := p.release
	if read && !p.reads {
		release = nil
	}
	if release != nil {
		p.held++
	}
	p.mu.Unlock()
	if release == nil {
		return true
	}
	select {
	case <-release:
		return true
	case <-r.Context().Done():
		return false
	}
}

// Stall makes the writes that arrive from now on hang until Unstall.
func (p *StallingProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.release == nil {
		p.release = make(chan struct{})
	}
}

// StallReads makes every request that arrives from now on hang until Unstall, reads too.
func (p *StallingProxy) StallReads() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.release == nil {
		p.release = make(chan struct{})
	}
	p.reads = true
}

// Unstall lets the requests it holds through, and those that arrive later.
func (p *StallingProxy) Unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.release != nil {
		close(p.release)
		p.release = nil
	}
	p.reads = false
}

// Held is how many requests the proxy has held since it started, let through or not: a test
// waits for it to grow to know that a request reached the proxy and hangs.
func (p *StallingProxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}
