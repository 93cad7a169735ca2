# tollgate: one Go module per top-level folder, tied together by go.work. A
# module's tests live beside its code, except where they need what its users
# must not get (a peer library, SQL drivers, a reference server): those are
# in the nested test-only modules core/test, sqlquota/test and rls/test
# (README, "Layout").
GO        ?= go
# the published modules are listed once, in versions.yaml; then the unpublished ones
PUBLISHED := $(shell sed -n 's/^  - \([a-z0-9/._-]*\)$$/\1/p' versions.yaml)
MODULES   := $(PUBLISHED) examples bench tools
TEST_MODULES := $(patsubst %/go.mod,%,$(wildcard $(addsuffix /test/go.mod,$(MODULES))))
ALL_MODULES  := $(MODULES) $(TEST_MODULES)
# in the workspace, core/... also matches core/test/...: go lists each package once
PKGS      := $(addprefix github.com/tollgate-go/tollgate/,$(addsuffix /...,$(ALL_MODULES)))
TESTFLAGS ?= -race -shuffle=on -count=1 -timeout 12m
BENCHFLAGS ?= -run '^$$' -bench . -benchmem -count 5
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: image chart release release-sync consumer proxy apidiff help test lint bench bench/load bench/http bench/script demo fuzz linearize tidy fmt check-redis test-fleet test-settle $(addprefix test/,$(ALL_MODULES)) bench/rls bench/rlqs $(addprefix bench/,$(filter-out rls,$(ALL_MODULES)))

help: ## list the targets
	@grep -hE '^([a-zA-Z/%_-]+|\$$\(addprefix [^)]*\)\): [a-z]+/%):.*## ' $(MAKEFILE_LIST) \
		| sed -E 's/^\$$\(addprefix [^)]*\)\): //; s/:.*## /\t/' | expand -t 16

# DEMOFLAGS are extra flags for the demo (go run ./replicas -h lists them),
# e.g. make demo DEMOFLAGS='-replicas 8'; empty, it runs as the README says.
DEMOFLAGS ?=

demo: ## the replicas demo: in-process limiters vs the shared bucket (embedded Redis unless REDIS_URL is set)
	cd examples && $(GO) run ./replicas $(DEMOFLAGS)

# run_tests runs go test -json on the packages $(1) through tools/testsum,
# which prints what go test prints (result lines, every failure's whole
# output), then each skipped test with its reason and a count, so a skip is
# seen without -v. The exit status is go test's, else the summariser's.
run_tests = tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(GO) build -o "$$tmp/testsum" ./tools/testsum && \
	echo "$(GO) test $(TESTFLAGS) -json $(1) | testsum" && \
	{ $(GO) test $(TESTFLAGS) -json $(1); echo $$? > "$$tmp/rc"; } | "$$tmp/testsum"; sum=$$?; \
	rc=$$(cat "$$tmp/rc" 2>/dev/null || echo 1); if [ "$$rc" -ne 0 ]; then exit "$$rc"; fi; exit "$$sum"

test: check-redis ## every module, with -race, against a real Redis; lists the skipped tests at the end
	@$(call run_tests,$(PKGS))

$(addprefix test/,$(ALL_MODULES)): test/%: check-redis ## one module and its test-only module if it has one, e.g. make test/core
	@$(call run_tests,github.com/tollgate-go/tollgate/$*/...)

DURATION ?= 5m
LINEARIZE_TIMEOUT ?= 3h

linearize: check-redis ## the linearizability check under faults, repeated for DURATION (default 5m), e.g. make linearize DURATION=30m
	cd core/test && LINEARIZE_DURATION=$(DURATION) $(GO) test -race -count=1 -timeout $(LINEARIZE_TIMEOUT) -v ./linearize

FLEET_REQUESTS ?= 100000

test-fleet: check-redis ## the concurrency must-show at full size: 4 replica processes x 64 goroutines, N = 8, FLEET_REQUESTS requests (default 100000)
	cd core/test && TOLLGATE_FLEET_REQUESTS=$(FLEET_REQUESTS) $(GO) test -count=1 -timeout 30m -run '^TestConcurrencyFleet$$' -v .

