package deletion_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cairn-backup/cairn/internal/controller/controllertest"
)

// The reconcilers run in a real manager against a real kube-apiserver (controllertest); specs
// assert through a direct (uncached) client.
func TestDeletion(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Deletion suite")
}

var _ = BeforeSuite(controllertest.Start)

var _ = AfterSuite(controllertest.Stop)
