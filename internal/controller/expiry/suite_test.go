package expiry_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cairn-backup/cairn/internal/controller/controllertest"
)

// The reconcilers run in a real manager against a real kube-apiserver (controllertest); specs
// assert through a direct (uncached) client.
func TestExpiry(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Expiry suite")
}

var _ = BeforeSuite(controllertest.Start)

var _ = AfterSuite(controllertest.Stop)
