package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// observation is one state of a followed backup or restore: its phase, why it is in it, how
// many items are done, and how many bytes of pod volume data were read (a backup's, once its
// volumes are being copied).
type observation struct {
	Phase       string
	Reason      string
	Done        int64
	Total       int64
	VolumeDone  int64
	VolumeTotal int64
	At          time.Time
}

// hasVolumes says whether the observation counts volume bytes.
func (o observation) hasVolumes() bool { return o.VolumeDone > 0 || o.VolumeTotal > 0 }

// itemsDone says whether every item counted is done: what moves after that is volume data.
func (o observation) itemsDone() bool { return o.Done >= o.Total }

// complete says whether nothing counted is left: the items, and the volume bytes if any.
func (o observation) complete() bool {
	return o.itemsDone() && (!o.hasVolumes() || o.VolumeDone >= o.VolumeTotal)
}

// progressPrinter shows a followed backup or restore: a line for each phase change, and the
// items done, then the volume bytes read — a bar rewritten in place on a terminal, plain lines
// (at most one a second) otherwise, so that logs of CI jobs stay readable.
type progressPrinter struct {
	w        io.Writer
	terminal bool
	// noun is what the items are called ("items").
	noun string

	started bool
	last    observation
	first   *observation // the first sample with items, for the rate
	// firstVolumes is the first sample with volume bytes, for their rate.
	firstVolumes *observation
	lastLine     time.Time
	barShown     bool
}

// progressLineInterval is the least time between two plain progress lines.
const progressLineInterval = time.Second

// barWidth is the number of cells in a progress bar.
const barWidth = 30

func (p *progressPrinter) observe(o observation) {
	if !p.started || o.Phase != p.last.Phase || o.Reason != p.last.Reason {
		p.endBar()
		line := o.Phase
		if o.Reason != "" {
			line += ": " + o.Reason
		}
		fmt.Fprintln(p.w, line)
		p.lastLine = time.Time{} // a new phase shows its progress at once
	}
	itemsMoved := o.Total > 0 && (!p.started || o.Done != p.last.Done || o.Total != p.last.Total)
	volumesMoved := o.hasVolumes() && (!p.started || o.VolumeDone != p.last.VolumeDone || o.VolumeTotal != p.last.VolumeTotal)
	p.started = true
	p.last = o
	if !itemsMoved && !volumesMoved {
		return
	}
	if p.first == nil {
		first := o
		p.first = &first
	}
	if p.firstVolumes == nil && o.hasVolumes() {
		first := o
		p.firstVolumes = &first
	}
	text := p.progressText(o)
	if p.terminal {
		b := bar(o.Done, o.Total)
		if o.hasVolumes() && o.itemsDone() {
			b = bar(o.VolumeDone, o.VolumeTotal)
		}
		fmt.Fprintf(p.w, "\r\033[K%s %s", b, text)
		p.barShown = true
		return
	}
	if o.complete() || p.lastLine.IsZero() || o.At.Sub(p.lastLine) >= progressLineInterval {
		fmt.Fprintln(p.w, text)
		p.lastLine = o.At
	}
}

// finish ends a bar left on the terminal's last line.
func (p *progressPrinter) finish() { p.endBar() }

func (p *progressPrinter) endBar() {
	if p.barShown {
		fmt.Fprintln(p.w)
		p.barShown = false
	}
}

// progressText is "45/100 items, 12.5 items/s, ETA 4s"; the rate and ETA once they can be
// told (items done since the first sample, over the time since). With volume bytes it goes on
// with ", volumes 10.0 MiB/200.0 MiB", and once the items are done the rate and ETA are the
// bytes': "100/100 items, volumes 120.0 MiB/200.0 MiB, 20.0 MiB/s, ETA 4s".
func (p *progressPrinter) progressText(o observation) string {
	text := fmt.Sprintf("%d/%d %s", o.Done, o.Total, p.noun)
	if !o.hasVolumes() || !o.itemsDone() {
		if rate, eta, ok := estimate(*p.first, o); ok {
			text += fmt.Sprintf(", %.1f %s/s", rate, p.noun)
			if o.Done < o.Total {
				text += ", ETA " + duration.HumanDuration(eta)
			}
		}
	}
	if !o.hasVolumes() {
		return text
	}
	text += fmt.Sprintf(", volumes %s/%s", humanBytes(o.VolumeDone), humanBytes(o.VolumeTotal))
	if !o.itemsDone() {
		return text
	}
	first := observation{Done: p.firstVolumes.VolumeDone, At: p.firstVolumes.At}
	if rate, eta, ok := estimate(first, observation{Done: o.VolumeDone, Total: o.VolumeTotal, At: o.At}); ok {
		text += fmt.Sprintf(", %s/s", humanBytes(int64(rate)))
		if o.VolumeDone < o.VolumeTotal {
			text += ", ETA " + duration.HumanDuration(eta)
		}
	}
	return text
}

// estimate is the rate of items from first to now, and the time the rest will take at it.
func estimate(first, now observation) (rate float64, eta time.Duration, ok bool) {
	elapsed := now.At.Sub(first.At)
	done := now.Done - first.Done
	if elapsed <= 0 || done <= 0 {
		return 0, 0, false
	}
	rate = float64(done) / elapsed.Seconds()
	left := now.Total - now.Done
	if left < 0 {
		left = 0
	}
	return rate, time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second), true
}

// bar is [=====>      ] for done of total.
func bar(done, total int64) string {
	if total <= 0 {
		return "[" + strings.Repeat(" ", barWidth) + "]"
	}
	if done > total {
		done = total
	}
	filled := int(done * barWidth / total)
	switch filled {
	case barWidth:
		return "[" + strings.Repeat("=", barWidth) + "]"
	case 0:
		return "[>" + strings.Repeat(" ", barWidth-1) + "]"
	}
	return "[" + strings.Repeat("=", filled-1) + ">" + strings.Repeat(" ", barWidth-filled) + "]"
}
