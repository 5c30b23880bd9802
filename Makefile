# certhub — `make help` lists the targets.
#
# Test tiers:
#   test-unit         pure logic beside the code (no API server), with -race;
#                     also renders every kustomization (test/manifests).
#   test-integration  envtest: real kube-apiserver + etcd, 1 hub + 2 downstream
#                     control planes, a hub replica in-process, with -race.
#                     shard and chaos: 3 replica processes; chaos breaks replicas
#                     and API servers while it issues, then checks invariants.
#   chaos             the long chaos run (10 min), outside `make test`.
#   test-flood        30,000 Certificates waiting in one namespace beside a
#                     neighbour (test/integration/flood at full size; 1,000 in make test).
#   test-e2e          test/e2e: the built `certhub-demo` (running `certhub`), whole and
#                     interrupted midway (nothing left running).
#   test-argocd       test/argocd, its own Go module pinning argo-cd/v3: Argo CD's
#                     SecretToCluster/RawRestConfig vs `certhub cluster validate`.
#   test              unit + argocd + integration + e2e (what CI runs, with lint and demo).

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
BIN := bin
# The one pin of the envtest binaries' version; the test bed embeds the same file.
ENVTEST_K8S_VERSION := $(shell tr -d '[:space:]' < test/fixture/testbed/envtest.version)
export ENVTEST_K8S_VERSION
# Built binaries are cached outside the clone so every checkout and CI run reuses them.
ENVTEST_CACHE_DIR ?= $(HOME)/.cache/envtest-assets
export ENVTEST_CACHE_DIR
# The ACME test bed (Pebble, BIND), likewise outside the clone.
ACME_BED_CACHE_DIR ?= $(HOME)/.cache/certhub-acme-bed
export ACME_BED_CACHE_DIR
ENVTEST_ASSETS = $$(hack/ensure-envtest-assets.sh)
# The release version: stamped into the binary (`certhub version`); the
# kustomize base deploys the image tag of the same value (test/manifests checks).
VERSION := $(shell tr -d '[:space:]' < VERSION)
VERSION_LDFLAGS := -X github.com/certhub/certhub/internal/app.Version=$(VERSION)
GOTEST_FLAGS ?=
FUZZTIME ?= 30s
IMAGE ?= ghcr.io/certhub/certhub:$(VERSION)

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/certhub (version from VERSION) and bin/certhub-demo (the demo, apart so certhub links no test machinery)
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/certhub ./cmd/certhub
	$(GO) build -o $(BIN)/certhub-demo ./cmd/certhub-demo

.PHONY: build-static
build-static: ## Build a static, stripped bin/certhub-static (what the image ships)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(BIN)/certhub-static ./cmd/certhub

.PHONY: envtest
envtest: ## Build kube-apiserver, etcd and kubectl from Go modules into $(ENVTEST_CACHE_DIR) (once; ~10-17 min cold)
	@hack/ensure-envtest-assets.sh >/dev/null

.PHONY: acme-bed
acme-bed: ## Build Pebble from the Go module proxy and extract BIND 9 from Debian's packages into $(ACME_BED_CACHE_DIR) (once; ~20 s; nothing left running)
	@hack/ensure-acme-bed.sh >/dev/null

.PHONY: demo
demo: build envtest ## Run the hub on local control planes: 2 clusters from Argo CD Secrets, Certificates issued, a table
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(BIN)/certhub-demo

.PHONY: demo-acme
demo-acme: build envtest acme-bed ## The demo with an ACME ClusterIssuer too: Pebble + BIND on loopback, one account for both clusters, DNS-01 solved from the hub
	CERTHUB_ACME_BED="$$(hack/ensure-acme-bed.sh)" KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(BIN)/certhub-demo --acme

.PHONY: test
test: test-unit test-argocd test-integration test-e2e ## Unit, Argo CD conformance, integration and end-to-end tests

# cert-manager's shim package, which internal/shim runs as a library.
CERTMANAGER_SHIM := github.com/cert-manager/cert-manager/pkg/controller/certificate-shim

# The packages whose state machines the unit tests must cover on their own.
UNIT_COVERAGE_PKGS := ./internal/shard ./internal/certsync ./internal/inventory ./internal/regcheck ./internal/fairqueue ./internal/policy ./internal/budget
UNIT_COVERAGE_MIN := 70

# Tools are pinned and built from the Go module proxy into a cache outside
# the clone (once per version). promtool: test/alerts runs the shipped
# alerts through Prometheus's own rule unit tests.
TOOLS_DIR ?= $(HOME)/.cache/certhub-tools
PROMTOOL_VERSION := v0.316.0
PROMTOOL := $(TOOLS_DIR)/promtool-$(PROMTOOL_VERSION)/promtool

$(PROMTOOL):
	GOBIN=$(dir $@) $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)

