# isched — `make help` lists the targets.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(HOME)/go/bin:$(PATH)
GO ?= go
BIN ?= bin
# Install layout (make install; make deb stages the same with PREFIX=/usr).
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
BINDIR = $(PREFIX)/bin
LIBEXECDIR = $(PREFIX)/libexec
DATADIR = $(PREFIX)/share
DOCDIR = $(DATADIR)/doc/isched
MANDIR = $(DATADIR)/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
ZSHCOMPDIR ?= $(if $(filter /usr,$(PREFIX)),$(DATADIR)/zsh/vendor-completions,$(DATADIR)/zsh/site-functions)
FISHCOMPDIR ?= $(DATADIR)/fish/vendor_completions.d
# The version every binary prints (-version), stamped from git: a v* tag
# (v1.2.3-4-gabc -> 1.2.3+4+gabc), else 0.0~git<commit time>.<hash>;
# +dirty for uncommitted changes. Also the Debian package's version.
VERSION ?= $(shell d=$$(git describe --tags --match 'v[0-9]*' 2>/dev/null); \
  if [ -n "$$d" ]; then v=$$(echo "$${d\#v}" | tr - +); else v="0.0~git$$(git log -1 --format=%cd --date=format:%Y%m%d%H%M%S 2>/dev/null).$$(git rev-parse --short HEAD 2>/dev/null)"; fi; \
  git diff --quiet HEAD 2>/dev/null || v="$$v+dirty"; echo "$$v")
# Hardened binaries, what Debian asks of compiled programs (lintian's
# hardening-no-pie, hardening-no-relro): position-independent
# (-buildmode=pie, so ASLR moves the program too) with RELRO (the GOT
# read-only once loaded). Full RELRO (every symbol bound at start) for all
# but the wrapper: -bindnow for Go's own linker, -z relro -z now for the C
# linker when cgo links externally (libmunge, the net package's resolver).
# The wrapper keeps lazy binding (partial RELRO): go-nvml links NVML's
# functions unresolved and dlopens libnvidia-ml at run time, so with -z now
# the loader refuses to start it ("undefined symbol: nvml...") on every
# machine. The C parts get dpkg-buildflags' fortify and stack protector.
# make build runs each binary's --version, which a bad link fails.
# Check: hardening-check bin/* (devscripts), or readelf -h (Type DYN),
# readelf -d (FLAGS BIND_NOW), readelf -l (GNU_RELRO).
BUILDFLAGS := -buildmode=pie
LDFLAGS := -X github.com/isched/isched/internal/version.Version=$(VERSION)
LDFLAGS_NOW := $(LDFLAGS) -bindnow -extldflags "-Wl,-z,relro,-z,now"
LDFLAGS_LAZY := $(LDFLAGS) -extldflags "-Wl,-z,relro,-z,lazy"
CGO_BUILD_CFLAGS ?= -O2 -g -fstack-protector-strong -D_FORTIFY_SOURCE=2
DEBARCH ?= $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
DEB := $(BIN)/isched_$(VERSION)_$(DEBARCH).deb
# make install copies the binaries as built; make deb strips their symbol
# tables (install -s, as Debian packages do): the package went from 30.8 to
# 15.3 MB. Go keeps its own line tables, so panics still show file:line.
INSTALL_STRIP ?=
# Debian packages the tests and the demo need on a fresh Debian 12 machine.
# python3-venv: scripts/python-venv (make test-python) makes a venv.
APT_PACKAGES := munge libmunge-dev slurmctld slurmd slurm-client slurmdbd mariadb-server redis-server python3 python3-venv python3-torch python3-torchvision python3-cloudpickle shellcheck gcc man-db systemd prometheus lmod lintian fish zsh bash-completion
# Build tags of every go command make runs (the builds tests start too, through
# GOFLAGS). libmunge: the coordinator opens MUNGE credentials in-process
# (cgo, libmunge-dev) instead of running unmunge for each; `make build GOTAGS=`
# builds without it, on a host without libmunge-dev.
GOTAGS ?= libmunge
export GOFLAGS := -tags=$(GOTAGS)
BINARIES := isched-wrapper isched-agent isched-coordinator isched-relay isched
FUZZTIME ?= 10s
# The Go test runs of make test print through scripts/testreport: failures
# whole, then every skip with its reason and the slowest packages and tests.
# Under CI=true a skip that .ci/allowed-skips does not list fails the run.
TESTREPORT = $(GO) run ./scripts/testreport -slowest 60 -allow .ci/allowed-skips $(if $(filter true 1,$(CI)),-strict)

