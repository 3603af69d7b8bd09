// Command phasetables writes the phase-owner tables of internal/phases into a Markdown file
// (docs/architecture.md), between the markers of each kind (phases.BeginMarker, EndMarker).
// With -check it changes nothing and fails when the file differs from what it would write:
// 'make verify' runs it so, and 'make docs' without.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/cairn-backup/cairn/internal/phases"
)

func main() {
	check := flag.Bool("check", false, "fail when the file is not up to date instead of rewriting it")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: phasetables [-check] FILE.md")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *check); err != nil {
		fmt.Fprintln(os.Stderr, "phasetables:", err)
		os.Exit(1)
	}
}

func run(path string, check bool) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, t := range phases.Tables() {
		if err := t.Validate(); err != nil {
			return err
		}
	}
	doc, err := phases.ReplaceTables(string(old), phases.Tables(), phases.KindBackup, phases.KindRestore)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case bytes.Equal(old, []byte(doc)):
		return nil
	case check:
		return fmt.Errorf("%s: its phase tables differ from internal/phases; run 'make docs' and commit", path)
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
