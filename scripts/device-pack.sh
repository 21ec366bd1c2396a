#!/usr/bin/env bash
# Packs what the device check carries to a GPU machine that has no build dependencies
# (docs/cuda-backend.md, "Device check"), in .device/ (ignored by git):
#   .device/bundle/bin   moert, the cuda-labelled tests, the attention and NCCL benchmarks,
#                        built here for sm_90a (H100/H200) without MPI (NCCL is opened at
#                        run time: the device machine's, see device-check.sh);
#   .device/bundle/lib   the shared libraries they need beyond glibc and the GPU driver;
#   .device/refs-N/      the shared references as .tar.xz, chunks of at most
#                        MOERT_DEVICE_CHUNK_MB (30) each, so that every call stays under the
#                        device tool's 64 MiB (the repository itself takes ~26 MB).
# Each device call carries one refs-N (the first also .device/bundle) and runs
# `bash scripts/device-check.sh --stage`; the last runs `bash scripts/device-check.sh`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
source "$here/env.sh"
archs="${MOERT_DEVICE_ARCHS:-90a}"
build="$repo/build-device-pack"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERT_CUDA_ARCHS="$archs" -DMOERT_WITH_MPI=OFF \
  -DMOERT_BUILD_BENCHMARKS=OFF > /dev/null
cmake --build "$build" -j"$(nproc)" --target moert backend_conformance_cuda_test cli_cuda_test \
  bench_cuda_decode_attention bench_nccl_round_trip bench_cuda_linear

rm -rf "$repo/.device"
mkdir -p "$repo/.device/bundle/bin" "$repo/.device/bundle/lib"
for binary in launch/moert tests/runtime/backend/backend_conformance_cuda_test tests/launch/cli_cuda_test \
              runtime/backend/cuda/bench_cuda_decode_attention runtime/comm/bench_nccl_round_trip runtime/backend/cuda/bench_cuda_linear; do
  cp "$build/$binary" "$repo/.device/bundle/bin/"
done
strip "$repo"/.device/bundle/bin/*
# Everything the binaries load but glibc's own libraries and the driver's libcuda.
for binary in "$repo"/.device/bundle/bin/*; do
  ldd "$binary" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libcuda|ld-linux[^/]*)\.so' |
  while read -r library; do cp -L "$library" "$repo/.device/bundle/lib/"; done

shared="${MOERT_SHARED_DIR:-$repo/../shared}"
chunk_bytes=$(( ${MOERT_DEVICE_CHUNK_MB:-30} * 1000 * 1000 ))
mkdir -p "$repo/.device/packed"
for ref in "$shared"/reference/*/; do
  name=$(basename "$ref")
  tar -C "$shared/reference" -cf - "$name" | xz -6 -T"$(nproc)" > "$repo/.device/packed/$name.tar.xz"
done
chunk=1 used=0
mkdir -p "$repo/.device/refs-$chunk"
for packed in $(ls -S "$repo"/.device/packed/*.tar.xz); do
  size=$(stat -c %s "$packed")
  if [ "$used" -gt 0 ] && [ $((used + size)) -gt "$chunk_bytes" ]; then
    chunk=$((chunk + 1)) used=0
    mkdir -p "$repo/.device/refs-$chunk"
  fi
  mv "$packed" "$repo/.device/refs-$chunk/"
  used=$((used + size))
done
rmdir "$repo/.device/packed"
du -sh "$repo"/.device/bundle "$repo"/.device/refs-*
