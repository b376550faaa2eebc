# gateway — see README.md.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
BIN      := bin/gateway

.PHONY: all build run test test-short lint fuzz bench clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/gateway

# A working gateway on the built-in defaults: memory store, the example
# rules and a demo upstream. Try: curl -i -H 'X-App-Id: app-1' localhost:8080/v1/user/42
run:
	$(GO) run ./cmd/gateway serve --demo-upstream --log-format text

# What CI runs (.ci/run): formatting, vet, staticcheck, and every test with
# the race detector, fuzz seed corpora included.
test: lint
	$(GO) test -race -count=1 ./...

test-short:
	$(GO) test -count=1 ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

FUZZTIME ?= 30s
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzNormalize -fuzztime=$(FUZZTIME) ./internal/trie/
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./internal/config/

bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./internal/...

clean:
	rm -rf bin