SETTLE_REQUESTS ?= 10000

test-settle: check-redis ## the reserve-then-settle bound at full size: 4 replica processes per pattern, 64 clients, SETTLE_REQUESTS requests (default 10000) per pattern
	cd examples/e2e && TOLLGATE_SETTLE_REQUESTS=$(SETTLE_REQUESTS) $(GO) test -count=1 -timeout 30m -run '^TestSettleBound$$' -v .

check-redis: ## fail fast, and say why, when no real Redis can be had
	@if [ -n "$$REDIS_URL" ]; then exit 0; fi; \
	if command -v redis-server >/dev/null 2>&1; then exit 0; fi; \
	echo "make test needs a real Redis: set REDIS_URL or put redis-server on PATH" >&2; exit 1

# FUZZTIME is a count of calls (Nx) rather than a duration: Go 1.26's fuzz
# coordinator can fail a target that found nothing with a bare "context
# deadline exceeded" as a duration's deadline fires (golang/go#75804, fixed
# in Go 1.27); a count has no deadline, and a busy machine only takes longer.
FUZZTIME ?= 40000x
FUZZ_TARGETS := core/keys:FuzzKeys core/render:FuzzQuoteSFString core/test:FuzzCheck core/config:FuzzParse

fuzz: check-redis ## run every fuzz target for FUZZTIME calls (default 40000x, a few seconds each) from its committed seed corpus
	@for t in $(FUZZ_TARGETS); do \
		dir=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$dir $$name ($(FUZZTIME))"; \
		(cd $$dir && $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) .) || exit 1; \
	done

lint: ## gofmt, go vet, staticcheck, go.mod files follow versions.yaml, API check
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	$(GO) run ./tools/release sync -check
	$(GO) run ./tools/release apidiff

RELEASE := $(GO) run ./tools/release
RETAG ?=

release: ## cut a release: make release VERSION=v0.x.y (docs/releasing.md)
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=v0.x.y" >&2; exit 2; }
	$(RELEASE) cut -version $(VERSION) $(if $(RETAG),-retag)

release-sync: ## after adding a module to versions.yaml or merging: go.mod files and go.work follow it
	$(RELEASE) sync

# ONLY narrows the consumer check to some published modules:
# make consumer ONLY=ginlimit,core
ONLY ?=

consumer: ## play a user: go get, build and install each published module from a proxy built from the tree (ONLY=m1,m2)
	$(RELEASE) consumer $(if $(ONLY),-only $(ONLY))

# DIR is where make proxy writes the module proxy (kept).
DIR ?=

proxy: ## write the module proxy of the tree to DIR and keep it, to go get the modules before a release (README)
	@test -n "$(DIR)" || { echo "usage: make proxy DIR=/path/to/folder" >&2; exit 2; }
	$(RELEASE) proxy -dir $(DIR)

apidiff: ## incompatible API changes of the published modules since the last release
	$(RELEASE) apidiff

LOADFLAGS ?= -count 5

bench: check-redis ## Go benchmarks of every module, then the side-by-side load driver (docs/benchmarks.md)
	$(GO) test $(BENCHFLAGS) $(PKGS)
	cd bench && $(GO) run ./loadbench $(LOADFLAGS)

bench/load: check-redis ## only the load driver: tollgate vs redis_rate vs redis-benchmark, one Redis, one run
	cd bench && $(GO) run ./loadbench $(LOADFLAGS)

# SCRIPTFLAGS are the instruction counter's flags (cd bench && go run ./scriptcost -h).
SCRIPTFLAGS ?= -calls 20000 -rounds 3 -svg ../docs/img/script-instructions.svg

