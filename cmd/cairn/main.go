// Command cairn is Cairn's command-line interface (DESIGN.md section 12). Named kubectl-cairn
// on the PATH, it is also the kubectl plugin `kubectl cairn`.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/cairn-backup/cairn/internal/cli"
)

func main() {
	os.Exit(cli.Execute(os.Args[0], os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}
