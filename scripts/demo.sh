#!/usr/bin/env bash
# The payment demo, from a fresh Debian 12 machine: installs the packages, builds idem, runs a
# card payment that is retried every way a real one is (lost reply, bank timeout, a worker that
# dies mid-charge, concurrent duplicates, a declined card) and checks that the bank charged
# each request exactly once; then lists the store with `idem dump`.
# IDEM_JOBS sets build parallelism (default 2).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs="${IDEM_JOBS:-2}"

scripts/install-deps.sh

echo "=== building (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$jobs" --target payment_example idem_tool

store="build/demo-store"
rm -rf "$store"

echo
echo "=== running build/examples/payment $store"
build/examples/payment "$store"

echo
echo "=== build/tools/idem dump $store --format table"
build/tools/idem dump "$store" --format table
