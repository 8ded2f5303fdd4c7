# vipd — build, test, lab.
#
#   make demo      (root) 3-node lab in network namespaces showing a failover
#   make test      all tests; network-namespace tests run when root (VIPD_NETNS_TESTS=1 is set here)
#   make bench     (root) failover gaps and footprint, written to docs/benchmarks.md
#   make k8s-lab   (root) only the real control plane labs (kube-apiserver, etcd, client-go; VIPD_BIN=dir for another vipd)
#   make fence-proof  (root) the membership-cut lab, 20 runs per direction, written to docs/fence-proof.md
#   make packages  static binaries + .deb and .rpm in dist/
#   make man       man pages and vipctl's shell completions in dist/gen/
#   make alerts-test  promtool check/test of packaging/prometheus/ (also run by go test when promtool is installed)
#   make bgp-fuzz  (root) 10 minutes of malformed BGP messages against vipd's speaker (bgp's TestPeerFuzz)
#   make vulncheck govulncheck against a pinned offline vulnerability database; fails on a reachable one not in docs/security.md
#   make vm-test   (root) lab/vm verbosely: the labs this kernel cannot run (lab/bondvlan) in a QEMU VM
#   make sim       the cluster simulator over SEEDS seeds (SEED=n: one seed, with its story)
#   make sim-ci    make test's 10,000 seeds of it (SIM_CI_SEEDS)

GO        ?= go
# The Go that builds vipd is the one go.mod's go line names (go1.27.3: the
# standard library's 2026 fixes, docs/security.md). Every go command run
# from here, and the ones the tests and labs start, is told so: a machine
# whose own Go is older, or that sets GOTOOLCHAIN=local (which ignores
# go.mod), would otherwise refuse to build. The go command fetches that
# toolchain from the module proxy once (about 76 MB).
export GOTOOLCHAIN := go$(shell sed -n 's/^go \([0-9.]*\)$$/\1/p' go.mod)
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
BIN       := bin
GOFLAGS_BUILD := -trimpath -ldflags '$(LDFLAGS)'
IS_ROOT   := $(shell [ "$$(id -u)" = 0 ] && echo 1)

.PHONY: sim sim-ci all build test unit netns-test vet gofmt-check staticcheck staticcheck-prep vulncheck vulncheck-prep vulndb-update fmt fuzz fuzz-prep bgp-fuzz demo bench fence-proof proto clean packages man alerts-test k8s-bin k8s-lab vm-test

all: build

build:
	mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/vipd ./cmd/vipd
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/vipctl ./cmd/vipctl

