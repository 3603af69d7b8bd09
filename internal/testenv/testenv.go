// Package testenv starts a real kube-apiserver and etcd (the envtest binaries that
// hack/envtest.sh builds into bin/k8s/) with Cairn's CRDs installed, for the integration and
// end-to-end tests. It is the one way tests get a control plane.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// KubeVersion is the version of the envtest binaries; the Makefile pins the same.
const KubeVersion = "1.36.3"

// RepoRoot is the directory that holds go.mod.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// AssetsDir is where the envtest binaries are: $KUBEBUILDER_ASSETS, else bin/k8s/<version>-<os>-<arch>.
func AssetsDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(RepoRoot(), "bin", "k8s", fmt.Sprintf("%s-%s-%s", KubeVersion, runtime.GOOS, runtime.GOARCH))
}

// CRDDir is where the generated CRDs are.
func CRDDir() string {
	return filepath.Join(RepoRoot(), "config", "crd", "bases")
}

// SnapshotCRDDir is where the CSI snapshot CRDs for tests are (make manifests generates them).
func SnapshotCRDDir() string {
	return filepath.Join(RepoRoot(), "test", "crds", "snapshot")
}

// Scheme is a scheme with the built-in kinds and Cairn's.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(cairnv1.AddToScheme(s))
	return s
}

// New returns an environment that runs the envtest binaries with Cairn's CRDs. Start it with
// Start and stop it with Stop.
func New() (*envtest.Environment, error) {
	dir := AssetsDir()
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return nil, fmt.Errorf("no kube-apiserver in %s: run 'make envtest' first", dir)
	}
	return &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     []string{CRDDir(), SnapshotCRDDir()},
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	}, nil
}