.PHONY: lint-size stage-start help deps check-tags build man deb deb-test site-test test test-python test-notebook test-unit test-integration test-scenario test-elastic-frameworks test-chaos bench bench-predict bench-sim bench-lab-replay-keep bench-ingest bench-ingest-cluster soak soak-ci lint size fuzz fuzz-ci demo demo-installed install cluster-up cluster-down site-lab-test site-lab-deb-test clean

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
	@command -v gocyclo >/dev/null || $(GO) install github.com/fzipp/gocyclo/cmd/gocyclo@v0.6.0 || \
	  echo "deps: could not install gocyclo (github.com/fzipp/gocyclo through the module proxy): make lint will fail until it is installed" >&2

build: check-tags ## build the five binaries into ./bin (PIE, RELRO; see BUILDFLAGS)
	@mkdir -p $(BIN)
	CGO_CFLAGS='$(CGO_BUILD_CFLAGS)' $(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS_LAZY)' -o $(BIN)/isched-wrapper ./wrapper
	CGO_CFLAGS='$(CGO_BUILD_CFLAGS)' $(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS_NOW)' -o $(BIN)/isched-agent ./agent
	CGO_CFLAGS='$(CGO_BUILD_CFLAGS)' $(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS_NOW)' -o $(BIN)/isched-coordinator ./coordinator
	CGO_CFLAGS='$(CGO_BUILD_CFLAGS)' $(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS_NOW)' -o $(BIN)/isched-relay ./relay
	CGO_CFLAGS='$(CGO_BUILD_CFLAGS)' $(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS_NOW)' -o $(BIN)/isched ./isched
	@for b in $(BINARIES); do $(BIN)/$$b --version >/dev/null || { echo "$(BIN)/$$b does not start" >&2; exit 1; }; done

man: build ## man pages and bash/zsh/fish completion, generated from isched's command tree and the daemons' flags (into $(BIN)/share)
	$(GO) run ./scripts/genman -bin $(BIN) -out $(BIN)/share -version '$(VERSION)'

check-tags:
	@if [[ ",$(GOTAGS)," == *",libmunge,"* ]] && [ ! -e /usr/include/munge.h ]; then \
	  echo "munge.h missing: install libmunge-dev (make deps, as root) or run make with GOTAGS=" >&2; exit 1; fi

cluster-up: ## start the local Slurm + Redis test cluster and a 3-master Redis Cluster (root)
	scripts/dev-cluster up --redis-cluster

cluster-down: ## stop the local test cluster
	scripts/dev-cluster down

# site-lab-test: isched on four hosts, each a network namespace with its own
# address (docs/site-lab.md); make test runs it last, from the installed
# package (site-lab-deb-test).
# Alone, the lab stays up for a look afterwards (scripts/site-lab status,
# exec, down); SITE_LAB_DOWN=1 stops it at the end.
SITE_LAB_DOWN ?=
site-lab-test: build ## the site lab (root): scripts/site-lab up, then the sitelab-tagged tests (make test's last stage)
	scripts/site-lab up
	@rc=0; $(GO) test -tags sitelab,$(GOTAGS) -count=1 -v -timeout 15m ./internal/sitelab/ || rc=$$?; \
	  if [ -n "$(SITE_LAB_DOWN)" ]; then scripts/site-lab down; else echo "site lab left up: scripts/site-lab down stops it"; fi; \
	  if [ $$rc = 0 ]; then echo "site-lab-test: PASS"; else echo "site-lab-test: FAIL (logs: /var/lib/isched-site/log)"; fi; exit $$rc