# test runs everything: gofmt and vet, then the unit tests with the race
# detector, then (as root) the network-namespace tests that start real vipd
# processes. As root, go vet then staticcheck run alongside the unit tests
# at the lowest CPU priority (nice 19), on the CPU they leave idle while
# they wait on timers (vet's compiling, minutes when cold, is the one
# staticcheck needs too, and neither is shared with the race build), and
# so does the build of the real control plane lab's binaries (k8s-bin:
# minutes of compiling when cold). Their output follows the unit tests'; a
# failure of any fails make test.
# Then, as root, the network tests run with make sim-ci beside them
# (SIM_CI_SEEDS seeds of the cluster simulator, without the race detector)
# in the idle scheduling and I/O classes: the labs, one at a time, leave
# most of both CPUs idle, and a task of the idle class gets a CPU only
# when nothing else wants it, so the labs' timing is theirs. Its output
# follows the network tests'; its failure fails make test. Not as root,
# it runs beside the unit tests the same way.
# BESIDE_UNIT (empty by default; .ci/run sets it) is one more command that
# runs beside the unit tests, in the idle scheduling and I/O classes
# (chrt --idle, ionice -c 3: a CPU or the disk only when nothing else
# wants it), and is waited for before the network tests start, so it
# never runs beside the timing-sensitive labs; its failure fails make test.
BESIDE_UNIT ?=
test: $(if $(IS_ROOT),gofmt-check,vet)
ifeq ($(IS_ROOT),1)
	@log=$$(mktemp); slog=$$(mktemp); xlog=$$(mktemp); xpid=; \
	nice -n 19 $(MAKE) -s k8s-bin >"$$log" 2>&1 & bpid=$$!; \
	nice -n 19 sh -c '$(GO) vet ./... && $(MAKE) -s staticcheck' >"$$slog" 2>&1 & spid=$$!; \
	if [ -n '$(BESIDE_UNIT)' ]; then chrt --idle 0 ionice -c 3 $(BESIDE_UNIT) >"$$xlog" 2>&1 & xpid=$$!; fi; \
	$(GO) test -race -count=1 ./...; rc=$$?; \
	wait $$spid; src=$$?; \
	echo "go vet, staticcheck (alongside the unit tests, nice 19):"; cat "$$slog"; rm -f "$$slog"; \
	wait $$bpid; brc=$$?; \
	echo "k8s-bin (built alongside the unit tests, nice 19):"; cat "$$log"; rm -f "$$log"; \
	xrc=0; if [ -n "$$xpid" ]; then wait $$xpid; xrc=$$?; \
		echo "$(BESIDE_UNIT) (alongside the unit tests, idle class):"; cat "$$xlog"; fi; rm -f "$$xlog"; \
	test $$rc -eq 0 || exit $$rc; \
	test $$src -eq 0 || { echo "go vet or staticcheck failed"; exit $$src; }; \
	test $$brc -eq 0 || { echo "k8s-bin failed"; exit $$brc; }; \
	test $$xrc -eq 0 || { echo "$(BESIDE_UNIT) failed"; exit $$xrc; }
	@$(call beside_sim,$(MAKE) netns-test)
else
	$(MAKE) staticcheck
	@$(call beside_sim,$(GO) test -race -count=1 ./...)
	@echo "not root: network-namespace tests skipped (run make test as root)"
endif

# beside_sim runs $(1) with make sim-ci beside it in the idle scheduling
# and I/O classes, then prints the simulator's output; either failing
# fails it.
define beside_sim
simlog=$$(mktemp); t0=$$(date +%s); \
( chrt --idle 0 ionice -c 3 $(MAKE) -s sim-ci >"$$simlog" 2>&1; rc=$$?; \
  echo "make sim-ci: $$(( $$(date +%s) - t0 )) s, exit $$rc" >>"$$simlog"; exit $$rc ) & simpid=$$!; \
$(1); rc=$$?; \
wait $$simpid; simrc=$$?; \
echo "make sim-ci ($(SIM_CI_SEEDS) seeds of the simulator, beside it, idle class):"; cat "$$simlog"; rm -f "$$simlog"; \
test $$rc -eq 0 || exit $$rc; \
test $$simrc -eq 0 || { echo "make sim-ci failed"; exit $$simrc; }
endef

# The packages with network-namespace tests (agent's tests are in-process
# and already ran above). ./lab/... includes lab/vm, which runs the labs
# this kernel cannot (lab/bondvlan needs bonding and 802.1Q) in a QEMU VM
# booted with Debian's kernel; see lab/vm's doc.
NETNS_PKGS := ./l2/... ./bgp/... ./conns/... ./internal/netnstest/... ./cmd/... ./lab/...
netns-test: build k8s-bin
	VIPD_NETNS_TESTS=1 VIPD_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 25m -p 1 $(NETNS_PKGS)

# k8s-bin builds the lab's kube-apiserver, kubectl, etcd and clients tool
# from the lab/k8s module into ~/.cache/vipd-lab (or finds them there; see
# lab/k8slab). The labs build them too; this shows a cold build's minutes
# apart (a warm one takes seconds).
k8s-bin:
	$(GO) run ./lab/k8slab/cmd/k8sbuild

