# isched — `make help` lists the targets.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(HOME)/go/bin:$(PATH)
GO ?= go
BIN ?= bin
PREFIX ?= /usr/local
# Debian packages the tests and the demo need on a fresh Debian 12 machine.
APT_PACKAGES := munge libmunge-dev slurmctld slurmd slurm-client redis-server python3 python3-torch python3-torchvision shellcheck gcc
# Build tags of every go command make runs (the builds tests start too, through
# GOFLAGS). libmunge: the coordinator opens MUNGE credentials in-process
# (cgo, libmunge-dev) instead of running unmunge for each; `make build GOTAGS=`
# builds without it, on a host without libmunge-dev.
GOTAGS ?= libmunge
export GOFLAGS := -tags=$(GOTAGS)
BINARIES := isched-wrapper isched-agent isched-coordinator isched
FUZZTIME ?= 10s

.PHONY: help deps check-tags build test test-python test-unit test-integration test-chaos bench bench-ingest soak soak-ci lint fuzz fuzz-ci demo install cluster-up cluster-down clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-18s %s\n",$$1,$$2}'

deps: ## install what the tests and the demo need (apt packages as root, Go modules)
	@missing=""; for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "run as root to install:$$missing" >&2; exit 1; fi; \
	  export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	$(GO) mod download

build: check-tags ## build the four binaries into ./bin
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/isched-wrapper ./wrapper
	$(GO) build -o $(BIN)/isched-agent ./agent
	$(GO) build -o $(BIN)/isched-coordinator ./coordinator
	$(GO) build -o $(BIN)/isched ./isched

check-tags:
	@if [[ ",$(GOTAGS)," == *",libmunge,"* ]] && [ ! -e /usr/include/munge.h ]; then \
	  echo "munge.h missing: install libmunge-dev (make deps, as root) or run make with GOTAGS=" >&2; exit 1; fi

cluster-up: ## start the local Slurm + Redis test cluster (root)
	scripts/dev-cluster up

cluster-down: ## stop the local test cluster
	scripts/dev-cluster down

test: deps build cluster-up ## the README's test command: cluster up, hermetic + integration tests with -race
	$(GO) vet ./...
	$(GO) vet -tags integration,$(GOTAGS) ./...
	GOFLAGS= $(GO) vet ./... # the build without libmunge too
	ISCHED_INTEGRATION=1 $(GO) test -race -count=1 -tags integration,$(GOTAGS) -p 1 -timeout 50m ./...
	$(MAKE) --no-print-directory fuzz-ci
	$(MAKE) --no-print-directory soak-ci
	$(MAKE) --no-print-directory test-python

test-python: ## the Python package's tests (python/tests, stdlib unittest) and gpu-check's CPU self-test
	/usr/bin/python3 -m unittest discover -s python/tests -t python/tests
	scripts/gpu-check --self-test

test-unit: check-tags ## hermetic tests only (no servers)
	$(GO) test -race -count=1 ./...

test-integration: build cluster-up ## integration-tagged tests against the real cluster and Redis
	ISCHED_INTEGRATION=1 $(GO) test -race -count=1 -tags integration,$(GOTAGS) -p 1 -timeout 50m ./...

# The fault suite: the TestChaos* tests (slurmctld restart, slurmd killed,
# Redis killed under 20 jobs, coordinator and agent SIGKILLed during
# CHAOS_MIGRATIONS migrations; a failing run logs its ISCHED_CHAOS_SEED) and
# the older fault tests. `make test` runs the same tests with 8 migrations.
# Measured on the 2-CPU lab machine: 10 min 35 s (test-chaos with 50).
CHAOS_MIGRATIONS ?= 50
CHAOS_RUN := ^(TestChaos.*|TestCheckpointDamageNeverResumed|TestHostileUser|TestRedisOutage|TestSpoolDiskFull)$$
test-chaos: build cluster-up ## fault-injection suite on the real cluster (CHAOS_MIGRATIONS=50 migrations under SIGKILLs)
	ISCHED_INTEGRATION=1 ISCHED_CHAOS_MIGRATIONS=$(CHAOS_MIGRATIONS) $(GO) test -race -count=1 -tags integration,$(GOTAGS) -p 1 -timeout 60m \
	  -run '$(CHAOS_RUN)' -v ./internal/e2e/ ./internal/wrapper/ 2>&1 | tee /tmp/isched-chaos.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|took|seed|chaos kills|moved'; exit $${PIPESTATUS[0]}

