package cli

import (
	"bytes"
	"testing"
	"time"
)

func TestProgressLines(t *testing.T) {
	at := func(s float64) time.Time { return now.Add(time.Duration(s * float64(time.Second))) }
	steps := []observation{
		{Phase: "New", At: at(0)},
		{Phase: "Queued", Reason: "position 1, namespace web overlaps running backup b0", At: at(0.1)},
		{Phase: "Queued", Reason: "position 1, namespace web overlaps running backup b0", At: at(3)},
		{Phase: "ReadyToStart", At: at(4)},
		{Phase: "InProgress", Done: 0, Total: 100, At: at(5)},
		{Phase: "InProgress", Done: 20, Total: 100, At: at(6)},
		{Phase: "InProgress", Done: 30, Total: 100, At: at(6.5)}, // within a second of the last line: not shown
		{Phase: "InProgress", Done: 60, Total: 100, At: at(8)},
		{Phase: "InProgress", Done: 100, Total: 100, At: at(8.2)}, // the last one is always shown
		{Phase: "Finalizing", Done: 100, Total: 100, At: at(9)},
		{Phase: "Completed", Done: 100, Total: 100, At: at(10)},
	}
	var buf bytes.Buffer
	p := &progressPrinter{w: &buf, noun: "items"}
	for _, o := range steps {
		p.observe(o)
	}
	p.finish()
	golden(t, "progress-lines.golden", buf.Bytes())
}

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	p := &progressPrinter{w: &buf, terminal: true, noun: "items"}
	p.observe(observation{Phase: "InProgress", Done: 0, Total: 40, At: now})
	p.observe(observation{Phase: "InProgress", Done: 10, Total: 40, At: now.Add(2 * time.Second)})
	p.observe(observation{Phase: "Completed", Done: 40, Total: 40, At: now.Add(5 * time.Second)})
	p.finish()
	want := "InProgress\n" +
		"\r\033[K[>                             ] 0/40 items" +
		"\r\033[K[======>                       ] 10/40 items, 5.0 items/s, ETA 6s" +
		"\nCompleted\n" +
		"\r\033[K[==============================] 40/40 items, 8.0 items/s\n"
	if got := buf.String(); got != want {
		t.Errorf("bar output:\n%q\nwant\n%q", got, want)
	}
}

func TestBar(t *testing.T) {
	tests := []struct {
		done, total int64
		want        string
	}{
		{0, 0, "[                              ]"},
		{0, 10, "[>                             ]"},
		{5, 10, "[==============>               ]"},
		{10, 10, "[==============================]"},
		{12, 10, "[==============================]"},
	}
	for _, tt := range tests {
		if got := bar(tt.done, tt.total); got != tt.want || len(got) != barWidth+2 {
			t.Errorf("bar(%d, %d) = %q, want %q", tt.done, tt.total, got, tt.want)
		}
	}
}

func TestEstimate(t *testing.T) {
	tests := []struct {
		name        string
		first, now  observation
		wantRate    float64
		wantETA     time.Duration
		wantEnabled bool
	}{
		{name: "no time passed", first: observation{Done: 0, Total: 10, At: now}, now: observation{Done: 5, Total: 10, At: now}},
		{name: "nothing done since", first: observation{Done: 5, Total: 10, At: now}, now: observation{Done: 5, Total: 10, At: now.Add(time.Second)}},
		{name: "half in 10s", first: observation{Done: 0, Total: 100, At: now}, now: observation{Done: 50, Total: 100, At: now.Add(10 * time.Second)},
			wantRate: 5, wantETA: 10 * time.Second, wantEnabled: true},
		{name: "more done than counted", first: observation{Done: 0, Total: 10, At: now}, now: observation{Done: 12, Total: 10, At: now.Add(2 * time.Second)},
			wantRate: 6, wantETA: 0, wantEnabled: true},
	}
	for _, tt := range tests {
		rate, eta, ok := estimate(tt.first, tt.now)
		if ok != tt.wantEnabled || rate != tt.wantRate || eta != tt.wantETA {
			t.Errorf("%s: estimate = %v, %v, %v; want %v, %v, %v", tt.name, rate, eta, ok, tt.wantRate, tt.wantETA, tt.wantEnabled)
		}
	}
}
