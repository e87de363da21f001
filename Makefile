# Trident: build, run and test. GNU make.
#
#   make build    bin/trident and bin/tridentctl, stamped with the version
#   make build-static  static (CGO_ENABLED=0) binaries in bin/static for the image
#   make image    the container image (podman build of Dockerfile; IMAGE=trident)
#   make run      build and start a broker (data in ./data; ARGS='--flag ...')
#   make test     vet, the race-enabled test suite, the client suites and a
#                 short run of every fuzz target (what .ci/run runs)
#   make docs-check  run the commands of README.md and docs/*.md against a real
#                 broker and load their YAML (TestDocsCommands; make test runs it too)
#   make bench    throughput of a self-started Trident (BENCHFLAGS='--anchors' adds
#                 RabbitMQ, '--cluster3' a 3-node Trident cluster for the quorum scenarios)
#   make bench-quorum  only the quorum queue scenarios, vs RabbitMQ and on 3 nodes
#   make bench-backlog BACKLOG=N  a queue with N messages: memory, restart, drain, disk
#   make bench-many-queues QUEUES=Q EACH=M  Q durable queues with M messages: restart, memory
#   make bench-many-quorum QQ=N  N quorum queues on 3 local nodes: declare, idle CPU, failover
#   make bench-stream-protocol SP=N  RabbitMQ's stream protocol, Trident vs RabbitMQ: publish, consume

GO       ?= go
BIN      := bin
ARGS     ?=
# Per-target fuzzing time for `make fuzz`; `make test` fuzzes every target
# for FUZZTIME_CI (a smoke run: new crashers in what changed, not coverage).
FUZZTIME ?= 60s
FUZZTIME_CI ?= 5s
# Extra flags for `make bench`, e.g. BENCHFLAGS='--anchors --cluster3 --rounds 3'.
BENCHFLAGS ?=
# The quorum queue scenarios, for `make bench-quorum`.
QUORUM_SCENARIOS := amqp-quorum-1-1,amqp-quorum-10-10

# Messages for `make bench-backlog` (issue 11's measure: use 10000000).
BACKLOG ?= 1000000
QUEUES ?= 100000
QQ ?= 1000
EACH ?= 100
# Messages per phase for `make bench-stream-protocol`.
SP ?= 1000000

# The version `trident --version` prints, the start-up log shows and
# /api/overview reports as product_version: `git describe` of the tree
# (a tag such as v0.1.0, commits past it, -dirty for uncommitted changes);
# `make build VERSION=1.2.3` overrides it.
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT  := $(shell git rev-parse --short=7 HEAD 2>/dev/null)
VERSION_PKG := github.com/trident-broker/trident/cmd/internal/version
LDFLAGS := -X $(VERSION_PKG).release=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT)
# The container image `make image` builds: IMAGE:VERSION and IMAGE:latest.
IMAGE ?= trident

.PHONY: all build build-static image run test docs-check vet race suites fuzz fuzz-ci bench bench-quorum bench-backlog bench-many-queues bench-many-quorum bench-stream-protocol lint clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/trident ./cmd/trident
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/tridentctl ./cmd/tridentctl

# Static binaries (no libc: they run in a FROM scratch image) in
# $(BIN)/static, and the empty directory the image's /data volume is
# copied from.
build-static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/static/trident ./cmd/trident
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/static/tridentctl ./cmd/tridentctl
	mkdir -p $(BIN)/static/data

# The image: FROM scratch with the static binaries (Dockerfile). The
# docker format keeps the HEALTHCHECK (OCI images have none); no cached
# intermediate images (nothing to reuse in a FROM scratch build).
image: build-static
	podman build --format docker --layers=false --build-arg VERSION=$(VERSION) \
		-t $(IMAGE):$(or $(VERSION),devel) -t $(IMAGE):latest -f Dockerfile .

run: build
	$(BIN)/trident $(ARGS)

test: test-deps vet race suites fuzz-ci

# Every command in README.md and docs/*.md, run against a broker that
# `make run` starts on free ports, and their YAML loaded by the conf package
# (test/docs_test.go says how each command is checked, and which are not,
# with the reason). `make test` runs it with the rest of ./test (race).
docs-check:
	$(GO) test -count=1 -run '^TestDocsCommands$$' ./test/

# What the tests need beyond Go (chromium, rabbitmqadmin, podman, gcc):
# installed when run as root, else make test stops and says what is missing
# (TRIDENT_TEST_DEPS=skip runs without them; their tests then skip).
test-deps:
	@scripts/test-deps.sh

vet:
	$(GO) vet ./...

# The third-party client suites (amqp091-go's integration suite, paho's fvt
# tests) drive a real broker process with timing-sensitive tests; they run
# after the race-enabled tests, one at a time, rather than beside them.
SUITES := ./test/amqp091suite ./test/pahofvt

race:
	$(GO) test -race -timeout 30m $$($(GO) list ./... | grep -v -e /test/amqp091suite -e /test/pahofvt)

suites:
	$(GO) test -count=1 -p 1 -timeout 20m $(SUITES)

# Runs every Fuzz* target for FUZZTIME each (only packages whose tests
# define one are compiled): scripts/fuzz.sh, which tells a found input from
# go1.26's fuzzing-deadline race.
fuzz:
	@GO=$(GO) FUZZTIME=$(FUZZTIME) sh scripts/fuzz.sh

# Every Fuzz* target for FUZZTIME_CI each: what `make test` (and CI) runs.
fuzz-ci:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_CI)

bench:
	$(GO) run ./cmd/tridentbench $(BENCHFLAGS)

# Quorum queues with confirms, 1 → 1 and 10 → 10: single-node Trident, the
# RabbitMQ anchor (one node, so a one-member quorum queue) and a local
# 3-node Trident cluster, in the same run; BENCHFLAGS come last and win.
bench-quorum:
	$(GO) run ./cmd/tridentbench --anchors --cluster3 --scenarios $(QUORUM_SCENARIOS) --rounds 3 $(BENCHFLAGS)

# One durable queue filled with BACKLOG persistent 1 KiB messages, kill -9,
# restart, drain: rates per tenth, peak RSS, restart time, disk (backlog.go).
bench-backlog:
	$(GO) run ./cmd/tridentbench --backlog $(BACKLOG) $(BENCHFLAGS)

# Many durable queues with a few messages each: declare, fill, kill -9,
# restart to serving with the right counts, memory (manyqueues.go).
bench-many-queues:
	$(GO) run ./cmd/tridentbench --many-queues $(QUEUES) --many-queues-each $(EACH) $(BENCHFLAGS)

# QQ quorum queues on a local 3-node cluster: declare time, idle CPU and RSS
# per node, failover after a SIGKILL of the busiest leader (manyquorum.go).
bench-many-quorum:
	$(GO) run ./cmd/tridentbench --many-quorum $(QQ) $(BENCHFLAGS)

# The stream protocol (port 5552) with rabbitmq-stream-go-client and a raw
# client, a self-started Trident and the RabbitMQ anchor (5553) in the same
# run: publish with confirms 16 B and 1 KiB, consume from first x1 and x10,
# broker CPU per message and RSS (streamproto.go).
bench-stream-protocol:
	$(GO) run ./cmd/tridentbench --stream-protocol $(SP) --anchors $(BENCHFLAGS)

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l reports:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# clean keeps ./data: it is the broker's state, not a build output.
clean:
	rm -rf $(BIN)
	rm -f *.test *.prof
