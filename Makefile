# Cairn — the Kubernetes backup operator.
#
# Two commands do all the set-up on a fresh machine (Go and the Go module proxy are all they need):
#   make run-local   local control plane + CRDs + default storage location + the operator
#   make test        unit, envtest integration and end-to-end tests
# Every tool is installed, pinned, into bin/ (git-ignored).

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

ROOT := $(shell pwd)
BIN := $(ROOT)/bin
export GOBIN := $(BIN)

## Pinned tool versions.
CONTROLLER_TOOLS_VERSION ?= v0.21.0
GOLANGCI_LINT_VERSION ?= v2.15.0
VERSITYGW_VERSION ?= v1.8.0
# The Azure and GCS emulators of the azure and gcs providers' tests (docs/development.md).
AZURITE_VERSION ?= 3.37.0
FAKE_GCS_SERVER_VERSION ?= v1.56.1
KUBE_VERSION ?= 1.36.3
ETCD_VERSION ?= v3.6.16
# The one-node cluster's DNS server (hack/node-images.sh); kube-proxy is KUBE_VERSION's.
COREDNS_VERSION ?= v1.15.0
HELM_VERSION ?= v4.3.1
HELM3_VERSION ?= v3.22.0
# Debian's prometheus package, for promtool (hack/promtool.sh).
PROMTOOL_VERSION ?= 2.42.0+ds-5+deb12u1

CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
HELM := $(BIN)/helm-$(HELM_VERSION)
# The tests run helm from here (charts/cairn's lint, golden and end-to-end tests).
export HELM
# Charts must also work with Helm 3: the chart's and the e2e tests run this one too.
HELM3 := $(BIN)/helm-$(HELM3_VERSION)
export HELM3
# A real S3 server for the tests (posix backend, on 127.0.0.1).
VERSITYGW := $(BIN)/versitygw-$(VERSITYGW_VERSION)
export VERSITYGW
# Azurite's blob service (npm, run by Node) and fake-gcs-server, on 127.0.0.1.
AZURITE_DIR := $(BIN)/azurite-$(AZURITE_VERSION)
AZURITE := $(AZURITE_DIR)/node_modules/.bin/azurite-blob
export AZURITE
FAKE_GCS_SERVER := $(BIN)/fake-gcs-server-$(FAKE_GCS_SERVER_VERSION)
export FAKE_GCS_SERVER
# Prometheus's rule checker: the chart's alerts are tested in its rule engine.
PROMTOOL := $(BIN)/promtool-$(PROMTOOL_VERSION)
export PROMTOOL
ENVTEST_ASSETS := $(BIN)/k8s/$(KUBE_VERSION)-$(shell go env GOOS)-$(shell go env GOARCH)
export KUBEBUILDER_ASSETS := $(ENVTEST_ASSETS)
export KUBE_VERSION ETCD_VERSION COREDNS_VERSION

# The version the binaries report (cairn version): the git description of the checkout.
CAIRN_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
CAIRN_VERSION_VAR := github.com/cairn-backup/cairn/internal/cli.Version

# Test packages: unit and envtest tests live next to the code; e2e drives built binaries.
GO_TEST_FLAGS ?= -count=1
E2E_TIMEOUT ?= 25m