# k8s-lab runs only the real control plane labs (lab/k8slab), against
# $$VIPD_BIN when set (another build of vipd), else bin/.
k8s-lab: build k8s-bin
	VIPD_NETNS_TESTS=1 VIPD_BIN=$${VIPD_BIN:-$(CURDIR)/$(BIN)} $(GO) test -count=1 -v -timeout 30m ./lab/k8slab/

# vm-test runs only lab/vm, with the VM's console and the lab's output
# shown as they come (VIPD_VM_RUN=regexp picks the lab's tests,
# VIPD_VM_FORCE=1 uses the VM even where this kernel could run the lab,
# VIPD_VM_ACCEL=kvm|tcg overrides the choice of accelerator).
vm-test: build
	VIPD_NETNS_TESTS=1 VIPD_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -v -timeout 25m ./lab/vm

# sim runs the deterministic cluster simulator (agent/sim_test.go,
# docs/design.md "The cluster simulator") over SEEDS seeds from
# SIM_FIRST, without the race detector and one worker per CPU (about
# 0.06 s of CPU a seed: 10,000 seeds in about 5.5 minutes on two CPUs);
# make test runs 16 seeds of it under the race detector with the unit
# tests, and SIM_CI_SEEDS without it (sim-ci). SEED=n runs that seed
# alone and prints its whole story.
SEEDS     ?= 100000
SIM_FIRST ?= 1
sim:
ifdef SEED
	VIPD_SIM_SEED=$(SEED) $(GO) test -count=1 -v -run '^TestSimSeeds$$' ./agent/
else
	VIPD_SIM_SEEDS=$(SEEDS) VIPD_SIM_FIRST=$(SIM_FIRST) $(GO) test -count=1 -timeout 0 -run '^TestSimSeeds$$' ./agent/
endif

# sim-ci is make test's share of the simulator: seeds 1 to SIM_CI_SEEDS,
# the summary line shown (-v). Its timeout leaves room for a run in the
# idle class beside busy labs.
SIM_CI_SEEDS ?= 10000
sim-ci:
	VIPD_SIM_SEEDS=$(SIM_CI_SEEDS) VIPD_SIM_FIRST=1 $(GO) test -count=1 -timeout 30m -v -run '^TestSimSeeds$$' ./agent/

# fuzz runs every fuzz target for FUZZTIME each (the committed corpora in
# */testdata/fuzz are replayed by plain go test too).
FUZZTIME ?= 10s
# fuzz-prep compiles the fuzz targets' packages with go test's fuzzing
# instrumentation, which covers every dependency and the standard library
# (minutes of compiling on a cold cache, none of it shared with the
# uninstrumented builds), into Go's build cache: make fuzz then only links
# each target. .ci/run runs it at nice 19 beside make test.
FUZZ_PKGS := ./agent/config ./agent ./bfd ./conns ./bgp
fuzz-prep:
	@for p in $(FUZZ_PKGS); do $(GO) test -c -fuzz . -o /dev/null $$p || exit 1; done
fuzz:
	@for f in FuzzParse FuzzKeyIndex; do \
		echo "fuzz $$f ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./agent/config || exit 1; \
	done
	@for f in FuzzDecodeMeta FuzzAPIHandlers; do \
		echo "fuzz $$f ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./agent || exit 1; \
	done
	@echo "fuzz FuzzUnmarshal ($(FUZZTIME))"
	$(GO) test -run '^$$' -fuzz '^FuzzUnmarshal$$' -fuzztime $(FUZZTIME) ./bfd
	@for f in FuzzDecodeSet FuzzDecodeDelta; do \
		echo "fuzz $$f ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./conns || exit 1; \
	done
	@echo "fuzz FuzzDecodeMessage ($(FUZZTIME))"
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeMessage$$' -fuzztime $(FUZZTIME) ./bgp

