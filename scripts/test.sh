#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every CTest test.
#   bash scripts/test.sh              the suite (./build)
#   bash scripts/test.sh --sanitize   the cpu-labelled tests in an ASan + UBSan build (./build-sanitize)
# Under CI=true (.ci/run) the plain suite runs, then a short run of every fuzz target
# (scripts/fuzz.sh), then the sanitizer suite (MOERT_CI_SANITIZE=0 skips it).
set -euo pipefail
here="$(dirname "$0")"
bash "$here/install-deps.sh"
if [ "${1:-}" = "--sanitize" ]; then
  shift
  export MOERT_BUILD_DIR="${MOERT_SANITIZE_BUILD_DIR:-$(cd "$here/.." && pwd)/build-sanitize}"
  # Benchmarks are not tests; CUDA is compile-only here and does not need a second check.
  # -O1 (AddressSanitizer's advice) compiles in half the time of -O3; kernels that ask for -O3
  # keep it.
  bash "$here/build.sh" -DMOERT_SANITIZE=ON -DMOERT_BUILD_BENCHMARKS=OFF -DMOERT_WITH_CUDA=OFF \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG"
  source "$here/env.sh"
  cd "$MOERT_BUILD_DIR"
  # detect_leaks: the thread pool's workers and MPI keep allocations alive until exit on purpose.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  exec ctest --output-on-failure --timeout 1800 -j "$(nproc)" -L cpu "$@"
fi
bash "$here/build.sh"
source "$here/env.sh"
(cd "$MOERT_BUILD_DIR" && ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@")
if [ "${CI:-}" = "true" ]; then
  bash "$here/fuzz.sh" "${MOERT_CI_FUZZ_SECONDS:-20}"
  if [ "${MOERT_CI_SANITIZE:-1}" = "1" ]; then bash "$here/test.sh" --sanitize; fi
fi