# site-lab-deb-test: the site lab run from the installed Debian package (its
# /usr/bin and /usr/share/isched, ISCHED_SITE_BIN), as a site installs it on
# every host; the package is removed again at the end. make test's last stage.
APT_LOCAL = DEBIAN_FRONTEND=noninteractive apt-get -y -qq --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold
site-lab-deb-test: ## the site lab from the installed package (root): install bin/isched_*.deb, site-lab-test on /usr/bin, remove it
	@[ -f $(DEB) ] || $(MAKE) --no-print-directory deb
	$(APT_LOCAL) install --reinstall $(CURDIR)/$(DEB) >/dev/null
	@rc=0; ISCHED_SITE_BIN=/usr/bin $(MAKE) --no-print-directory site-lab-test SITE_LAB_DOWN=1 || rc=$$?; \
	  $(APT_LOCAL) remove --purge isched >/dev/null; exit $$rc

, := ,
# make test times its stages (scripts/stage-time) and prints the table at its
# end, or where it fails; the Go tests' own table comes from testreport.
STAGES := $(BIN)/make-test-stages
# Parallel tests run this many at a time (go test's default is GOMAXPROCS,
# 2 on the lab machine). The e2e tests that call t.Parallel (the nine
# TestConvention*) wait on Slurm, not the CPU: at 10 they took 197 s on
# the 2-vCPU lab machine, all passing, against ~500 s at 2 (issue 31).
TEST_PARALLEL ?= 10
# make test runs its checks and tests in two lanes (scripts/test-lanes): the
# e2e package (about 20 minutes, mostly waiting on Slurm) beside vet, the
# other packages, the fuzz targets, the Python tests and the soak, in turn.
# Tests that share the lab's daemons and partitions take leases
# (internal/testutil/lease.go), so a test that kills a daemon or fills a
# partition never overlaps another package's test that needs them.
# test-integration runs packages this many at a time.
TEST_PACKAGES ?= 2
stage = scripts/stage-time run $(STAGES) $(1) -- $(2) || { scripts/stage-time report $(STAGES); exit 1; }

test: stage-start deps build cluster-up ## the README's test command: cluster up, hermetic + integration tests with -race
	@scripts/stage-time mark $(STAGES) setup:deps,build,cluster-up
	$(call stage,lanes,env STAGES=$(STAGES) GO=$(GO) GOTAGS=$(GOTAGS) TEST_PARALLEL=$(TEST_PARALLEL) TESTREPORT='$(TESTREPORT)' scripts/test-lanes)
	@scripts/stage-time report $(STAGES)

stage-start:
	@scripts/stage-time start $(STAGES)

# test-python runs python/tests in scripts/python-venv's venv: Debian's
# torch plus the real Lightning, transformers and accelerate pinned in
# python/requirements-ci.txt, made once per machine and reused (measured on
# the 2-CPU lab machine: 46-51 s the first time, downloads included; 0.04 s
# after). TEST_PYTHON=/usr/bin/python3 runs them without the frameworks
# (their tests skip; under CI=true a skip fails, see python/tests/run.py).
TEST_PYTHON ?=
test-python: ## the Python package's tests (python/tests, with the real Lightning and transformers), gpu-check's CPU self-test and its plain PyTorch cycle on the CPU
	@py='$(TEST_PYTHON)'; if [ -z "$$py" ]; then py=$$(scripts/python-venv) || exit 1; fi; \
	  echo "$$py python/tests/run.py"; "$$py" python/tests/run.py
	scripts/gpu-check --self-test
	scripts/gpu-check --cycle-on-cpu --python /usr/bin/python3

test-notebook: build cluster-up ## run examples/table2.ipynb (GPU partitions busy: Table 2, both plans) and examples/functions.ipynb (functions as jobs, as alice) on the local cluster
	scripts/notebook-test

test-unit: check-tags ## hermetic tests only (no servers)
	$(GO) test -race -count=1 ./...

test-integration: build cluster-up ## integration-tagged tests against the real cluster and Redis
	set -o pipefail; ISCHED_INTEGRATION=1 $(GO) test -json -race -count=1 -tags integration,$(GOTAGS) -p $(TEST_PACKAGES) -parallel $(TEST_PARALLEL) -timeout 50m ./... | $(TESTREPORT)

