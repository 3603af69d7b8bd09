package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/blobproxy"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/controller/nodeagent"
	"github.com/cairn-backup/cairn/internal/podvolume"
)

// nodeAgentCommand is the first argument that runs the node agent instead of the operator.
const nodeAgentCommand = "node-agent"

// nodeAgentOptions are the node agent's command-line settings.
type nodeAgentOptions struct {
	namespace        string
	node             string
	podsDir          string
	repositoryServer string
	repositoryCA     string
	tokenFile        string
	passwordSecret   string
	configDir        string
	kubeconfig       string
	metricsAddr      string
	probeAddr        string
	restoreParallel  int
	maxCopies        int
	emptyDirCapacity string
	emptyDirBytes    int64 // emptyDirCapacity, parsed
	zap              zap.Options
}

func newNodeAgentFlagSet(o *nodeAgentOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("cairn-node-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.namespace, "namespace", "cairn-system", "The operator's namespace, which holds the PodVolumeBackups.")
	fs.StringVar(&o.node, "node-name", os.Getenv("NODE_NAME"), "The node this agent runs on: it copies only the volumes of that node's pods. Defaults to $NODE_NAME.")
	fs.StringVar(&o.podsDir, "pods-dir", "/var/lib/kubelet/pods", "The kubelet's pods directory as mounted in this container (read-only).")
	fs.StringVar(&o.repositoryServer, "repository-server", "", "The URL of the manager's repository server (blob proxy), such as https://cairn-repository.cairn-system.svc:8445.")
	fs.StringVar(&o.repositoryCA, "repository-server-ca-file", "", "A file of PEM certificates that verify an https:// --repository-server (the ca.crt of its TLS Secret); empty: the system's roots.")
	fs.StringVar(&o.tokenFile, "token-file", "/var/run/secrets/cairn/repository/token", "A projected ServiceAccount token with the audience "+blobproxy.Audience+", which the repository server checks.")
	fs.StringVar(&o.passwordSecret, "repository-password-secret", controller.DefaultRepositoryPasswordSecret, "The Secret in --namespace holding the volume repositories' passwords.")
	fs.StringVar(&o.configDir, "config-dir", os.TempDir(), "A private directory for the repository client's short-lived config files.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means in-cluster or the usual places.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8082", "Where the metrics endpoint listens; 0 turns it off.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8083", "Where the health probes listen.")
	fs.IntVar(&o.restoreParallel, "restore-parallelism", 2, "How many files a volume restore writes at once (each holds its buffers: more may not fit the agent's memory limit).")
	fs.IntVar(&o.maxCopies, "max-concurrent-copies", 2, "How many volume copies (backups and restores) run at once on this node; the others wait, New, saying so.")
	fs.StringVar(&o.emptyDirCapacity, "empty-dir-restore-capacity", "50Gi", "The most a volume restore writes into an emptyDir that has no sizeLimit (a quantity; 0 means no bound). A claim is bounded by its capacity, an emptyDir with a sizeLimit by it.")
	o.zap.BindFlags(fs)
	return fs
}

// parseNodeAgentOptions parses and checks the node agent's arguments.
func parseNodeAgentOptions(args []string) (nodeAgentOptions, error) {
	var o nodeAgentOptions
	fs := newNodeAgentFlagSet(&o)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: the node agent takes only flags", fs.Arg(0))
	}
	if o.node == "" {
		return o, errors.New("--node-name (or $NODE_NAME) is required: the agent copies only its own node's volumes")
	}
	if errs := validation.IsDNS1123Subdomain(o.node); len(errs) > 0 {
		return o, fmt.Errorf("invalid value %q for --node-name: %s", o.node, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
		return o, fmt.Errorf("invalid value %q for --namespace: %s", o.namespace, strings.Join(errs, "; "))
	}
	if o.restoreParallel < 1 || o.restoreParallel > 64 {
		return o, fmt.Errorf("invalid value %d for --restore-parallelism: must be from 1 to 64", o.restoreParallel)
	}
	if o.maxCopies < 1 || o.maxCopies > 64 {
		return o, fmt.Errorf("invalid value %d for --max-concurrent-copies: must be from 1 to 64", o.maxCopies)
	}
	q, err := resource.ParseQuantity(o.emptyDirCapacity)
	if err != nil || q.Sign() < 0 {
		return o, fmt.Errorf("invalid value %q for --empty-dir-restore-capacity: must be a quantity such as 50Gi, or 0", o.emptyDirCapacity)
	}
	o.emptyDirBytes = q.Value()
	if !filepath.IsAbs(o.podsDir) {
		return o, fmt.Errorf("invalid value %q for --pods-dir: must be an absolute path", o.podsDir)
	}
	u, err := url.Parse(o.repositoryServer)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return o, fmt.Errorf("invalid value %q for --repository-server: must be an http or https URL", o.repositoryServer)
	}
	return o, nil
}

