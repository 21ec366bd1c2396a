#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every CTest test.
set -euo pipefail
here="$(dirname "$0")"
bash "$here/install-deps.sh"
bash "$here/build.sh"
source "$here/env.sh"
cd "$MOERT_BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
