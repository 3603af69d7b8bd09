package hooks_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cairn-backup/cairn/internal/controller/controllertest"
)

// Backup hooks (DESIGN.md section 17) run in a real manager against a real kube-apiserver,
// their commands in a fake executor (controller.Config.Hooks.Executor): a real exec needs a
// kubelet, which the one-node suite (test/e2e/node) has. TestControllers, as in every package
// with envtest specs.
func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Hooks suite")
}

var _ = BeforeSuite(controllertest.Start)

var _ = AfterSuite(controllertest.Stop)