// runNodeAgent runs the node agent and returns the process exit code.
func runNodeAgent(args []string) int {
	opts, err := parseNodeAgentOptions(args)
	if errors.Is(err, flag.ErrHelp) {
		var o nodeAgentOptions
		fs := newNodeAgentFlagSet(&o)
		var b strings.Builder
		b.WriteString("Usage: manager node-agent [flags]\n\nCairn's node agent: copies the volume data of its node's pods.\n\nFlags:\n")
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fmt.Print(b.String())
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "node-agent: %v\n", err)
		return 2
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.zap)))
	log := ctrl.Log.WithName("setup")
	cfg, err := restConfig(opts.kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "node-agent: cannot load the cluster configuration: %v\n", err)
		return 1
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cairnv1.AddToScheme(scheme))
	// The cache holds this node's PodVolumeBackups and PodVolumeRestores and nothing else: pods, claims, volumes and
	// the password Secret are read directly, as needed.
	mine := labels.SelectorFromSet(labels.Set{cairnv1.PodVolumeNodeLabel: backup.LabelValue(opts.node)})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&cairnv1.PodVolumeBackup{}:  {Namespaces: map[string]cache.Config{opts.namespace: {}}, Label: mine},
			&cairnv1.PodVolumeRestore{}: {Namespaces: map[string]cache.Config{opts.namespace: {}}, Label: mine},
		}},
		Metrics:                metricsserver.Options{BindAddress: opts.metricsAddr},
		HealthProbeBindAddress: opts.probeAddr,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "node-agent: cannot create the manager: %v\n", err)
		return 1
	}
	agent := &nodeagent.Agent{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: opts.namespace, Node: opts.node, PodsDir: opts.podsDir,
		Passwords:          &podvolume.Passwords{Reader: mgr.GetAPIReader(), Namespace: opts.namespace, Secret: opts.passwordSecret},
		Open:               nodeagent.ProxyRepositories(opts.repositoryServer, opts.repositoryCA, opts.tokenFile, opts.configDir),
		RestoreParallelism: opts.restoreParallel,
		MaxCopies:          opts.maxCopies,
		EmptyDirCapacity:   opts.emptyDirBytes,
	}
	if err := agent.SetupWithManager(mgr); err != nil {
		fmt.Fprintf(os.Stderr, "node-agent: cannot set up: %v\n", err)
		return 1
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		fmt.Fprintf(os.Stderr, "node-agent: cannot add the health check: %v\n", err)
		return 1
	}
	if err := mgr.AddReadyzCheck("cache", cacheSynced(mgr.GetCache())); err != nil {
		fmt.Fprintf(os.Stderr, "node-agent: cannot add the ready check: %v\n", err)
		return 1
	}
	log.Info("Starting node agent", "node", opts.node, "namespace", opts.namespace, "podsDir", opts.podsDir, "repositoryServer", opts.repositoryServer)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Node agent stopped with an error")
		return 1
	}
	return 0
}