# fuzz-ci: every fuzz target for a fixed number of executions (FUZZ_BUDGETS,
# sized for a few seconds each on a busy 2-vCPU machine; others FUZZ_EXECS).
# Count budgets, never durations, in make test: a duration -fuzztime can fail
# with a bare "context deadline exceeded" at its end (Go's fuzz coordinator
# race, golang/go#75804, fixed only in Go 1.27); a count sets no deadline.
# The seed corpus and testdata/fuzz are replayed before fuzzing either way.
FUZZ_EXECS ?= 2000x
FUZZ_BUDGETS := FuzzParseSqueue=500x FuzzParseText=10000x FuzzDecode=3000x FuzzWalkSchema=20000x \
  FuzzEncodeSample=20000x FuzzEncodeAction=20000x FuzzDecodeModel=3000x FuzzDecodeSite=10000x \
  FuzzParseLine=5000x FuzzMatcherFeed=10000x
fuzz-ci: ## every fuzz target for a fixed execution count (what make test runs; cannot flake on a deadline)
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    n=$(FUZZ_EXECS); for b in $(FUZZ_BUDGETS); do [ "$${b%%=*}" = "$$f" ] && n=$${b#*=}; done; \
	    echo "fuzz $$pkg $$f ($$n)"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $$n $$pkg >/tmp/isched-fuzz.log 2>&1 || { cat /tmp/isched-fuzz.log; exit 1; }; \
	  done; \
	done

fuzz: ## run every fuzz target for FUZZTIME (default 10s) each (time-based: for people, not CI)
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >/tmp/isched-fuzz.log 2>&1 || { cat /tmp/isched-fuzz.log; exit 1; }; \
	  done; \
	done

bench: ## Go benchmarks (figures printed; targets in the issue notes)
	$(GO) test -run '^$$' -bench . -benchmem ./...

bench-ingest: cluster-up ## 1k/5k/10k simulated jobs, real coordinator and agent (fake Slurm), 60 s each (~8 min)
	$(GO) run ./scripts/bench/ingest -jobs 1000,5000,10000 -duration 60s

soak: cluster-up ## manual: 2 h at 1,000 jobs, fails if memory grows > 5% after the warm-up
	$(GO) run ./scripts/bench/ingest -soak -jobs 1000 -duration 2h

soak-ci: cluster-up ## the soak for CI: 2 min at 1,000 jobs (30 s warm-up, a sample every 5 s; 200 iterations per sample fill the estimator window before it)
	$(GO) run ./scripts/bench/ingest -soak -jobs 1000 -duration 2m -settle 20s -iters 200

lint: ## go vet, staticcheck, gofmt check, shellcheck
	$(GO) vet ./...
	$(GO) vet -tags integration,$(GOTAGS) ./...
	GOFLAGS= $(GO) vet ./... # the build without libmunge too
	@command -v staticcheck >/dev/null || $(GO) install honnef.co/go/tools/cmd/staticcheck@latest
	staticcheck ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	shellcheck scripts/dev-cluster scripts/demo scripts/bench/wrapper-overhead scripts/isched-task-epilog .ci/run

demo: deps build cluster-up ## the seed's scenario live on the local cluster with real PyTorch (a few minutes)
	scripts/demo

install: build ## install binaries to $(PREFIX)/bin, the Python package to $(PREFIX)/share/isched (on PYTHONPATH: import isched), the TaskEpilog to $(PREFIX)/libexec
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/isched $(DESTDIR)$(PREFIX)/libexec
	for b in $(BINARIES); do install -m 0755 $(BIN)/$$b $(DESTDIR)$(PREFIX)/bin/$$b; done
	install -d $(DESTDIR)$(PREFIX)/share/isched/isched
	install -m 0644 scripts/isched.py $(DESTDIR)$(PREFIX)/share/isched/isched.py
	install -m 0644 python/isched/*.py $(DESTDIR)$(PREFIX)/share/isched/isched/
	install -m 0755 scripts/isched-task-epilog $(DESTDIR)$(PREFIX)/libexec/isched-task-epilog

clean: ## remove build output
	rm -rf $(BIN)
