# fleet-manager. `make demo` and `make test` set up everything they need.

SHELL := /usr/bin/env bash
BIN := $(CURDIR)/bin
export KUBEBUILDER_ASSETS := $(BIN)
GO_TEST_FLAGS ?= -race -timeout 15m

# VERSION is the release the binary and the image are stamped with.
VERSION := $(shell cat VERSION)
GO_LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build image push test test-time fuzz envtest promtool demo bench lint manifests chart

all: build

## build: bin/fleet-manager, stamped with VERSION and the commit, and the
## kubectl plugin: bin/kubectl-fleet ("kubectl fleet") and
## bin/kubectl_complete-fleet (its completion), links to the same binary.
build:
	go build -buildvcs=auto -ldflags '$(GO_LDFLAGS)' -o $(BIN)/fleet-manager ./cmd/fleet-manager
	ln -sf fleet-manager $(BIN)/kubectl-fleet
	ln -sf fleet-manager $(BIN)/kubectl_complete-fleet

## image: the linux/amd64 and linux/arm64 image, without a Docker engine, as an
## OCI layout in bin/image (hack/image, a module of its own).
image:
	cd hack/image && go run . build -root $(CURDIR) -out $(BIN)/image

## push: push the image to IMAGE, e.g. make push IMAGE=ghcr.io/fleetkube/fleet-manager:$(VERSION)
ifneq ($(filter push,$(MAKECMDGOALS)),)
ifeq ($(IMAGE),)
$(error set IMAGE, e.g. make push IMAGE=ghcr.io/fleetkube/fleet-manager:$(VERSION))
endif
endif
push: image
	cd hack/image && go run . push -layout $(BIN)/image -image $(IMAGE)

## envtest: build kube-apiserver, etcd and kubectl from the Go module proxy into bin/ (only when missing or changed).
envtest:
	hack/envtest.sh kube-apiserver etcd kubectl

## test: unit and envtest suites, with the race detector. go test runs vet's
## high-confidence checks (`make lint` runs all of vet) and the fuzz seeds.
## hack/manifests compares the Helm chart with deploy/ and runs the alerts'
## promtool rule tests. Everything is built with -race, hack/image's test
## build of the binary and pkg/fleet's secretreader plugin included, so a
## cold build compiles the Kubernetes libraries once (about 95% of
## hack/manifests' packages are the root module's too); only pkg/fleet's
## small expiring plugin is built static. make image builds the image's
## static binary (TestCompileCommand checks its settings).
test: envtest promtool
	go test $(GO_TEST_FLAGS) ./...
	cd hack/image && go test $(GO_TEST_FLAGS) ./...
	cd hack/manifests && go test $(GO_TEST_FLAGS) ./...

## test-time: run make test from an empty Go build cache, as CI does, and
## print the CPU seconds of each test package, of compiling, and in all;
## fails if the total over CORES (2) is more than BUDGET seconds (1200).
## CPU time, unlike wall time, holds on a busy machine. TEST_TIME_WARM=1
## keeps the build cache.
CORES ?= 2
BUDGET ?= 1200
test-time:
	CORES=$(CORES) BUDGET=$(BUDGET) hack/test-time.sh

## promtool: build Prometheus's promtool from the Go module proxy into bin/
## (only when missing or changed), for the alerts' rule tests.
promtool:
	hack/promtool.sh

## fuzz: fuzz the kubeconfig parser for FUZZTIME inputs, without API servers
## (the fuzz workers need none). CI runs it after make test. A count, not a
## duration: Go 1.26's fuzz coordinator can fail a duration-bound run at its
## deadline with "context deadline exceeded" and no crasher (go.dev/issue/75804,
## fixed in Go 1.27). Minimizing a new input is bounded by a count too, so the
## run keeps fuzzing rather than minimizing for up to a minute per input.
FUZZTIME ?= 150000x
FUZZMINIMIZETIME ?= 200x
fuzz:
	KUBEBUILDER_ASSETS= go test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./pkg/kubeconfig

## demo: a local hub and two members, a fleet-wide ConfigMap reporter, until Ctrl-C
## (cmd/fleet-demo, a program of its own: the fleet-manager binary has no demo;
## it is built too, for the status command the demo suggests).
## Built, then run, rather than `go run`, which exits 1 on Ctrl-C whatever the demo returns.
demo: envtest build
	go build -o $(BIN)/fleet-demo ./cmd/fleet-demo
	$(BIN)/fleet-demo $(DEMO_FLAGS)

## manifests: regenerate deepcopy functions and CRDs from api/ (controller-gen is built into bin/ when missing or changed).
manifests:
	hack/controller-gen.sh object crd paths=./api/... output:crd:dir=deploy/crd
	$(MAKE) chart

## chart: copy into charts/fleet-manager what it shares with deploy/: the CRDs
## and the prometheus component's alerts and dashboard (hack/manifests tests
## that the copies are current).
chart:
	cp deploy/crd/fleet.fleetkube.io_*.yaml charts/fleet-manager/crds/
	cp deploy/components/prometheus/prometheusrule.yaml deploy/components/prometheus/fleet-manager-dashboard.json charts/fleet-manager/files/

## bench: the Go benchmarks and the end-to-end bench program (bench/, a
## module of its own) against local API servers; writes bench/results.md and
## PNG plots (five runs, about 75 minutes; BENCH_RUNS=n runs n). BENCH_QUICK=1:
## fewer members and one run (about 12 minutes), written to bench/quick/.
BENCH_QUICK ?=
BENCH_RUNS ?=
bench: envtest
	cd bench && go run . -quick=$(if $(filter 1,$(BENCH_QUICK)),true,false) -out $(if $(filter 1,$(BENCH_QUICK)),quick,.) $(if $(BENCH_RUNS),-runs=$(BENCH_RUNS))

lint:
	gofmt -l . | tee /dev/stderr | (! read)
	go vet ./...
