# xce — build, test and run. `make help` lists the targets.
GO        ?= go
BIN       ?= bin/xce
FUZZTIME  ?= 5s
TOOLS     := $(CURDIR)/.tools/bin
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(shell git rev-parse HEAD 2>/dev/null) -X main.date=$(shell date -u +%Y-%m-%dT%H:%M:%SZ)

# Versions of the code generators `make proto` installs into .tools/bin.
BUF_VERSION            := v1.75.0
PROTOC_GEN_GO_VERSION  := v1.36.12
PROTOC_GEN_CONNECT_VER := v1.19.1

.PHONY: help build test unit fuzz lint dev bench proto docs tools etcd-tools browser image release clean

help:
	@echo "make dev    run a local 3-node cluster (Ctrl-C stops it)"
	@echo "make test   lint, every test under the race detector, and a short fuzz of each decoder"
	@echo "make build  build $(BIN)"
	@echo "make bench  run the Go benchmarks"
	@echo "make fuzz   fuzz each decoder for FUZZTIME (default $(FUZZTIME))"
	@echo "make proto  regenerate the protobuf and Connect code"
	@echo "make docs   regenerate the reference pages under docs/reference"
	@echo "make lint   go vet and a gofmt check"
	@echo "make browser  install a headless Chromium for the console's browser tests (needs root and apt)"
	@echo "make etcd-tools  build etcd and its benchmark tool (for scripts/compare-etcd.sh) into .tools/"
	@echo "make image  build the container image with docker or podman (IMAGE=name:tag)"
	@echo "make release  build the release binaries, their SHA-256 sums and notes into dist/"

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/xce

# The one test command: CI runs exactly this.
test: lint browser unit fuzz

# The console's browser tests drive Debian's chromium; without it (no root,
# no apt) they skip and say so.
browser:
	./scripts/chromium.sh

# The manifests' test renders and decodes YAML on one goroutine: it runs
# without the race detector, which would only slow the build of the
# Kubernetes API types.
unit:
	$(GO) test -race -count=1 -timeout 15m $$($(GO) list ./... | grep -v '/deploy/kubernetes$$')
	$(GO) test -count=1 ./deploy/kubernetes
	cd third_party/hashicorp/raft && $(GO) test -race -count=1 -timeout 5m -run 'TestParallelLeaderWrites|TestVerifyLeader|TestReplicationResumes|TestFirstElectionTimeout|TestOpenChecking' .

fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.tools/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

dev:
	$(GO) run ./cmd/xce dev

image:
	VERSION=$(VERSION) ./scripts/image.sh

release:
	VERSION=$(VERSION) GO=$(GO) ./scripts/release.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

tools:
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_VER)

# etcd and its benchmark tool at the version scripts/compare-etcd.sh compares
# against, from etcd's Go modules; skipped when already built.
etcd-tools:
	./scripts/etcd-tools.sh

# Reference pages generated from the code; a test fails when one is stale.
docs:
	$(GO) test ./configs -run TestConfigReference -count=1 -update
	$(GO) test ./cmd/xce -run TestCLIReference -count=1 -update
	$(GO) test ./internal/reference -run TestMetricsReference -count=1 -update

proto: tools
	PATH=$(TOOLS):$$PATH $(TOOLS)/buf generate

clean:
	rm -rf bin dist .xce-dev
