package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cairn-backup/cairn/internal/podvolume"
)

// restoreHelperCommand is the first argument that runs the restore helper: the init container
// a restore puts first in each restored pod whose volumes it restores (DESIGN.md section 16).
const restoreHelperCommand = "restore-helper"

// restoreHelperOptions are the restore helper's settings.
type restoreHelperOptions struct {
	dir              string
	volumes          []string
	timeout          time.Duration
	poll             time.Duration
	terminationLog   string
	progressInterval time.Duration
}

func parseRestoreHelperOptions(args []string) (restoreHelperOptions, error) {
	var o restoreHelperOptions
	var volumes string
	fs := flag.NewFlagSet("cairn-restore-helper", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.dir, "dir", podvolume.RestoreMarkerMountPath, "The directory the node agent writes a marker in for each volume it has restored (or failed to).")
	fs.StringVar(&volumes, "volumes", "", "The volumes to wait for, comma-separated.")
	fs.DurationVar(&o.timeout, "timeout", 0, "How long to wait at most; 0 waits until every volume is restored or one fails.")
	fs.DurationVar(&o.poll, "poll", time.Second, "How often the markers are looked for.")
	fs.StringVar(&o.terminationLog, "termination-log", "/dev/termination-log", "Where the reason of a failure is written, for the pod's status.")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: the restore helper takes only flags", fs.Arg(0))
	}
	for _, v := range strings.Split(volumes, ",") {
		if v == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
			return o, fmt.Errorf("invalid volume name %q in --volumes: %s", v, strings.Join(errs, "; "))
		}
		o.volumes = append(o.volumes, v)
	}
	if len(o.volumes) == 0 {
		return o, errors.New("--volumes is required: the volumes to wait for")
	}
	if o.poll <= 0 || o.timeout < 0 {
		return o, errors.New("--poll must be greater than zero and --timeout not negative")
	}
	o.progressInterval = 30 * time.Second
	return o, nil
}

// runRestoreHelper waits for the pod's volumes and returns the exit code: 0 once every
// volume is restored, 1 when one failed, was cancelled, or the wait timed out (the reason in
// the termination log, so `kubectl describe pod` shows it), 2 for bad flags.
func runRestoreHelper(args []string) int {
	opts, err := parseRestoreHelperOptions(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "restore-helper: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = waitForVolumes(ctx, opts, os.Stdout)
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "restore-helper: %v\n", err)
	_ = os.WriteFile(opts.terminationLog, []byte(err.Error()), 0o644)
	return 1
}

// waitForVolumes waits until each volume has its done marker (nil), or one has its failed
// marker (an error with the reason the node agent wrote), or the wait ends.
func waitForVolumes(ctx context.Context, o restoreHelperOptions, out io.Writer) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	fmt.Fprintf(out, "Waiting for the data of volumes %s\n", strings.Join(o.volumes, ", "))
	lastReport := time.Now()
	for {
		waiting, err := volumeStates(o.dir, o.volumes)
		if err != nil {
			return err
		}
		if len(waiting) == 0 {
			fmt.Fprintln(out, "Every volume is restored")
			return nil
		}
		if time.Since(lastReport) >= o.progressInterval {
			fmt.Fprintf(out, "Still waiting for volumes %s\n", strings.Join(waiting, ", "))
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("the data of volumes %s was not restored within %s", strings.Join(waiting, ", "), o.timeout)
			}
			return fmt.Errorf("stopped while waiting for the data of volumes %s", strings.Join(waiting, ", "))
		case <-time.After(o.poll):
		}
	}
}

// volumeStates returns the volumes not restored yet, or the first failure a marker reports.
func volumeStates(dir string, volumes []string) ([]string, error) {
	var waiting []string
	for _, v := range volumes {
		if reason, err := os.ReadFile(filepath.Join(dir, v+podvolume.FailedMarkerSuffix)); err == nil {
			return nil, fmt.Errorf("volume %s was not restored: %s", v, strings.TrimSpace(string(reason)))
		}
		if _, err := os.Stat(filepath.Join(dir, v+podvolume.DoneMarkerSuffix)); err != nil {
			waiting = append(waiting, v)
		}
	}
	return waiting, nil
}
