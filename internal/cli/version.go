package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/yaml"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// versionInfo is what `cairn version` reports.
type versionInfo struct {
	Client string `json:"client"`
	// Kubernetes is the API server's version.
	Kubernetes string `json:"kubernetes,omitempty"`
	// CairnAPI is the Cairn API version the cluster serves, "" when Cairn is not installed.
	CairnAPI string `json:"cairnAPI,omitempty"`
	// Error says why the server could not be asked.
	Error string `json:"error,omitempty"`
}

func newVersionCommand(e *env) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the versions of the CLI, of Kubernetes and of the Cairn API the cluster serves",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := versionInfo{Client: Version}
			if !clientOnly {
				v.Kubernetes, v.CairnAPI, v.Error = e.serverVersions()
			}
			switch e.output {
			case "json":
				data, err := json.MarshalIndent(v, "", "  ")
				if err != nil {
					return err
				}
				e.printf("%s\n", data)
			case "yaml":
				data, err := yaml.Marshal(v)
				if err != nil {
					return err
				}
				e.printf("%s", data)
			default:
				e.printf("Client: %s\n", v.Client)
				if !clientOnly {
					if v.Error != "" {
						e.printf("Server: %s\n", v.Error)
						return nil
					}
					e.printf("Kubernetes: %s\n", v.Kubernetes)
					api := v.CairnAPI
					if api == "" {
						api = "not installed"
					}
					e.printf("Cairn API: %s\n", api)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "Only the CLI's version; do not ask the cluster.")
	return withOutput(e, cmd)
}

// serverVersions asks the cluster for its version and whether it serves Cairn's API.
func (e *env) serverVersions() (kubernetes, cairnAPI, problem string) {
	if err := e.checkConfig(); err != nil {
		return "", "", explain(err)
	}
	cfg, err := e.flags.ToRESTConfig()
	if err != nil {
		return "", "", explain(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", "", explain(err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return "", "", fmt.Sprintf("cannot reach the cluster: %s", explain(err))
	}
	if _, err := dc.ServerResourcesForGroupVersion(cairnv1.GroupVersion.String()); err == nil {
		cairnAPI = cairnv1.GroupVersion.String()
	}
	return info.GitVersion, cairnAPI, ""
}
