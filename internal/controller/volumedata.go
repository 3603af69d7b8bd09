package controller

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/cairn-backup/cairn/internal/blobproxy"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/repositories"
	"github.com/cairn-backup/cairn/internal/podvolume"
)

// VolumeDataConfig is the manager's part of volume data (DESIGN.md section 16, docs/volumes.md).
type VolumeDataConfig struct {
	// PasswordSecret names the Secret, in the operator's namespace, that holds the volume
	// repositories' passwords (--repository-password-secret).
	PasswordSecret string
	// ServerBindAddress is where the blob proxy for the node agents listens
	// (--repository-server-bind-address); "" or "0" runs none, and no volume can be copied.
	ServerBindAddress string
	// ServerTLSSecret names the Secret, in the operator's namespace, of the blob proxy's TLS
	// certificate (--repository-server-tls-secret): made by the manager (a new CA and a
	// serving certificate for ServerService's names) when it does not exist; "" serves plain
	// HTTP (tests).
	ServerTLSSecret string
	// ServerService is the Service the node agents reach the proxy by
	// (--repository-server-service), whose DNS names the certificate holds.
	ServerService string
	// NodeAgentServiceAccount is the node agents' ServiceAccount in the operator's namespace:
	// the only one whose tokens the proxy accepts (--node-agent-service-account).
	NodeAgentServiceAccount string
	// MaintenanceInterval and MaintenanceTimeout schedule and bound repository maintenance
	// (--repository-maintenance-interval, --repository-maintenance-timeout); 0 means the
	// repositories package's defaults.
	MaintenanceInterval, MaintenanceTimeout time.Duration
	// RestoreHelperImage is the image of the init container that holds a restored pod back
	// until its volumes' data is written (--restore-helper-image): the manager's own; "" means
	// volume data cannot be restored.
	RestoreHelperImage string
}

// Defaults of VolumeDataConfig.
const (
	DefaultRepositoryPasswordSecret = "cairn-repository-passwords"
	DefaultNodeAgentServiceAccount  = "cairn-node-agent"
	DefaultRepositoryService        = "cairn-repository"
)

// volumeData makes the repository passwords, the Locks shared by the blob proxy and the
// manager's own use of repositories, the repositories service (snapshot deletion and the
// maintenance schedule), and the proxy.
func (w *wiring) volumeData(mgr ctrl.Manager) error {
	cfg := w.cfg.VolumeData
	if cfg.PasswordSecret == "" {
		cfg.PasswordSecret = DefaultRepositoryPasswordSecret
	}
	if cfg.NodeAgentServiceAccount == "" {
		cfg.NodeAgentServiceAccount = DefaultNodeAgentServiceAccount
	}
	w.passwords = &podvolume.Passwords{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: w.cfg.Namespace, Secret: cfg.PasswordSecret}
	locks := blobproxy.NewLocks(0, nil)
	backends := blobproxy.LocationBackends{Reader: w.stores.Client, Namespace: w.cfg.Namespace}
	w.repositories = &repositories.Service{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: w.cfg.Namespace,
		Locks: locks, Backends: backends, Passwords: w.passwords,
		Interval: cfg.MaintenanceInterval, Timeout: cfg.MaintenanceTimeout,
	}
	if err := mgr.Add(w.repositories); err != nil {
		return fmt.Errorf("adding the repository maintenance: %w", err)
	}
	w.leftovers = lifecycle.Leftovers{Dynamic: w.dyn, Volumes: w.repositories, Client: mgr.GetClient(), Namespace: w.cfg.Namespace}
	if cfg.ServerBindAddress == "" || cfg.ServerBindAddress == "0" {
		return nil
	}
	clientset, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	auth := blobproxy.NewTokenReviewAuthenticator(clientset, blobproxy.Audience,
		"system:serviceaccount:"+w.cfg.Namespace+":"+cfg.NodeAgentServiceAccount)
	server := blobproxy.NewServer(backends, auth, locks)
	server.Log = mgr.GetLogger().WithName("repository-server")
	proxy := &repositories.Proxy{Addr: cfg.ServerBindAddress, Handler: server, Close: server.Close}
	if cfg.ServerTLSSecret != "" {
		service := cmp.Or(cfg.ServerService, DefaultRepositoryService)
		proxy.TLS = func(ctx context.Context) (*tls.Config, error) {
			return blobproxy.ServingTLS(ctx, mgr.GetAPIReader(), mgr.GetClient(), w.cfg.Namespace, cfg.ServerTLSSecret,
				blobproxy.ServingNames(service, w.cfg.Namespace), time.Now())
		}
	}
	if err := mgr.Add(proxy); err != nil {
		return fmt.Errorf("adding the repository server: %w", err)
	}
	return nil
}
