package backup_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cairn-backup/cairn/internal/controller/controllertest"
)

// The backup reconciler runs in a real manager against a real kube-apiserver (controllertest),
// with the reconcilers a spec names; specs assert through a direct (uncached) client.
// TestControllers, as in every package with envtest specs, so that -run 'Test[^C]' runs only
// the unit tests.
func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Backup suite")
}

var _ = BeforeSuite(controllertest.Start)

var _ = AfterSuite(controllertest.Stop)