.PHONY: all
all: build

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ { printf "  %-14s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRDs and RBAC from the API markers; copy them and the admission policies into the chart.
	$(CONTROLLER_GEN) rbac:roleName=cairn-manager crd paths="./..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	# The CSI snapshot CRDs the tests install, generated from the API types Cairn uses.
	$(CONTROLLER_GEN) crd paths=github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1 \
		output:crd:artifacts:config=test/crds/snapshot
	# *.k8s.io groups must carry the API approval annotation; upstream's CRDs point at their PR.
	sed -i '/controller-gen.kubebuilder.io\/version/a\    api-approved.kubernetes.io: "https://github.com/kubernetes-csi/external-snapshotter/pull/814"' test/crds/snapshot/*.yaml
	# The chart renders the same CRDs and derives its RBAC from the same role (one source).
	rm -f charts/cairn/files/crds/*.yaml
	cp config/crd/bases/*.yaml charts/cairn/files/crds/
	cp config/rbac/role.yaml charts/cairn/files/rbac/role.yaml
	# And the admission policies that record who created each object (config/admission).
	rm -f charts/cairn/files/admission/*.yaml
	cp config/admission/requester*.yaml charts/cairn/files/admission/
	# The resources backups read and restores create: hand-written in config/rbac (named, no "*").
	cp config/rbac/resources_role.yaml charts/cairn/files/rbac/resources_role.yaml

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate the DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: fmt
fmt: ## go fmt.
	go fmt ./...

.PHONY: vet
vet: ## go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint.
	$(GOLANGCI_LINT) run --build-tags e2enode ./...

.PHONY: docs
docs: ## Write the phase-owner tables of docs/architecture.md from internal/phases.
	go run ./hack/phasetables docs/architecture.md

.PHONY: verify
verify: generate manifests ## Fail when generated files (and the phase tables of docs/architecture.md) are stale.
	@if [ -n "$$(git status --porcelain -- api config test/crds charts/cairn/files)" ]; then \
		echo "Generated files are stale; run 'make generate manifests' and commit:"; \
		git status --porcelain -- api config test/crds charts/cairn/files; git diff --stat -- api config test/crds charts/cairn/files; exit 1; fi
	go run ./hack/phasetables -check docs/architecture.md

##@ Build

.PHONY: build
build: ## Build bin/manager and bin/cairn (the CLI).
	CGO_ENABLED=0 go build -trimpath -o $(BIN)/manager ./cmd/manager
	CGO_ENABLED=0 go build -trimpath -ldflags "-X $(CAIRN_VERSION_VAR)=$(CAIRN_VERSION)" -o $(BIN)/cairn ./cmd/cairn

##@ Test

.PHONY: envtest
envtest: ## Build the envtest control-plane binaries into bin/k8s/ (once).
	hack/envtest.sh

# The suites' commands, shared by their own targets and by 'make test'.
TEST_UNIT = go test $(GO_TEST_FLAGS) ./api/... ./cmd/... ./internal/... ./charts/...
TEST_E2E = go test $(GO_TEST_FLAGS) -timeout $(E2E_TIMEOUT) ./test/e2e/... -args -ginkgo.v
TEST_NODE = go test -tags e2enode $(GO_TEST_FLAGS) -timeout $(NODE_E2E_TIMEOUT) ./test/e2e/node/... -args -ginkgo.v

# 'make test' installs every tool and builds every binary and image first (the node's too), so
# that the two runs after it build nothing and share nothing: the envtest suites, one after the other, and beside
# them the one-node suite, which brings the node up (and down) itself and mostly waits on it.
# Either failing fails 'make test', once both ended.
.PHONY: test
# Each suite's output is also kept in bin/test-logs/, and the failures of all of them are
# repeated, short, at the very end (hack/test-digest.sh): CI shows only a run's last lines.
test: envtest versitygw azurite fake-gcs-server helm helm3 promtool image node-prepare ## Run every test: unit, envtest integration and e2e, and beside them the one-node suite.
	@rm -rf $(TEST_LOGS) && mkdir -p $(TEST_LOGS)
	@status=0; $(MAKE) -j2 test-go-suites test-node-suite || status=$$?; \
		hack/test-digest.sh $(TEST_LOGS)/unit.log $(TEST_LOGS)/e2e.log $(TEST_LOGS)/node.log; exit $$status

TEST_LOGS = $(ROOT)/bin/test-logs

# The envtest suites one after the other (each uses both cores), without prerequisites.
.PHONY: test-go-suites
test-go-suites:
	@mkdir -p $(TEST_LOGS)
	$(TEST_UNIT) 2>&1 | tee $(TEST_LOGS)/unit.log
	$(TEST_E2E) 2>&1 | tee $(TEST_LOGS)/e2e.log

.PHONY: test-node-suite
test-node-suite:
	@mkdir -p $(TEST_LOGS)
	$(TEST_NODE) 2>&1 | tee $(TEST_LOGS)/node.log

.PHONY: test-unit
test-unit: envtest versitygw azurite fake-gcs-server helm helm3 promtool ## Unit and envtest integration tests, and the chart's tests.
	$(TEST_UNIT)

.PHONY: test-chart
test-chart: envtest helm helm3 promtool ## helm lint --strict, the chart's golden and schema tests, and its RBAC on a real API server.
	go test $(GO_TEST_FLAGS) ./charts/...

.PHONY: update-golden
update-golden: helm helm3 ## Rewrite the chart's golden files from what helm template renders now.
	go test $(GO_TEST_FLAGS) ./charts/... -run TestGolden -update

.PHONY: test-e2e
test-e2e: envtest versitygw helm helm3 build ## End-to-end tests: real manager binary, real kubectl.
	$(TEST_E2E)

.PHONY: bench
bench: envtest versitygw ## Run the benchmarks and write docs/benchmarks.md.
	hack/bench.sh

##@ Local control plane

.PHONY: local-up
local-up: envtest manifests ## Start etcd + kube-apiserver + kube-controller-manager on 127.0.0.1, install CRDs, the admission policies and a default location.
	hack/local-up.sh up

.PHONY: local-down
local-down: ## Stop the local control plane started by local-up.
	hack/local-up.sh down

.PHONY: run-local
run-local: local-up build ## local-up, then run the operator in the foreground against it.
	@echo "export KUBECONFIG=$(ROOT)/bin/local/kubeconfig"
	KUBECONFIG=$(ROOT)/bin/local/kubeconfig $(BIN)/manager --namespace cairn-system \
		--metrics-bind-address 127.0.0.1:18080 --health-probe-bind-address 127.0.0.1:18081 \
		--download-bind-address 127.0.0.1:18086

##@ One-node cluster

# The e2e suite on a real node (test/e2e/node): Cairn's image as a pod.
NODE_E2E_TIMEOUT ?= 30m

.PHONY: node-up
node-up: envtest ## Start a one-node cluster (kubelet, containerd, kube-proxy, CoreDNS) in the network namespace cairn-node; kubeconfig bin/node/kubeconfig.
	hack/node-up.sh

.PHONY: node-prepare
node-prepare: envtest ## Install the node's Debian packages and build its binaries, without starting it.
	hack/node-up.sh --prepare

.PHONY: node-down
node-down: ## Stop the one-node cluster and undo what it changed on the machine.
	hack/node-down.sh

.PHONY: image
image: build ## Build the manager image (and the suite's test images) without Docker into bin/images/; import them into the node.
	hack/node-images.sh build import

.PHONY: test-node
test-node: image node-up versitygw helm ## End-to-end tests on the one-node cluster: Cairn installed by its chart, as a pod.
	$(TEST_NODE)

##@ Tools

.PHONY: versitygw
versitygw: $(VERSITYGW) ## Install the S3 server the tests run.

.PHONY: azurite
azurite: $(AZURITE) ## Install Azurite, the Azure Storage emulator the tests run (npm; needs Node).

.PHONY: fake-gcs-server
fake-gcs-server: $(FAKE_GCS_SERVER) ## Install fake-gcs-server, the Google Cloud Storage emulator the tests run.

.PHONY: helm
helm: $(HELM) ## Install helm (a long compile, once).

.PHONY: helm3
helm3: $(HELM3) ## Install Helm 3, which charts must also work with (a long compile, once).

.PHONY: promtool
promtool: $(PROMTOOL) ## Install promtool from Debian's prometheus package (the chart's alert tests).


$(CONTROLLER_GEN):
	GOBIN=$(BIN)/.tmp-controller-gen go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(BIN)/.tmp-controller-gen/controller-gen $@ && rmdir $(BIN)/.tmp-controller-gen

$(GOLANGCI_LINT):
	GOBIN=$(BIN)/.tmp-golangci-lint go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN)/.tmp-golangci-lint/golangci-lint $@ && rmdir $(BIN)/.tmp-golangci-lint

$(HELM):
	GOBIN=$(BIN)/.tmp-helm go install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)
	mv $(BIN)/.tmp-helm/helm $@ && rmdir $(BIN)/.tmp-helm

# As Helm 3's release build links it: its version, and the Kubernetes version that helm template
# and lint assume (that of the k8s.io/client-go in its go.mod, v0.37 for v3.22.0; without it,
# 1.20, which the chart's kubeVersion refuses).
HELM3_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM3_VERSION) \
	$(foreach p,chartutil lint/rules,-X helm.sh/helm/v3/pkg/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$(p).k8sVersionMinor=37)
$(HELM3):
	GOBIN=$(BIN)/.tmp-helm3 go install -ldflags '$(HELM3_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM3_VERSION)
	mv $(BIN)/.tmp-helm3/helm $@ && rmdir $(BIN)/.tmp-helm3

$(PROMTOOL):
	hack/promtool.sh $@ $(PROMTOOL_VERSION)

$(VERSITYGW):
	GOBIN=$(BIN)/.tmp-versitygw go install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	mv $(BIN)/.tmp-versitygw/versitygw $@ && rmdir $(BIN)/.tmp-versitygw

# npm installs the package and its dependencies, as locked by its own package-lock, under one
# directory; no install scripts run (Azurite needs none). A failed install leaves no bin/azurite-*.
$(AZURITE):
	rm -rf $(AZURITE_DIR) $(BIN)/.tmp-azurite
	npm install --prefix $(BIN)/.tmp-azurite --no-audit --no-fund --ignore-scripts --no-save azurite@$(AZURITE_VERSION)
	mv $(BIN)/.tmp-azurite $(AZURITE_DIR)

$(FAKE_GCS_SERVER):
	GOBIN=$(BIN)/.tmp-fake-gcs-server go install github.com/fsouza/fake-gcs-server@$(FAKE_GCS_SERVER_VERSION)
	mv $(BIN)/.tmp-fake-gcs-server/fake-gcs-server $@ && rmdir $(BIN)/.tmp-fake-gcs-server