.PHONY: test-unit
test-unit: $(PROMTOOL) ## Unit tests (no API server), the alerts' rule tests (promtool), the Grafana dashboard's checks; prints unit coverage of shard, certsync, inventory, regcheck, fairqueue, policy, budget (each must be >= 70%)
	@# Beside them, cert-manager's own certificate-shim tests on the module versions certhub links
	@# (internal/shim runs that code; ~85 s, nearly all its test's waits, so it runs in parallel).
	@log=$$(mktemp); $(GO) test $(GOTEST_FLAGS) $(CERTMANAGER_SHIM) > $$log 2>&1 & shim=$$!; \
	  PROMTOOL=$(PROMTOOL) $(GO) test -race $(GOTEST_FLAGS) ./cmd/... ./internal/... ./test/manifests/... ./test/alerts/... ./test/dashboard/...; rc=$$?; \
	  wait $$shim; src=$$?; cat $$log; rm -f $$log; [ $$rc -eq 0 ] && [ $$src -eq 0 ]
	@out=$$($(GO) test -count=1 -cover $(UNIT_COVERAGE_PKGS)); echo "$$out"; echo "$$out" | awk -v min=$(UNIT_COVERAGE_MIN) \
	  '/coverage:/ { for (i = 1; i <= NF; i++) if ($$i == "coverage:") { c = $$(i+1); sub("%", "", c); if (c + 0 < min) { print "unit coverage of " $$2 " is " c "%, below " min "%"; bad = 1 } } } END { exit bad }'


.PHONY: test-integration
# The shard and chaos packages run alone first: they assert failover bounds on
# replica processes, and other beds starting on the same 2 cores would eat
# their margin. Chaos runs its short form here (~2.5 min); `make chaos` the long one.
test-integration: envtest acme-bed ## Integration tests on real API servers (1 hub + N downstream; shard and chaos: 3 replica processes; acme: real Pebble + BIND)
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test -race $(GOTEST_FLAGS) ./test/integration/shard/
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test -race $(GOTEST_FLAGS) -v -run TestChaos ./test/integration/chaos/ 2>&1 | grep --line-buffered -v '^20[0-9-]*T'
	@# acme holds the longest tests (Pebble + BIND: short-lived certificates through two lifetimes, a flood of 500): over go test's default 10m.
	CERTHUB_ACME_BED="$$(hack/ensure-acme-bed.sh)" KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test -race -timeout 30m $(GOTEST_FLAGS) $$($(GO) list ./test/integration/... | grep -v '/test/integration/\(shard\|chaos\)$$')

FLOOD_CERTIFICATES ?= 30000
.PHONY: test-flood
test-flood: envtest ## Long form of test/integration/flood: FLOOD_CERTIFICATES (default 30,000) Certificates waiting in one namespace, a neighbour Ready within 30 s
	CERTHUB_FLOOD_CERTIFICATES=$(FLOOD_CERTIFICATES) KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test -count=1 -timeout 30m -v ./test/integration/flood/ 2>&1 | grep --line-buffered -v '^20[0-9-]*T'

CHAOS_DURATION ?= 10m
CHAOS_FLAGS ?= -chaos.certs=1000 -chaos.updates=1000
.PHONY: chaos
chaos: envtest ## Long chaos run: 3 replica processes, 5 clusters, SIGKILLs, a downstream outage, a hub restart; invariants checked (CHAOS_DURATION, default 10m)
	@mkdir -p test/bench/results
	CHAOS_REPORT=$(CURDIR)/test/bench/results/chaos-$$(date -u +%Y%m%dT%H%M%SZ).json KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" \
	  $(GO) test -count=1 -timeout 60m -v -run TestChaos ./test/integration/chaos/ -args -chaos.duration=$(CHAOS_DURATION) $(CHAOS_FLAGS) 2>&1 | grep --line-buffered -v '^20[0-9-]*T'

.PHONY: test-argocd
test-argocd: ## Argo CD conformance: certhub reads cluster Secrets as argo-cd/v3's own code does (separate module)
	cd test/argocd && GOWORK=off $(GO) test $(GOTEST_FLAGS) ./...

.PHONY: test-e2e
test-e2e: envtest acme-bed ## test/e2e: the built `certhub-demo` (and `--acme`), running the built `certhub`, whole and interrupted midway
	CERTHUB_ACME_BED="$$(hack/ensure-acme-bed.sh)" KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test -race $(GOTEST_FLAGS) ./test/e2e/