# bgp-fuzz (root) runs bgp's TestPeerFuzz alone: GoBGP's advisory shapes,
# then BGP_FUZZ_DURATION of random mutations against vipd's speaker over a
# real session (make test runs 5s of them; BGP_FUZZ_SEED repeats a run).
BGP_FUZZ_DURATION ?= 10m
bgp-fuzz:
	VIPD_NETNS_TESTS=1 VIPD_BGP_FUZZ_DURATION=$(BGP_FUZZ_DURATION) $(if $(BGP_FUZZ_SEED),VIPD_BGP_FUZZ_SEED=$(BGP_FUZZ_SEED)) \
		$(GO) test -count=1 -v -timeout 0 -run '^TestPeerFuzz$$' ./bgp/

vet: gofmt-check
	$(GO) vet ./...

gofmt-check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'; git ls-files --others --exclude-standard '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }

# vulncheck runs govulncheck (golang.org/x/vuln, pinned) over vipd's code
# against an offline database built from a pinned golang.org/x/vulndb
# module version (its cmd/indexdb over data/osv), and fails on any
# reachable vulnerability that docs/security.md does not list, with its
# reason, under "Accepted vulnerabilities" (internal/vulnpolicy).
# vulncheck-prep builds what it needs into $(VULN_CACHE), once per version:
# the database and the govulncheck binary (per Go toolchain too); .ci/run
# runs it at nice 19 alongside make test. make vulndb-update moves the pin
# to the newest x/vulndb the module proxy has.
VULN_VERSION   := v1.9.0
VULNDB_VERSION := v0.0.0-20261105234957-e22db6528018
LAB_CACHE      ?= $(or $(VIPD_LAB_CACHE),$(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME),$(HOME)/.cache)/vipd-lab)
VULN_CACHE     := $(LAB_CACHE)/vulncheck
VULNDB_CACHE   := $(VULN_CACHE)/vulndb
VULNDB_DIR     := $(VULNDB_CACHE)/$(VULNDB_VERSION)
GOVULNCHECK    := $(VULN_CACHE)/govulncheck-$(VULN_VERSION)-$(GOTOOLCHAIN)/govulncheck
# staticcheck runs honnef.co/go/tools at a pinned version (part of make
# test, alongside the unit tests at nice 19; kept at zero findings). Its
# binary is built once per version and Go toolchain into $(LAB_CACHE) (go
# run would link it again on every run); staticcheck-prep builds only that.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(LAB_CACHE)/staticcheck-$(STATICCHECK_VERSION)-$(GOTOOLCHAIN)/staticcheck
staticcheck: staticcheck-prep
	$(STATICCHECK) ./...
staticcheck-prep: $(STATICCHECK)
$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

vulncheck: vulncheck-prep
	@out=$$(mktemp); \
	$(GOVULNCHECK) -db file://$(VULNDB_DIR) -format json ./... >"$$out" \
		|| { rc=$$?; cat "$$out"; rm -f "$$out"; exit $$rc; }; \
	$(GO) run ./internal/vulnpolicy/cmd/vulnpolicy -policy docs/security.md <"$$out"; rc=$$?; rm -f "$$out"; exit $$rc

vulncheck-prep: $(VULNDB_DIR)/index/db.json $(GOVULNCHECK)

$(GOVULNCHECK):
	GOBIN=$(dir $@) $(GO) install golang.org/x/vuln/cmd/govulncheck@$(VULN_VERSION)

$(VULNDB_DIR)/index/db.json:
	mkdir -p $(VULNDB_CACHE)
	@src=$$($(GO) mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	test -d "$$src/data/osv" || { echo "vulndb: no data/osv in golang.org/x/vulndb@$(VULNDB_VERSION)"; exit 1; }; \
	tmp=$$(mktemp -d $(VULNDB_CACHE)/build-XXXXXX); \
	echo "vulndb: building the offline database of golang.org/x/vulndb@$(VULNDB_VERSION) into $(VULNDB_DIR)"; \
	$(GO) run golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION) -vulns "$$src/data/osv" -out "$$tmp/db" \
		&& rm -rf $(VULNDB_DIR) && mv "$$tmp/db" $(VULNDB_DIR); rc=$$?; rm -rf "$$tmp"; exit $$rc

