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

// TestProgressLinesWithVolumes: a backup whose items are written and whose volumes are being
// copied shows the bytes, with their rate and ETA once the items are done; lines still come
// at most once a second, and the last one always.
func TestProgressLinesWithVolumes(t *testing.T) {
	at := func(s float64) time.Time { return now.Add(time.Duration(s * float64(time.Second))) }
	const mib = 1 << 20
	steps := []observation{
		{Phase: "InProgress", Done: 10, Total: 40, At: at(0)},
		{Phase: "InProgress", Done: 30, Total: 40, VolumeDone: 0, VolumeTotal: 200 * mib, At: at(1)},
		{Phase: "InProgress", Done: 40, Total: 40, VolumeDone: 10 * mib, VolumeTotal: 200 * mib, At: at(2)},
		{Phase: "WaitingForPluginOperations", Done: 40, Total: 40, VolumeDone: 10 * mib, VolumeTotal: 200 * mib, At: at(2.5)},
		{Phase: "WaitingForPluginOperations", Done: 40, Total: 40, VolumeDone: 50 * mib, VolumeTotal: 200 * mib, At: at(4)},
		{Phase: "WaitingForPluginOperations", Done: 40, Total: 40, VolumeDone: 60 * mib, VolumeTotal: 200 * mib, At: at(4.5)}, // within a second: not shown
		{Phase: "WaitingForPluginOperations", Done: 40, Total: 40, VolumeDone: 130 * mib, VolumeTotal: 200 * mib, At: at(6)},
		{Phase: "WaitingForPluginOperations", Done: 40, Total: 40, VolumeDone: 200 * mib, VolumeTotal: 200 * mib, At: at(6.5)}, // the last one is always shown
		{Phase: "Completed", Done: 40, Total: 40, VolumeDone: 200 * mib, VolumeTotal: 200 * mib, At: at(7)},
	}
	var buf bytes.Buffer
	p := &progressPrinter{w: &buf, noun: "items"}
	for _, o := range steps {
		p.observe(o)
	}
	p.finish()
	golden(t, "progress-volumes.golden", buf.Bytes())
}

// TestProgressBarVolumes: once the items are done, the bar is the volume bytes'.
func TestProgressBarVolumes(t *testing.T) {
	var buf bytes.Buffer
	p := &progressPrinter{w: &buf, terminal: true, noun: "items"}
	p.observe(observation{Phase: "WaitingForPluginOperations", Done: 40, Total: 40, VolumeDone: 0, VolumeTotal: 100 << 20, At: now})
	p.observe(observation{Phase: "WaitingForPluginOperations", Done: 40, Total: 40, VolumeDone: 50 << 20, VolumeTotal: 100 << 20, At: now.Add(5 * time.Second)})
	p.finish()
	want := "WaitingForPluginOperations\n" +
		"\r\033[K[>                             ] 40/40 items, volumes 0 B/100.0 MiB" +
		"\r\033[K[==============>               ] 40/40 items, volumes 50.0 MiB/100.0 MiB, 10.0 MiB/s, ETA 5s\n"
	if got := buf.String(); got != want {
		t.Errorf("bar output:\n%q\nwant\n%q", got, want)
	}
}
