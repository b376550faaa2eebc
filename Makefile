# gateway — see README.md.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
BIN      := bin/gateway

.PHONY: all build run deps test test-short lint lint-deploy fuzz bench soak gobench clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/gateway

# A working gateway: memory store, the demo
# rules and a demo upstream. Try: curl -i -H 'X-App-Id: app-1' localhost:8080/v1/user/42
run:
	$(GO) run ./cmd/gateway serve --demo-upstream --config configs/demo-rules.yaml --log-format text

# What CI runs (.ci/run): formatting, vet, staticcheck, the deploy checks,
# and every test with the race detector, fuzz seed corpora included. The
# timeout bounds a hung test binary: on a loaded 2-core machine
# internal/proxy and internal/limit/redisstore take 8-9 minutes each,
# close to go test's default of 10.
test: deps lint lint-deploy
	$(GO) test -race -count=1 -timeout 30m ./...

# Installs what the tests need beyond Go, when missing: promtool,
# redis-server, etcd, ZooKeeper, chromium, curl and the deploy linters
# (.ci/deps says why each).
deps:
	@bash .ci/deps

test-short:
	$(GO) test -short -count=1 ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# The deployment files (docs/operations.md, "Deployment"): Prometheus scrape configs
# and alerting rules (with their unit tests); the Dockerfile's build command
# (deploy/build.sh) run here, its binary checked static and stamped; the
# Compose file, every YAML file and every shell script; the Kubernetes
# manifests when kubectl is at hand. deploy/deploy_test.go checks the rest
# (Dockerfile stages, manifests, Compose, systemd unit) against the gateway.
SHELL_SCRIPTS = $(shell find . -name '*.sh' -not -path './.git/*') .ci/run .ci/deps
lint-deploy:
	promtool check config deploy/prometheus/prometheus.yml
	promtool check config deploy/compose/prometheus.yml
	promtool check rules deploy/prometheus/*.rules.yml
	cd deploy/prometheus && promtool test rules *.rules.test.yml
	bash deploy/check-build.sh
	docker-compose -f deploy/docker-compose.yaml config -q
	yamllint -s deploy configs .yamllint
	shellcheck $(SHELL_SCRIPTS)
	@if command -v kubectl >/dev/null; then kubectl kustomize deploy/k8s >/dev/null && echo "kubectl kustomize deploy/k8s: ok"; fi

FUZZTIME ?= 30s
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzNormalize -fuzztime=$(FUZZTIME) ./internal/trie/
	$(GO) test -run='^$$' -fuzz=FuzzMatch -fuzztime=$(FUZZTIME) ./internal/trie/
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./internal/config/
	$(GO) test -run='^$$' -fuzz='^FuzzParseXML$$' -fuzztime=$(FUZZTIME) ./internal/config/
	$(GO) test -run='^$$' -fuzz=FuzzClientIP -fuzztime=$(FUZZTIME) ./internal/proxy/
	$(GO) test -run='^$$' -fuzz=FuzzAppID -fuzztime=$(FUZZTIME) ./internal/proxy/
	$(GO) test -run='^$$' -fuzz=FuzzReplayLine -fuzztime=$(FUZZTIME) ./internal/replay/

# The gateway against nginx and haproxy (installs them and wrk when missing);
# results go to bench/results/. See bench/run.sh for the knobs.
bench:
	bash bench/run.sh

# The gateway for DURATION (default 10m) under mixed traffic and rule
# rewrites; fails on an unexpected status, a rule write not taken as it
# should be, or goroutine growth. Report in bench/results/soak-*.md.
soak:
	bash bench/soak/run.sh

# The Go benchmarks of the hot paths.
gobench:
	$(GO) test -run='^$$' -bench=. -benchmem ./internal/...

clean:
	rm -rf bin