bench/script: ## the script's instructions per call inside EVALSHA against the floor script, counted by callgrind (docs/benchmarks.md)
	@command -v redis-server >/dev/null || { echo "make bench/script needs redis-server on PATH" >&2; exit 1; }
	@command -v valgrind >/dev/null || (apt-get update && apt-get install -y valgrind)
	cd bench && $(GO) run ./scriptcost $(SCRIPTFLAGS)

# HTTPFLAGS are the HTTP driver's flags (cd bench && go run ./httpbench -h);
# HTTPDELAYFLAGS those of its second run, with Redis behind a link that
# delays each direction by 250 µs. Both draw their pictures into docs/img.
# Both pin wrk and the driver to core 0, the services and Redis to core 1
# (taskset), as bench/rls does; clear HTTPPIN to leave them unpinned.
HTTPPIN ?= -load-cpu 0 -service-cpu 1
HTTPFLAGS ?= -count 5 -duration 2s -svg ../docs/img $(HTTPPIN)
HTTPDELAYFLAGS ?= -count 5 -duration 2s -conns 2,16,64,256 -delay 250us -svg ../docs/img $(HTTPPIN)

# An explicit rule, not one of the bench/<module> pattern targets below
# (those run a module's Go benchmarks); it needs wrk, installed from Debian when missing.
bench/http: ## the Gin service under wrk: no limiter, one GET, tollgate (and with leases), ulule/limiter, redis_rate; then with Redis 250 µs away (docs/benchmarks.md)
	@command -v redis-server >/dev/null || { echo "make bench/http needs redis-server on PATH" >&2; exit 1; }
	@command -v wrk >/dev/null || (apt-get update && apt-get install -y wrk)
	cd bench && $(GO) run ./httpbench $(HTTPFLAGS)
	cd bench && $(GO) run ./httpbench $(HTTPDELAYFLAGS)

# RLSFLAGS are the side-by-side driver's flags (cd bench && go run ./rlsbench -h).
RLSFLAGS ?= -reps 3 -duration 4s -svg ../docs/img

# An explicit rule (not the rls module's Go benchmarks): tollgate-rls and
# envoyproxy/ratelimit under ghz, pinned with taskset; both tools must be
# installed at their pinned versions (the driver says how when one is missing).
bench/rls: ## tollgate-rls beside envoyproxy/ratelimit under ghz, each with its own Redis (docs/benchmarks.md)
	cd bench && $(GO) run ./rlsbench $(RLSFLAGS)

bench/rlqs: ## one bucket through ShouldRateLimit and through RLQS clients: admissions, fair shares, script calls and Redis CPU per 1,000 requests (docs/benchmarks.md)
	@command -v redis-server >/dev/null || { echo "make bench/rlqs needs redis-server on PATH" >&2; exit 1; }
	cd rls/test && TOLLGATE_BENCH_RLQS=1 $(GO) test -run '^TestRLQSAgainstShouldRateLimit$$' -count=1 -v .

$(addprefix bench/,$(filter-out rls,$(ALL_MODULES))): bench/%: check-redis
	cd $* && $(GO) test $(BENCHFLAGS) github.com/tollgate-go/tollgate/$*/...

# the image's reference when pushed, e.g. make image PUSH=ghcr.io/acme/tollgate-rls:v0.3.0
PUSH ?=
image: ## the tollgate-rls image, no Docker daemon needed: OCI layout dist/tollgate-rls, tarball dist/tollgate-rls.tar (PUSH=ref also pushes it)
	$(GO) run ./tools/image -out dist/tollgate-rls -tar dist/tollgate-rls.tar $(if $(PUSH),-push $(PUSH))

chart: ## helm lint and helm template of charts/tollgate-rls (helm on PATH)
	helm lint --strict charts/tollgate-rls --set redis.url=redis://redis:6379/0
	helm template tollgate-rls charts/tollgate-rls --set redis.url=redis://redis:6379/0 >/dev/null

tidy: ## go mod tidy in every module, test modules included
	@for m in $(ALL_MODULES); do (cd $$m && $(GO) mod tidy) || exit 1; done

fmt: ## gofmt -w
	gofmt -w $(MODULES)