# test-elastic-frameworks: TestElasticOnCluster's grow/shrink/resume with the
# real Lightning and Hugging Face Trainers from scripts/python-venv's venv
# (build tag frameworks; lane C of make test runs it after test-python).
# About 4 minutes on the lab.
test-elastic-frameworks: build cluster-up ## the elastic lab e2e with the real Lightning and Hugging Face Trainers (tag frameworks, about 4 min)
	ISCHED_INTEGRATION=1 $(GO) test -race -count=1 -tags integration,frameworks,$(GOTAGS) -run '^TestElasticFrameworks' -v -timeout 20m ./internal/e2e/

test-scenario: build cluster-up ## the 9-minute issue-14 scenario that make test skips (.ci/allowed-skips)
	ISCHED_INTEGRATION=1 ISCHED_E2E_SCENARIO=1 $(GO) test -race -count=1 -tags integration,$(GOTAGS) -run '^TestIssue14Scenario$$' -v -timeout 20m ./internal/e2e/

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

bench-predict: ## static (assumed, probed) and fitted estimates, static bands and the ETA vs measured CPU trainings (REGRID=1 measures the probe, grid and traces again first, ~40 min)
ifeq ($(REGRID),1)
	nice /usr/bin/python3 scripts/site_probe.py --node-type lab-cpu --threads 1 -o scripts/bench/predict/testdata/probe.json
	nice /usr/bin/python3 scripts/bench/predict/grid.py -o scripts/bench/predict/testdata/grid.json
	nice /usr/bin/python3 scripts/bench/predict/traces.py -o scripts/bench/predict/testdata/traces.json
	nice /usr/bin/python3 scripts/bench/predict/traces.py --steps 2000 --runs resnet18:8 --shift resnet18:8:0-0.05 --timeout 1500 -o scripts/bench/predict/testdata/traces-long.json
	$(GO) run ./scripts/bench/predict -write-static-band internal/plan/staticband_gen.go
endif
	$(GO) run ./scripts/bench/predict

# The real traces (../shared/traces/README.md: Philly run times, the openb
# GPU cluster's tasks) and what bench-sim writes.
TRACES ?= ../shared/traces
SIMOUT ?= $(BIN)/bench-sim
SIMFLAGS ?= --site examples/site-sim-gpu.json --dev gpu-dev --seeds 5 --loads 0.5,0.7,0.9

bench-sim: ## replay the bundled traces, Slurm alone vs isched (internal/sim): tables, CSV and SVG plots in bin/bench-sim, Philly at its own arrivals, Curie's fidelity, then the replay benchmarks (long: see docs/evaluation.md)
	@mkdir -p $(SIMOUT)
	$(GO) build -o $(SIMOUT)/isched ./isched
	$(SIMOUT)/isched simulate --trace $(TRACES)/philly_runtime.csv --mix $(TRACES)/openb_pod_list_default.csv --jobs 5000 \
	  $(SIMFLAGS) --plots $(SIMOUT)/philly --csv $(SIMOUT)/philly.csv | tee $(SIMOUT)/philly.txt
	$(SIMOUT)/isched simulate --trace $(TRACES)/openb_pod_list_default.csv --jobs 1500 \
	  $(SIMFLAGS) --plots $(SIMOUT)/openb --csv $(SIMOUT)/openb.csv | tee $(SIMOUT)/openb.txt
	$(SIMOUT)/isched simulate --trace $(TRACES)/philly_pollux_82k.csv --site examples/site-sim-philly.json --seeds 1 \
	  --variants slurm-multi,isched-auto,isched --load 1,1.2,1.5 --csv $(SIMOUT)/philly-arrivals.csv | tee $(SIMOUT)/philly-arrivals.txt
	$(SIMOUT)/isched simulate --trace $(TRACES)/philly_pollux_82k.csv --site examples/site-sim-philly.json --seeds 3 \
	  --variants slurm-multi,isched-auto,isched --window busiest-week --load 1,1.2,1.5 --csv $(SIMOUT)/philly-week.csv | tee $(SIMOUT)/philly-week.txt
	$(SIMOUT)/isched simulate --trace $(TRACES)/philly_pollux_82k.csv --site examples/site-sim-philly.json --seeds 3 \
	  --variants isched,isched+elastic --baseline isched --load 0.9,1,1.2 --csv $(SIMOUT)/philly-elastic.csv | tee $(SIMOUT)/philly-elastic.txt
	$(SIMOUT)/isched simulate --trace $(TRACES)/curie_slurm_busiest28d.csv --site examples/site-sim-curie.json | tee $(SIMOUT)/curie-fidelity.txt
	$(SIMOUT)/isched simulate --trace $(TRACES)/curie_hybrid_gpu_partition_all.csv --site examples/site-sim-curie.json | tee $(SIMOUT)/curie-hybrid-fidelity.txt
	$(SIMOUT)/isched simulate --trace $(TRACES)/curie_hybrid_gpu_partition_all.csv --site examples/site-sim-curie.json --seeds 3 --adoption 1 \
	  --variants slurm,isched,isched+trim,isched+order,isched+levers,isched+order+preempt --csv $(SIMOUT)/curie-limits.csv | tee $(SIMOUT)/curie-limits.txt
	ISCHED_TRACES=$(abspath $(TRACES)) $(GO) test -run '^$$' -bench 'Replay' -benchmem -benchtime 1x -timeout 60m ./internal/sim/

