package storage

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// maxClockSkew is how far the server's clock may be from this one's before validation says
// so: Azure refuses a shared-key request whose date is more than 15 minutes off, a SAS or a
// GCS V4 signed URL signed by a clock ahead of the server's is not valid yet, and one signed
// by a clock behind it expires early (the azure provider starts its download URLs 5 minutes
// back for this).
const maxClockSkew = 5 * time.Minute

// serverClock is an HTTP transport that keeps the Date header of the latest response with the
// local time it came at, so that a store can compare the server's clock with this one's.
type serverClock struct {
	base http.RoundTripper
	now  func() time.Time

	mu            sync.Mutex
	server, local time.Time
}

func newServerClock(base http.RoundTripper) *serverClock {
	return &serverClock{base: base, now: time.Now}
}

// RoundTrip implements http.RoundTripper.
func (c *serverClock) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if date, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
		local := c.now()
		c.mu.Lock()
		c.server, c.local = date, local
		c.mu.Unlock()
	}
	return resp, nil
}

// last is the latest Date header and when it came; zero times when none came yet.
func (c *serverClock) last() (server, local time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.server, c.local
}

// skewProblem is an error saying the clocks differ, when the latest response's Date differs
// from the local time by more than maxClockSkew; nil otherwise, or when no response came.
func (c *serverClock) skewProblem(provider, endpoint string) error {
	server, local := c.last()
	return clockSkewProblem(provider, endpoint, server, local)
}

// clockSkewProblem decides whether the server's Date header (server), received at local,
// shows a clock skew to report. A Date has whole seconds: a second more is not a skew.
func clockSkewProblem(provider, endpoint string, server, local time.Time) error {
	if server.IsZero() || local.IsZero() {
		return nil
	}
	skew := local.Sub(server)
	if skew <= maxClockSkew && skew >= -maxClockSkew {
		return nil
	}
	way := "ahead of"
	if skew < 0 {
		way, skew = "behind", -skew
	}
	return fmt.Errorf("the clock here is %s %s the %s endpoint %s's (its Date header said %s at %s here): "+
		"signed requests and download URLs are refused when clocks differ by minutes; set this machine's clock right (NTP)",
		skew.Round(time.Second), way, provider, endpoint, server.UTC().Format(time.RFC3339), local.UTC().Format(time.RFC3339))
}
