# fleet-manager. `make demo` and `make test` set up everything they need.

SHELL := /usr/bin/env bash
BIN := $(CURDIR)/bin
export KUBEBUILDER_ASSETS := $(BIN)
GO_TEST_FLAGS ?= -race -timeout 15m

.PHONY: all build test fuzz envtest demo bench lint manifests

all: build

build:
	go build -o $(BIN)/fleet-manager ./cmd/fleet-manager

## envtest: build kube-apiserver, etcd and kubectl from the Go module proxy into bin/ (only when missing or changed).
envtest:
	hack/envtest.sh kube-apiserver etcd kubectl

## test: unit and envtest suites, with the race detector. go test runs vet's
## high-confidence checks (`make lint` runs all of vet) and the fuzz seeds.
test: envtest
	go test $(GO_TEST_FLAGS) ./...

## fuzz: fuzz the kubeconfig parser for FUZZTIME, without API servers (the
## fuzz workers need none). CI runs it after make test.
FUZZTIME ?= 10s
fuzz:
	KUBEBUILDER_ASSETS= go test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./pkg/cluster

## demo: a local hub and two members, a fleet-wide ConfigMap reporter, until Ctrl-C.
demo: envtest
	go run ./cmd/fleet-manager demo $(DEMO_FLAGS)

## manifests: regenerate deepcopy functions and CRDs from api/ (controller-gen is built into bin/ when missing or changed).
manifests:
	hack/controller-gen.sh object crd paths=./api/... output:crd:dir=deploy/crd

## bench: the Go benchmarks.
bench: envtest
	go test -run '^$$' -bench . -benchmem ./...

lint:
	gofmt -l . | tee /dev/stderr | (! read)
	go vet ./...