# vulndb-update pins VULNDB_VERSION to the newest golang.org/x/vulndb (then
# make vulncheck builds its database once).
vulndb-update:
	@v=$$($(GO) list -m -f '{{.Version}}' golang.org/x/vulndb@latest) && test -n "$$v" && \
	sed -i "s/^VULNDB_VERSION := .*/VULNDB_VERSION := $$v/" Makefile && \
	echo "vulndb: pinned golang.org/x/vulndb@$$v (was $(VULNDB_VERSION))"

fmt:
	gofmt -w $$(git ls-files '*.go')

demo: build
	lab/demo.sh

bench: build
	lab/bench.sh

# fence-proof runs lab/fence's TestFenceMembershipCut (the owner loses only
# its membership traffic: both ways, only in, only out) FENCE_RUNS times per
# direction, one go test per direction (its full log in
# $TMPDIR/vipd-fence-proof-DIRECTION.log), and writes each direction's
# per-run numbers into $(FENCE_PROOF) (its section replaced, the others
# kept).
FENCE_RUNS       ?= 20
FENCE_DIRECTIONS ?= symmetric in-only out-only
FENCE_PROOF      ?= docs/fence-proof.md
fence-proof: build
	@failed=; for d in $(FENCE_DIRECTIONS); do \
		log="$${TMPDIR:-/tmp}/vipd-fence-proof-$$d.log"; \
		echo "fence-proof: $$d, $(FENCE_RUNS) runs (log $$log)"; \
		VIPD_NETNS_TESTS=1 VIPD_BIN=$(CURDIR)/$(BIN) VIPD_FENCE_RUNS=$(FENCE_RUNS) VIPD_FENCE_SUMMARY=$(abspath $(FENCE_PROOF)) \
			$(GO) test -count=1 -p 1 -timeout 60m -v -run "^TestFenceMembershipCut$$/^$$d$$" ./lab/fence/ >"$$log" 2>&1 \
			|| failed="$$failed $$d"; \
		grep -E 'cut_test.go:[0-9]+: [a-z-]+( run [0-9]+)?: |^ *--- ' "$$log" | cut -c1-400; \
	done; \
	echo "fence-proof: wrote $(FENCE_PROOF)"; \
	test -z "$$failed" || { echo "fence-proof: FAILED:$$failed"; exit 1; }

# man writes vipd(8), vipctl(8) and vipd.toml(5) (from docs/man, vipctl's
# command tree and docs/configuration.md) and vipctl's bash, zsh and fish
# completions into $(GEN_DIR); the packages install them. The pages carry
# the date of the last commit, so a rebuild gives the same bytes.
GEN_DIR  := dist/gen
DOC_DATE ?= $(shell git log -1 --format=%cs 2>/dev/null || date -u +%F)
man:
	$(GO) run ./cmd/docgen -src docs/man -out $(GEN_DIR) -version '$(VERSION)' -date '$(DOC_DATE)'

# alerts-test checks the alert rules and runs their unit tests (promtool
# comes with the Debian package prometheus).
PROMTOOL ?= promtool
alerts-test:
	cd packaging/prometheus && $(PROMTOOL) check rules vipd-alerts.yml && $(PROMTOOL) test rules vipd-alerts_test.yml

# proto regenerates the committed gRPC code from agent/apipb/vipd.proto.
proto:
	protoc -I agent/apipb --go_out=agent/apipb --go_opt=paths=source_relative \
		--go-grpc_out=agent/apipb --go-grpc_opt=paths=source_relative agent/apipb/vipd.proto

clean:
	rm -rf $(BIN) dist

-include packaging/packages.mk
