#!/bin/sh
# deploy/build.sh — the gateway's release build: a static binary (no cgo),
# without local paths (-trimpath), the version stamped into main.version so
# that `gateway version` and the gateway_build_info metric show it.
#
# The Dockerfile's build stage runs exactly this script, and so does
# `make lint-deploy` (deploy/check-build.sh), which checks that the result is
# static, so the image's build command is tested on machines without Docker.
#
#   VERSION=v1.2.3 OUT=bin/gateway sh deploy/build.sh
set -eu
VERSION=${VERSION:-dev}
OUT=${OUT:-bin/gateway}
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o "${OUT}" ./cmd/gateway
