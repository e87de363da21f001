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

.PHONY: all build run test vet race fuzz bench lint clean

all: build

build:
	$(GO) build -o $(BIN)/trident ./cmd/trident
	@if grep -qs '^package main' cmd/tridentctl/*.go; then \
		echo "$(GO) build -o $(BIN)/tridentctl ./cmd/tridentctl"; \
		$(GO) build -o $(BIN)/tridentctl ./cmd/tridentctl; \
	fi

run: build
	./$(BIN)/trident $(ARGS)

# The lead adds further targets (integration suites) as prerequisites here.
test: vet race

vet:
	$(GO) vet ./...

race:
	$(GO) test -race -timeout 20m ./...

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