BENCH_FLAGS ?=
.PHONY: bench
bench: envtest acme-bed ## Benchmarks of docs/benchmarks.md (P1-P9, ACME, migration): tables on stdout + test/bench/results/*.json (~80 min)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./test/bench/issuebench
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./test/bench/issuebench -cases fairness
	CERTHUB_ACME_BED="$$(hack/ensure-acme-bed.sh)" KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./test/bench/acmebench
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./test/bench/loadbench
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./test/bench/migratebench
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./test/bench/crbench
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./test/bench/discobench
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./test/bench/shardbench -kills 3 -assignment-sizes 150,1000,10000 $(BENCH_FLAGS)
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./test/bench/shardbench -only certhub -clusters 1000 -kills 2 -window 60s

SCALE_FLAGS ?=
.PHONY: bench-scale
bench-scale: envtest ## The fleet at 1,000, 3,000 and 10,000 clusters (5 replica processes, 10 API servers, 5 at 10,000; 2 Certificates each): Ready, RSS, hub req/s, SIGKILL/SIGTERM (~85–110 min; SCALE_FLAGS, e.g. -sizes 1000)
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./test/bench/scalebench $(SCALE_FLAGS)

.PHONY: fuzz
fuzz: ## Run every Fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list ./internal/...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# golangci-lint likewise (TOOLS_DIR above).
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint

$(GOLANGCI_LINT):
	GOBIN=$(dir $@) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

# controller-gen likewise: it writes the deepcopy code and the CRDs of
# internal/apis (the one source of certhub's API).
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(TOOLS_DIR)/controller-gen-$(CONTROLLER_GEN_VERSION)/controller-gen
GENERATED = find internal/apis -name 'zz_generated.*.go'; find kustomize/base/crds test/fixture/testbed/crds/certhub -name '*.yaml'

$(CONTROLLER_GEN):
	GOBIN=$(dir $@) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Deepcopy code and CRDs from internal/apis: kustomize/base/crds/ and the test bed's copy
	$(CONTROLLER_GEN) object paths=./internal/apis/... crd:crdVersions=v1 output:crd:artifacts:config=kustomize/base/crds
	cp kustomize/base/crds/certhub.io_*.yaml test/fixture/testbed/crds/certhub/

.PHONY: dashboard
dashboard: ## Write examples/grafana-dashboard.json from test/dashboard (grafana-foundation-sdk builders); make test checks it is current
	$(GO) run ./test/dashboard/gen > examples/grafana-dashboard.json

.PHONY: verify-generate
verify-generate: $(CONTROLLER_GEN) ## Fail when the generated files are stale (make generate then rewrites them)
	@before=$$({ $(GENERATED); } | sort | xargs sha256sum); $(MAKE) -s generate >/dev/null; \
	  after=$$({ $(GENERATED); } | sort | xargs sha256sum); \
	  if [ "$$before" != "$$after" ]; then echo "generated files were stale; make generate has rewritten them:"; \
	  diff <(echo "$$before") <(echo "$$after") | grep '^>' ; exit 1; fi

.PHONY: lint
lint: $(GOLANGCI_LINT) verify-generate ## generated files current; gofmt, go vet, golangci-lint (.golangci.yml) on both modules; the binary links no test code
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...
	cd test/argocd && GOWORK=off $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...
	@if $(GO) list -deps ./cmd/certhub | grep -x -e sigs.k8s.io/controller-runtime/pkg/envtest \
	  -e 'github.com/certhub/certhub/test/.*' -e github.com/certhub/certhub/internal/demo; then \
	  echo "the certhub binary links the packages above (test machinery: envtest, the test bed, the demo)"; exit 1; fi
	@# testing and httptest: only through Akamai's DNS SDK, which ships testify mocks
	@# in pkg/dns (cert-manager's akamai provider imports it; so does cert-manager's own binary).
	@if $(GO) list -deps -f '{{.ImportPath}}: {{join .Imports " "}}' ./cmd/certhub | grep -E ' (testing|net/http/httptest|github.com/stretchr/testify/[a-z]+)( |$$)' \
	  | cut -d: -f1 | grep -v -x -e 'github.com/stretchr/testify/.*' -e 'github.com/akamai/AkamaiOPEN-edgegrid-golang/v[0-9]*/pkg/dns'; then \
	  echo "the packages above link test machinery (testing, httptest, testify) into the certhub binary"; exit 1; fi

.PHONY: crds
crds: ## Copy the cert-manager CRDs from the module cache into the test bed
	hack/sync-crds.sh

.PHONY: image
image: ## Build the container image (needs a Docker daemon; not available on the dev machines)
	docker build -t $(IMAGE) .

.PHONY: manifests
manifests: ## Render the kustomize overlays into _out/
	@mkdir -p _out
	@for d in kustomize/overlays/*/; do n=$$(basename $$d); \
	  $(GO) run ./hack/kbuild $$d > _out/$$n.yaml && echo "_out/$$n.yaml"; done

.PHONY: clean
clean: ## Remove build output (not the envtest cache)
	rm -rf $(BIN) _out
