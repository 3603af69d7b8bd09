package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cairn-backup/cairn/internal/testenv"
)

// Where a benchmark's time goes in the manager: with CAIRN_BENCH_PROFILE_DIR=DIR the benchmarks
// that run the manager binary start it with --pprof-bind-address and write its CPU profile of
// the measured run into DIR (<name>-cpu.pprof, CAIRN_BENCH_PROFILE_SECONDS long, 10 by default,
// from the moment the run starts) and its heap when the run has ended (<name>-heap.pprof). Read
// them with 'go tool pprof -top bin/manager DIR/<name>-cpu.pprof'.

// profileDir is CAIRN_BENCH_PROFILE_DIR ("" when no profile is wanted).
func profileDir() string { return os.Getenv("CAIRN_BENCH_PROFILE_DIR") }

// pprofArgs are the manager's flags for its profiling endpoints, on a free local port, and the
// address they listen on; none when no profile is wanted.
func pprofArgs(b *testing.B) (args []string, addr string) {
	b.Helper()
	if profileDir() == "" {
		return nil, ""
	}
	addr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
	return []string{"--pprof-bind-address", addr}, addr
}

// managerProfile is a CPU profile of the manager being taken.
type managerProfile struct {
	done chan error
}

// startCPUProfile starts taking a CPU profile of the manager at addr into DIR/<name>-cpu.pprof;
// nil when no profile is wanted. wait returns once it is written.
func startCPUProfile(b *testing.B, addr, name string) *managerProfile {
	b.Helper()
	if addr == "" {
		return nil
	}
	seconds := 10
	if s := os.Getenv("CAIRN_BENCH_PROFILE_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("CAIRN_BENCH_PROFILE_SECONDS=%q: want a whole number of seconds", s)
		}
		seconds = n
	}
	p := &managerProfile{done: make(chan error, 1)}
	go func() {
		p.done <- fetchProfile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds), name+"-cpu.pprof")
	}()
	return p
}

// wait waits for the profile to be written.
func (p *managerProfile) wait(b *testing.B) {
	b.Helper()
	if p == nil {
		return
	}
	if err := <-p.done; err != nil {
		b.Fatal(err)
	}
}

// writeHeapProfile writes the manager's heap (what is in use and what was allocated) into
// DIR/<name>-heap.pprof; nothing when no profile is wanted.
func writeHeapProfile(b *testing.B, addr, name string) {
	b.Helper()
	if addr == "" {
		return
	}
	if err := fetchProfile("http://"+addr+"/debug/pprof/heap", name+"-heap.pprof"); err != nil {
		b.Fatal(err)
	}
}

func fetchProfile(url, file string) error {
	// No deadline: a profile takes as long as it asked for.
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("taking the manager's profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("taking the manager's profile: %s", resp.Status)
	}
	if err := os.MkdirAll(profileDir(), 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(profileDir(), file))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// apiRequests is how many requests the API server has served, by verb and resource
// ("POST configmaps", "PATCH restores/status", "WATCH restores"...), read from its own metrics.
func apiRequests(b *testing.B, cfg *rest.Config) map[string]float64 {
	b.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatal(err)
	}
	label := func(line, name string) string {
		_, rest, ok := strings.Cut(line, name+`="`)
		if !ok {
			return ""
		}
		v, _, _ := strings.Cut(rest, `"`)
		return v
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(raw)) {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		key := label(line, "verb") + " " + label(line, "resource")
		if sub := label(line, "subresource"); sub != "" {
			key += "/" + sub
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			b.Fatal(err)
		}
		out[key] += v
	}
	return out
}

// requestsSince is what the API server served between two apiRequests, without what served
// nothing; and a line listing them, most first.
func requestsSince(before, after map[string]float64) (map[string]float64, string) {
	diff := map[string]float64{}
	for key, v := range after {
		if d := v - before[key]; d > 0 {
			diff[key] = d
		}
	}
	keys := make([]string, 0, len(diff))
	for key := range diff {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(i, j int) bool {
		if diff[keys[i]] != diff[keys[j]] {
			return diff[keys[i]] > diff[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, 0, len(keys))
	for _, key := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", key, diff[key]))
	}
	return diff, strings.Join(parts, ", ")
}
