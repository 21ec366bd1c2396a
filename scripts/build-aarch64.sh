#!/usr/bin/env bash
# Cross-builds moert for aarch64 into BUILD_DIR (default build-arm64), without MPI, and
# leaves it ready for `ctest -L cpu -LE mpi` under qemu-aarch64 (docs/environment.md).
# Installs what is missing: the cross compiler, qemu-user and the arm64 multiarch libraries.
# Never installs libopenmpi-dev:arm64: it would replace this machine's mpirun.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${1:-build-arm64}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$PWD/$BUILD_DIR" ;; esac

need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
[ -e /usr/lib/aarch64-linux-gnu/libboost_program_options.so ] || need+=(libboost-program-options-dev:arm64)
[ -e /usr/lib/aarch64-linux-gnu/libgtest.a ] || need+=(libgtest-dev:arm64)
[ -e /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake ] || need+=(nlohmann-json3-dev)
# The tokenizer's PCRE2 and utf8proc (multiarch: they install beside the host's).
[ -e /usr/lib/aarch64-linux-gnu/pkgconfig/libpcre2-8.pc ] || need+=(libpcre2-dev:arm64)
[ -e /usr/lib/aarch64-linux-gnu/pkgconfig/libutf8proc.pc ] || need+=(libutf8proc-dev:arm64)
command -v cmake >/dev/null || need+=(cmake)
command -v ccache >/dev/null || need+=(ccache)
if [ ${#need[@]} -gt 0 ]; then
  echo "build-aarch64: installing ${need[*]}"
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

cmake -S "$ROOT" -B "$BUILD_DIR" \
  -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DMOERT_WITH_MPI=OFF -DMOERT_WITH_CUDA=OFF -DMOERT_BUILD_BENCHMARKS=OFF -DMOERT_PCH=OFF
cmake --build "$BUILD_DIR" -j"$(nproc)"
echo "build-aarch64: built in $BUILD_DIR; run: (cd $BUILD_DIR && ctest -L cpu -LE mpi)"
