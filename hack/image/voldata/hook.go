package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// hook is the command the e2e suite's hooks run in the app's container (the image holds no
// other binary): `voldata hook [-require FILE] [-write FILE] [-sleep D] [-exit N]` checks
// that FILE exists (exit 3 when it does not: an init hook that must see restored data), writes
// FILE (a marker with the time), sleeps for D, then exits with N, in that order. It returns
// the exit code.
func hook(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	require := fs.String("require", "", "A file that must exist, else the hook exits 3.")
	write := fs.String("write", "", "A file to write a marker into.")
	sleep := fs.Duration("sleep", 0, "How long to sleep before exiting.")
	exit := fs.Int("exit", 0, "The exit code.")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *require != "" {
		if _, err := os.Stat(*require); err != nil {
			fmt.Fprintf(stderr, "hook: %s is not there: %v\n", *require, err)
			if errors.Is(err, os.ErrNotExist) {
				return 3
			}
			return 1
		}
		fmt.Fprintf(stdout, "hook: %s is there\n", *require)
	}
	if *write != "" {
		marker := fmt.Sprintf("hook marker written at %s\n", time.Now().UTC().Format(time.RFC3339Nano))
		if err := os.WriteFile(*write, []byte(marker), 0o644); err != nil {
			fmt.Fprintf(stderr, "hook: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "hook: wrote %s\n", *write)
	}
	time.Sleep(*sleep)
	return *exit
}
