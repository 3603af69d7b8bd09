// Package cli is the `cairn` command (DESIGN.md section 12): everything a user does with Cairn,
// through the Kubernetes API only. It creates and reads Backups, Restores, Schedules and
// storage locations, follows them with a watch, and reads their files through DownloadRequests
// and the URLs the manager answers with; it never opens a storage location itself.
package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// Version is the CLI's version, set at build time (-ldflags "-X .../internal/cli.Version=...").
var Version = "dev"

// Exit codes: 0 only when the command did what it was asked (a waited-for backup or restore
// ended Completed).
const (
	ExitOK = 0
	// ExitError is any error: no cluster configuration, Cairn not installed, permission
	// denied, no such object, a download that failed its checksum.
	ExitError = 1
	// ExitUsage is a command line that cannot be run (unknown flag, bad value).
	ExitUsage = 2
	// ExitPartiallyFailed is a waited-for backup or restore that ended PartiallyFailed.
	ExitPartiallyFailed = 3
	// ExitFailed is a waited-for backup or restore that ended Failed or FailedValidation.
	ExitFailed = 4
	// ExitDetached is --wait interrupted with Ctrl-C: the backup or restore goes on.
	ExitDetached = 130
)

// DefaultOperatorNamespace is where storage locations live unless --cairn-namespace says else.
const DefaultOperatorNamespace = "cairn-system"

// exitError carries an exit code other than ExitError.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error { return &exitError{code: code, err: err} }

func usageErrorf(format string, args ...any) error {
	return withCode(ExitUsage, fmt.Errorf(format, args...))
}

// ExitCode is the process exit code for the error a command returned.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return ExitError
}

// env is what every command works with: the streams, the kubeconfig flags and the client made
// from them, the output format and the clock.
type env struct {
	streams genericiooptions.IOStreams
	flags   *genericclioptions.ConfigFlags
	// output is -o: table, json or yaml (wide is a table with more columns).
	output string
	// operatorNamespace holds the storage locations (--cairn-namespace).
	operatorNamespace string
	clock             clock.Clock
	// terminal is whether stdout is a terminal: progress bars instead of lines, prompts.
	terminal bool
	// restConfig is how to reach the API server, from the kubeconfig flags; tests point it
	// at a fake server.
	restConfig func() (*rest.Config, error)
	// newClient makes the API client; tests replace it.
	newClient func() (client.WithWatch, error)
	// httpClient fetches download URLs (newHTTPClient).
	httpClient *http.Client
	// idleTimeout fails a download whose body stops arriving for that long.
	idleTimeout time.Duration
	// interrupt ends a --wait when the user presses Ctrl-C; tests replace it.
	interrupt func(ctx context.Context) (context.Context, context.CancelFunc)
	// requestTimeout bounds the wait for a DownloadRequest's answer.
	requestTimeout time.Duration

	c client.WithWatch
}

// Scheme has the kinds the CLI reads and writes, and the server's tables (meta.k8s.io/v1 Table)
// that `get` prints.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(metav1.AddMetaToScheme(s))
	utilruntime.Must(cairnv1.AddToScheme(s))
	return s
}

func newEnv(streams genericiooptions.IOStreams) *env {
	e := &env{
		streams:        streams,
		flags:          genericclioptions.NewConfigFlags(true).WithDeprecatedPasswordFlag(),
		clock:          clock.RealClock{},
		httpClient:     newHTTPClient(downloadHeaderTimeout),
		idleTimeout:    downloadIdleTimeout,
		interrupt:      interruptContext,
		requestTimeout: time.Minute,
	}
	if f, ok := streams.Out.(*os.File); ok {
		e.terminal = term.IsTerminal(int(f.Fd()))
	}
	e.restConfig = func() (*rest.Config, error) {
		if err := e.checkConfig(); err != nil {
			return nil, err
		}
		cfg, err := e.flags.ToRESTConfig()
		if err != nil {
			return nil, err
		}
		cfg.UserAgent = "cairn/" + Version
		return cfg, nil
	}
	e.newClient = func() (client.WithWatch, error) {
		cfg, err := e.restConfig()
		if err != nil {
			return nil, err
		}
		return client.NewWithWatch(cfg, client.Options{Scheme: Scheme()})
	}
	return e
}

// errNoConfig means there is no kubeconfig, no --server and no in-cluster configuration:
// client-go would otherwise try http://localhost:8080 and fail with a connection error.
var errNoConfig = errors.New("no cluster configuration: set KUBECONFIG, pass --kubeconfig, or run inside a cluster")