bench-lab-replay: build cluster-up ## issue 29 item 5: examples/trace-lab.sacct on the lab (real agent, coordinator, wrappers) and in the simulation, compared in bin/bench-lab/replay.txt (~8 min)
	@mkdir -p $(BIN)/bench-lab
	ISCHED_INTEGRATION=1 ISCHED_LABREPLAY_OUT=$(BIN)/bench-lab/replay.txt $(GO) test -count=1 -timeout 30m \
	  -tags integration,labreplay,$(GOTAGS) -run '^TestLabReplay$$' -v ./internal/e2e/

bench-lab-replay-keep: build cluster-up ## issue 41 lever c: examples/trace-lab-keep.sacct on the lab with keep_place on, against the simulation, in bin/bench-lab/replay-keep.txt (~7 min)
	@mkdir -p $(BIN)/bench-lab
	ISCHED_INTEGRATION=1 ISCHED_LABREPLAY_TRACE=examples/trace-lab-keep.sacct ISCHED_LABREPLAY_VARIANT=isched+keep \
	  ISCHED_LABREPLAY_OUT=$(BIN)/bench-lab/replay-keep.txt $(GO) test -count=1 -timeout 30m \
	  -tags integration,labreplay,$(GOTAGS) -run '^TestLabReplay$$' -v ./internal/e2e/

bench-ingest: cluster-up ## 1k/5k/10k simulated jobs, real coordinator and agent (fake Slurm), 60 s each (~8 min)
	$(GO) run ./scripts/bench/ingest -jobs 1000,5000,10000 -duration 60s

bench-ingest-cluster: cluster-up ## the ingest benchmark, 1k jobs for 30 s, on the single Redis and then on the dev Redis Cluster (docs/deployment.md)
	$(GO) run ./scripts/bench/ingest -jobs 1000 -duration 30s
	$(GO) run ./scripts/bench/ingest -jobs 1000 -duration 30s -redis-addr 127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393

soak: cluster-up ## manual: 2 h at 1,000 jobs, fails if memory grows > 5% after the warm-up
	$(GO) run ./scripts/bench/ingest -soak -jobs 1000 -duration 2h

soak-ci: cluster-up soak-run ## the soak for CI: 2 min at 1,000 jobs (30 s warm-up, a sample every 5 s; 200 iterations per sample fill the estimator window before it)

soak-run: # soak-ci on a cluster that is up (make test's lane B, under the lab's lease)
	$(GO) run ./scripts/bench/ingest -soak -jobs 1000 -duration 2m -settle 20s -iters 200

