#!/usr/bin/env bash
# deploy/check-build.sh — runs the Dockerfile's build command (deploy/build.sh)
# outside Docker and checks that the binary is static and stamped:
#   file says "statically linked", ldd says "not a dynamic executable",
#   and `gateway version` prints the version given to the build.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
version="lint-deploy-$$"
bin="$work/gateway"

VERSION="$version" OUT="$bin" sh deploy/build.sh

info=$(file -b "$bin")
case $info in
*"statically linked"*) ;;
*) echo "check-build: $bin is not statically linked: $info" >&2; exit 1 ;;
esac

# ldd exits non-zero for a static binary; its message is what counts.
lddout=$(ldd "$bin" 2>&1 || true)
case $lddout in
*"not a dynamic executable"*|*"statically linked"*) ;;
*) echo "check-build: ldd finds dynamic dependencies: $lddout" >&2; exit 1 ;;
esac

out=$("$bin" version)
case $out in
"gateway $version "*) ;;
*) echo "check-build: gateway version printed \"$out\", want the stamped $version" >&2; exit 1 ;;
esac
echo "check-build: static, stamped binary: $info; $out"
