#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang with ASan + UBSan) and runs each for
# SECONDS (default 60) from its seed corpus (tests/fuzz/corpus/<target>; new inputs go to a
# scratch copy, the repo is not touched). Prints the executions of each target; exits
# non-zero with the crashing input's path when one crashes, hangs or leaks.
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
seconds=${1:-60}
shift || true
source "$here/env.sh"
build="${MOERT_FUZZ_BUILD_DIR:-$root/build-fuzz}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_safetensors_header fuzz_config_json fuzz_request_line fuzz_tokenizer fuzz_chat_template fuzz_grammar)
command -v clang++-14 > /dev/null || { echo "fuzz: clang++-14 missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
mkdir -p "$build"
if [ ! -f "$build/CMakeCache.txt" ]; then
  # -O1: half the compile time of -O3 (CI builds this from scratch); kernels that ask for -O3 keep it.
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja -DMOERT_FUZZ=ON -DMOERT_BUILD_TESTS=OFF \
    -DMOERT_BUILD_BENCHMARKS=OFF -DMOERT_WITH_CUDA=OFF -DMOERT_WITH_MPI=OFF -DMOERT_PCH=OFF \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" > "$build/fuzz-configure.log" 2>&1 ||
    { cat "$build/fuzz-configure.log" >&2; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > "$build/fuzz-build.log" 2>&1 ||
  { tail -30 "$build/fuzz-build.log" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for target in "${targets[@]}"; do
  mkdir -p "$work/$target"
  log="$work/$target.log"
  if (cd "$work" && "$build/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
        -print_final_stats=1 "$work/$target" "$root/tests/fuzz/corpus/$target" > "$log" 2>&1); then
    runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    printf 'fuzz: %-26s %12s executions in %s s, clean\n' "$target" "$runs" "$seconds"
  else
    status=1
    mkdir -p "$root/build-fuzz-crashes"
    cp "$work"/crash-* "$work"/timeout-* "$work"/leak-* "$work"/oom-* "$root/build-fuzz-crashes/" 2>/dev/null || true
    echo "fuzz: $target FAILED (inputs kept in build-fuzz-crashes/):" >&2
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5 >&2
  fi
done
exit $status