// checkConfig fails with errNoConfig when there is no configuration to talk to a cluster with.
func (e *env) checkConfig() error {
	if e.flags.APIServer != nil && *e.flags.APIServer != "" {
		return nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return nil
	}
	raw, err := e.flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return err
	}
	if len(raw.Contexts) == 0 && len(raw.Clusters) == 0 {
		return errNoConfig
	}
	return nil
}

// client returns the API client, made on first use.
func (e *env) client() (client.WithWatch, error) {
	if e.c == nil {
		c, err := e.newClient()
		if err != nil {
			return nil, err
		}
		e.c = c
	}
	return e.c, nil
}

// namespace is -n, else the kubeconfig context's namespace, else default.
func (e *env) namespace() (string, error) {
	if e.flags.Namespace != nil && *e.flags.Namespace != "" {
		return *e.flags.Namespace, nil
	}
	ns, _, err := e.flags.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// locationNamespace is where storage locations are: -n when given, else the operator's.
func (e *env) locationNamespace() string {
	if e.flags.Namespace != nil && *e.flags.Namespace != "" {
		return *e.flags.Namespace
	}
	return e.operatorNamespace
}

func (e *env) printf(format string, args ...any) {
	fmt.Fprintf(e.streams.Out, format, args...)
}

func (e *env) errorf(format string, args ...any) {
	fmt.Fprintf(e.streams.ErrOut, format, args...)
}

func newRootCommand(name string, e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "cairn",
		Short: "Back up and restore Kubernetes namespaces with Cairn",
		Long: `cairn creates, follows and reads Cairn's backups, restores and schedules.

It talks only to the Kubernetes API, with kubectl's configuration (--kubeconfig, --context,
-n, --as), and reads backup files through the URLs that Cairn's DownloadRequests answer with.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if strings.HasPrefix(filepath.Base(name), "kubectl-") {
		// Run by kubectl as a plugin: help and completion say `kubectl cairn`.
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl cairn"}
	}
	root.SetIn(e.streams.In)
	root.SetOut(e.streams.Out)
	root.SetErr(e.streams.ErrOut)
	e.flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&e.operatorNamespace, "cairn-namespace", DefaultOperatorNamespace,
		"The namespace Cairn runs in, which holds the storage locations.")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return withCode(ExitUsage, err) })
	root.AddCommand(
		withNameCompletion(e, newBackupCommand(e), backupKind),
		withNameCompletion(e, newRestoreCommand(e), restoreKind),
		withNameCompletion(e, newScheduleCommand(e), scheduleKind),
		withNameCompletion(e, newLocationCommand(e), locationKind),
		newVersionCommand(e))
	return root
}

// withOutput gives cmd the -o flag of the commands that show objects: table, wide, json or yaml.
func withOutput(e *env, cmd *cobra.Command) *cobra.Command {
	cmd.Flags().StringVarP(&e.output, "output", "o", "table", "Output format: table, wide, json or yaml.")
	cmd.PreRunE = func(*cobra.Command, []string) error {
		switch e.output {
		case "table", "wide", "json", "yaml":
			return nil
		}
		return usageErrorf("unknown output format %q: want table, wide, json or yaml", e.output)
	}
	return cmd
}

// Execute runs the command line args and returns the exit code, printing any error to stderr
// as a person can act on it.
func Execute(name string, args []string, streams genericiooptions.IOStreams) int {
	return execute(newRootCommand(name, newEnv(streams)), args, streams)
}

func execute(root *cobra.Command, args []string, streams genericiooptions.IOStreams) int {
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	code := ExitCode(err)
	if strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "accepts ") ||
		strings.HasPrefix(err.Error(), "requires ") {
		code = ExitUsage
	}
	if msg := explain(err); msg != "" {
		fmt.Fprintf(streams.ErrOut, "Error: %s\n", msg)
	}
	return code
}

// explain turns an error into what a person should know and do.
func explain(err error) string {
	var status apierrors.APIStatus
	switch {
	case clientcmd.IsEmptyConfig(err) || errors.Is(err, clientcmd.ErrEmptyConfig):
		return errNoConfig.Error()
	case meta.IsNoMatchError(err):
		return "the cluster does not know Cairn's resources (cairn.dev/v1alpha1): is Cairn installed?"
	case apierrors.IsForbidden(err) && errors.As(err, &status):
		return "permission denied: " + status.Status().Message
	case apierrors.IsUnauthorized(err):
		return "the cluster did not accept your credentials: " + err.Error()
	}
	var e *exitError
	if errors.As(err, &e) && e.err == nil {
		return ""
	}
	return err.Error()
}

// notFound turns a NotFound from the API into "backup b1 not found in namespace ns".
func notFound(err error, kind, name, namespace string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s %q not found in namespace %s", kind, name, namespace)
	}
	return err
}
