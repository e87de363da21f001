# Trident: build, run and test. GNU make.
#
#   make run      build and start a broker (data in ./data; ARGS='--flag ...')
#   make test     vet and the race-enabled test suite (what .ci/run runs)

GO       ?= go
BIN      := bin
ARGS     ?=
# Per-target fuzzing time for `make fuzz`.
FUZZTIME ?= 60s
# Extra flags for `make bench`, e.g. BENCHFLAGS='--anchors'.
BENCHFLAGS ?=

.PHONY: all build run test vet race suites fuzz bench lint clean

all: build

build:
	$(GO) build -o $(BIN)/trident ./cmd/trident
	@if grep -qs '^package main' cmd/tridentctl/*.go; then \
		echo "$(GO) build -o $(BIN)/tridentctl ./cmd/tridentctl"; \
		$(GO) build -o $(BIN)/tridentctl ./cmd/tridentctl; \
	fi

run: build
	./$(BIN)/trident $(ARGS)

test: vet race suites

vet:
	$(GO) vet ./...

# The third-party client suites (amqp091-go's integration suite, paho's fvt
# tests) drive a real broker process with timing-sensitive tests; they run
# after the race-enabled tests, one at a time, rather than beside them.
SUITES := ./test/amqp091suite ./test/pahofvt

race:
	$(GO) test -race -timeout 20m $$($(GO) list ./... | grep -v -e /test/amqp091suite -e /test/pahofvt)

suites:
	$(GO) test -count=1 -p 1 -timeout 20m $(SUITES)

# Runs every Fuzz* target for FUZZTIME each (only packages whose tests
# define one are compiled).
fuzz:
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -r -n1 dirname | sort -u); do \
		list=$$($(GO) test -list '^Fuzz' $$dir); \
		for target in $$(echo "$$list" | grep '^Fuzz'); do \
			echo "== $$dir $$target ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$dir; \
		done; \
	done

bench:
	$(GO) run ./cmd/tridentbench $(BENCHFLAGS)

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l reports:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# clean keeps ./data: it is the broker's state, not a build output.
clean:
	rm -rf $(BIN)
	rm -f *.test *.prof
