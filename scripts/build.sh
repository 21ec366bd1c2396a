#!/usr/bin/env bash
# Configures (once) and builds moert into $MOERT_BUILD_DIR (default ./build). Extra
# arguments go to CMake, e.g. -DMOERT_WITH_CUDA=OFF.
set -euo pipefail
source "$(dirname "$0")/env.sh"
if [ ! -f "$MOERT_BUILD_DIR/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S "$MOERT_ROOT" -B "$MOERT_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$MOERT_BUILD_DIR" --parallel "$(nproc)"