# make lint's size check (issue 45): no non-test function in internal/ over
# 60 lines or cyclomatic complexity 19 (gocyclo -over 19), but those that
# scripts/codesize/allow.txt lists, a list that only shrinks.
SIZE_DIRS := $(patsubst %/,%,$(wildcard internal/*/))
SIZE_ALLOW := scripts/codesize/allow.txt

lint: lint-size ## go vet, staticcheck, gofmt check, shellcheck, function size (lint-size)
	$(GO) vet ./...
	$(GO) vet -tags integration,$(GOTAGS) ./...
	GOFLAGS= $(GO) vet ./... # the build without libmunge too
	@command -v staticcheck >/dev/null || $(GO) install honnef.co/go/tools/cmd/staticcheck@latest
	staticcheck ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	shellcheck scripts/dev-cluster scripts/site-lab scripts/demo scripts/notebook-test scripts/stage-time scripts/python-venv scripts/bench/wrapper-overhead scripts/isched-task-epilog scripts/mkdeb scripts/deb-test scripts/site-test .ci/run

lint-size: ## no function in internal/ over 60 lines or complexity 19 (gocyclo, scripts/codesize) but the baseline $(SIZE_ALLOW)
	@command -v gocyclo >/dev/null || { echo "gocyclo is not installed: make deps installs it (go install github.com/fzipp/gocyclo/cmd/gocyclo@v0.6.0, through the module proxy)" >&2; exit 1; }
	@out=$$(gocyclo -over 19 -ignore '_test\.go$$' $(SIZE_DIRS) | awk '{f=$$4; sub(/\/[^\/]*$$/, "", f); print f " " $$3}' | grep -vxF -f <(grep -v '^#' $(SIZE_ALLOW))); \
	  if [ -n "$$out" ]; then printf 'gocyclo -over 19, not in %s:\n%s\n' $(SIZE_ALLOW) "$$out"; exit 1; fi
	$(GO) run ./scripts/codesize -fail -lines 60 -cyclo 19 -allow $(SIZE_ALLOW) $(SIZE_DIRS)

size: ## functions over 60 lines or cyclomatic complexity 20 in the CLI, agent and coordinator (issue 31; not part of make test)
	$(GO) run ./scripts/codesize internal/cli internal/agent internal/coordinator

demo: deps build cluster-up ## the seed's scenario live on the local cluster with real PyTorch (a few minutes)
	scripts/demo

demo-installed: deps deb cluster-up ## the demo from the installed Debian package (installs bin/isched_*.deb and keeps it)
	DEB_TEST_KEEP=1 scripts/deb-test $(DEB)
	scripts/demo --installed /usr

# What a site needs, for make install and the Debian package alike: the
# binaries, the TaskEpilog, the units (paths rewritten to PREFIX), the
# sysusers.d entry, /etc/isched examples (never over an existing file),
# the Python helper, model_summary.py and site_probe.py, the Grafana dashboard
# (share/isched/grafana), man pages, completion, docs and their copyright
# file (scripts/gencopyright: isched's licence and every compiled-in Go module's).
# The Python package goes to share/isched/isched (PYTHONPATH=share/isched:
# import isched), scripts/isched.py beside it.
install: build man ## install what a site needs under DESTDIR/PREFIX (default /usr/local; /etc/isched examples only where missing)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(DATADIR)/isched $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) \
	  $(DESTDIR)$(SYSCONFDIR)/isched $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR) $(DESTDIR)$(DOCDIR)/examples
	for b in $(BINARIES); do install -m 0755 $(INSTALL_STRIP) $(BIN)/$$b $(DESTDIR)$(BINDIR)/$$b; done
	install -d $(DESTDIR)$(DATADIR)/isched/isched
	install -m 0644 scripts/isched.py scripts/model_summary.py scripts/site_probe.py $(DESTDIR)$(DATADIR)/isched/
	install -m 0644 python/isched/*.py $(DESTDIR)$(DATADIR)/isched/isched/
	install -d $(DESTDIR)$(DATADIR)/isched/grafana
	install -m 0644 dashboards/isched.json $(DESTDIR)$(DATADIR)/isched/grafana/isched.json
	sed 's|/usr/local/bin/isched-wrapper|$(BINDIR)/isched-wrapper|g' scripts/isched-task-epilog > $(BIN)/isched-task-epilog
	install -m 0755 $(BIN)/isched-task-epilog $(DESTDIR)$(LIBEXECDIR)/isched-task-epilog
	for u in isched-agent isched-coordinator isched-relay; do \
	  sed -e 's|/usr/local/bin/|$(BINDIR)/|g' -e 's|/usr/local/share/doc/isched/|$(DOCDIR)/|g' -e 's|/etc/isched|$(SYSCONFDIR)/isched|g' systemd/$$u.service > $(BIN)/$$u.service; \
	  install -m 0644 $(BIN)/$$u.service $(DESTDIR)$(UNITDIR)/$$u.service; done
	install -m 0644 systemd/isched.sysusers $(DESTDIR)$(SYSUSERSDIR)/isched.conf
	@set -e; etc=$(DESTDIR)$(SYSCONFDIR)/isched; \
	for f in isched.conf.example:isched.conf:0644 coordinator.json:coordinator.json:0644 site.json.example:site.json.example:0644 agent.env.example:agent.env:0600 coordinator.env.example:coordinator.env:0600 relay.env.example:relay.env:0600; do \
	  IFS=: read -r src dst mode <<< "$$f"; \
	  if [ -e "$$etc/$$dst" ]; then echo "kept $$etc/$$dst"; else install -m "$$mode" "systemd/$$src" "$$etc/$$dst"; fi; done
	for p in $(BIN)/share/man/man1/*.1 $(BIN)/share/man/man8/*.8; do \
	  s=$${p##*.}; gzip -9n -c "$$p" > $(DESTDIR)$(MANDIR)/man$$s/$$(basename "$$p").gz; chmod 0644 $(DESTDIR)$(MANDIR)/man$$s/$$(basename "$$p").gz; done
	install -m 0644 $(BIN)/share/bash-completion/isched $(DESTDIR)$(BASHCOMPDIR)/isched
	for b in isched-wrapper isched-agent isched-coordinator isched-relay; do ln -sf isched $(DESTDIR)$(BASHCOMPDIR)/$$b; done
	install -m 0644 $(BIN)/share/zsh/_isched $(BIN)/share/zsh/_isched_daemons $(DESTDIR)$(ZSHCOMPDIR)/
	install -m 0644 $(BIN)/share/fish/isched.fish $(BIN)/share/fish/isched-daemons.fish $(DESTDIR)$(FISHCOMPDIR)/
	for b in isched-wrapper isched-agent isched-coordinator isched-relay; do ln -sf isched-daemons.fish $(DESTDIR)$(FISHCOMPDIR)/$$b.fish; done
	install -m 0644 README.md $(filter-out docs/README.md,$(wildcard docs/*.md)) $(DESTDIR)$(DOCDIR)/
	install -m 0644 docs/README.md $(DESTDIR)$(DOCDIR)/index.md # the docs' own index, beside the project's README
	$(GO) run ./scripts/gencopyright $(addprefix ./,$(subst isched-,,$(BINARIES))) > $(BIN)/copyright
	install -m 0644 $(BIN)/copyright $(DESTDIR)$(DOCDIR)/copyright
	install -m 0644 examples/README.md examples/*.json examples/*.py examples/*.ipynb $(DESTDIR)$(DOCDIR)/examples/

deb: ## the Debian package $(BIN)/isched_VERSION_ARCH.deb (dpkg-deb from a staged make install)
	rm -rf $(BIN)/deb-root
	$(MAKE) --no-print-directory install INSTALL_STRIP=-s DESTDIR=$(CURDIR)/$(BIN)/deb-root PREFIX=/usr UNITDIR=/lib/systemd/system SYSUSERSDIR=/usr/lib/sysusers.d VERSION='$(VERSION)'
	rm -f $(BIN)/isched_*.deb
	scripts/mkdeb $(BIN)/deb-root '$(VERSION)' $(DEBARCH) $(DEB)

# site-test: the .deb's units under a real systemd PID 1, in a Debian 12
# container (systemd-nspawn --boot; docs/site-test.md). Root; not part of
# make test. The first run makes the container's root file system with
# debootstrap (cached in /var/cache/isched-site-test).
site-test: deb ## the package's units under a real systemd: boot a Debian 12 container, install the .deb, start and check the three units (root; not in make test)
	scripts/site-test $(DEB)

deb-test: deb ## lintian (errors, warnings) on the package, then install it here with apt, check binaries, units (systemd-analyze verify), users, man, completion; remove it
	scripts/deb-test $(DEB)

clean: ## remove build output
	rm -rf $(BIN)
