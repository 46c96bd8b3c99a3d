#!/usr/bin/env bash
# The test command: installs the dependencies, builds everything, and runs every test (unit,
# in-process clusters, real-process clusters, the install/find_package consumer, the header
# checks, the layer check) with CTest, as many tests at a time as there are cores (every test
# is written to pass beside another). Extra arguments go to ctest, e.g. scripts/test.sh -R faults
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@"
