package nodeagent_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cairn-backup/cairn/internal/controller/controllertest"
)

// The manager's reconcilers and its repository server, and node agents, run against a real
// kube-apiserver (controllertest); the agents read "volumes" from a directory laid out as the
// kubelet's pods directory, and write through the repository server with real ServiceAccount
// tokens.
func TestNodeAgent(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Node agent suite")
}

var _ = BeforeSuite(controllertest.Start)

var _ = AfterSuite(controllertest.Stop)
