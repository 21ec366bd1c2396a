#!/usr/bin/env bash
# Packs, here and before any device call, everything the device check carries
# (docs/gpu-first-light.md), in .device/ of the repository (ignored by git):
#   .device/bundle.tar.xz bundle/bin: moert, the cuda-labelled tests and the CUDA benchmarks,
#                         built for MOERT_DEVICE_ARCHS (default 90a: H100/H200) without MPI,
#                         stripped (NCCL and cuBLASLt are opened at run time on the device);
#                         bundle/lib: the shared libraries they load beyond glibc and the
#                         GPU driver;
#   .device/refs/*.tar.xz the shared references (their checkpoints and float64 logits) that
#                         fit the call, in MOERT_DEVICE_REFS order;
#   .device/manifest.json the commit, the archs, the byte counts, the references carried and
#                         those left out.
# The device tool sends the checkout the session started in plus the carried paths, at most
# 64 MiB together: the references are added while the working tree (tracked and untracked,
# not ignored files), the bundle and the references stay under MOERT_DEVICE_CARRY_MB (63).
# Run it in that checkout.
#
# usage: scripts/device-pack.sh [--no-build]
#   --no-build   reuse the binaries of an earlier pack build (build-device-pack/)
# Knobs: MOERT_DEVICE_ARCHS (90a), MOERT_DEVICE_CARRY_MB (63), MOERT_DEVICE_REFS (the order
# below), MOERT_SHARED_DIR (../shared), MOERT_DEVICE_JOBS (nproc).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build_first=1
for arg in "$@"; do
  case "$arg" in
    --no-build) build_first=0 ;;
    *) echo "device-pack.sh: unknown argument '$arg' (expected --no-build)" >&2; exit 2 ;;
  esac
done
archs="${MOERT_DEVICE_ARCHS:-90a}"
jobs="${MOERT_DEVICE_JOBS:-$(nproc)}"
carry_bytes=$(( ${MOERT_DEVICE_CARRY_MB:-63} * 1024 * 1024 ))
shared="${MOERT_SHARED_DIR:-$repo/../shared}"
# Smallest first among the cases whose code paths differ (MLA + FP8 block scales, sinks +
# sliding window + MXFP4, DSA, Gated DeltaNet, MTP), then the larger GQA cases.
refs_order="${MOERT_DEVICE_REFS:-deepseekv3-tiny-fp8 gptoss-tiny-mxfp4 glm5dsa-tiny qwen35moe-tiny qwen3next-tiny
  deepseekv3-tiny-mtp qwen3moe-tiny deepseekv3-tiny gptoss-tiny glm4moe-tiny mixtral-tiny qwen2moe-tiny}"
binaries="launch/moert tests/runtime/backend/backend_conformance_cuda_test tests/launch/cli_cuda_test
  runtime/backend/cuda/bench_cuda_decode_attention runtime/comm/bench_nccl_round_trip runtime/backend/cuda/bench_cuda_linear"
build="$repo/build-device-pack"
pack="$repo/.device"
t0=$(date +%s)

if [ "$build_first" = 1 ]; then
  [ -f "$repo/scripts/env.sh" ] && source "$repo/scripts/env.sh"
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERT_WITH_CUDA=ON -DMOERT_CUDA_ARCHS="$archs" \
    -DMOERT_WITH_MPI=OFF -DMOERT_BUILD_BENCHMARKS=OFF > /dev/null
  cmake --build "$build" -j"$jobs" --target moert backend_conformance_cuda_test cli_cuda_test \
    bench_cuda_decode_attention bench_nccl_round_trip bench_cuda_linear
fi
for binary in $binaries; do
  [ -f "$build/$binary" ] || { echo "device-pack.sh: $build/$binary is missing (build without --no-build)" >&2; exit 1; }
done

rm -rf "$pack"
mkdir -p "$pack/bundle/bin" "$pack/bundle/lib" "$pack/refs"
for binary in $binaries; do cp "$build/$binary" "$pack/bundle/bin/"; done
strip "$pack"/bundle/bin/*
# Everything the binaries load but glibc's own libraries and the driver's libcuda.
for binary in "$pack"/bundle/bin/*; do
  ldd "$binary" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libcuda|ld-linux[^/]*)\.so' |
  while read -r library; do cp -L "$library" "$pack/bundle/lib/"; done

# One archive: the binaries' CUDA code compresses about five times (21 MB to 4 MB).
tar -C "$pack" -cf - bundle | xz -6 -T"$jobs" > "$pack/bundle.tar.xz"
rm -rf "$pack/bundle"

# The working tree as the device tool counts it, then the references that still fit.
tree_bytes=$(git -C "$repo" ls-files -z -co --exclude-standard | (cd "$repo" && xargs -0 -r stat -c %s 2> /dev/null) |
  awk '{ s += $1 } END { print s + 0 }')
bundle_bytes=$(stat -c %s "$pack/bundle.tar.xz")
left=$(( carry_bytes - tree_bytes - bundle_bytes - 4096 ))
cache="$build/refs-xz"
mkdir -p "$cache"
carried=() left_out=()
for name in $refs_order; do
  [ -d "$shared/reference/$name" ] || { left_out+=("$name (not in $shared/reference)"); continue; }
  raw=$(du -sb "$shared/reference/$name" | cut -f1)
  if [ $(( raw / 2 )) -gt "$left" ]; then  # xz keeps over half of these random weights
    left_out+=("$name ($(( raw / 1024 / 1024 )) MiB uncompressed, $(( left / 1024 / 1024 )) MiB left)"); continue
  fi
  if [ ! -f "$cache/$name.tar.xz" ]; then  # the shared references do not change: compressed once
    tar -C "$shared/reference" -cf - "$name" | xz -6 -T"$jobs" > "$cache/$name.tar.xz.tmp"
    mv "$cache/$name.tar.xz.tmp" "$cache/$name.tar.xz"
  fi
  size=$(stat -c %s "$cache/$name.tar.xz")
  if [ "$size" -le "$left" ]; then
    cp "$cache/$name.tar.xz" "$pack/refs/"
    left=$(( left - size )); carried+=("$name")
  else
    left_out+=("$name ($(( size / 1024 / 1024 )) MiB compressed, $(( left / 1024 / 1024 )) MiB left)")
  fi
done
refs_bytes=$(du -sb "$pack/refs" | cut -f1)

commit=$(git -C "$repo" rev-parse --short HEAD)
git -C "$repo" diff --quiet HEAD -- 2> /dev/null || commit="$commit+dirty"
python3 - "$pack/manifest.json" "$commit" "$archs" "$tree_bytes" "$bundle_bytes" "$refs_bytes" "$carry_bytes" \
  "${carried[*]:-}" "$(printf '%s\n' "${left_out[@]:-}")" "$build" "$binaries" <<'PY'
import datetime, json, os, sys
path, commit, archs, tree, bundle, refs, limit, carried, left_out, build, names = sys.argv[1:12]
binaries = {os.path.basename(name): os.path.getsize(os.path.join(build, name)) for name in names.split()}  # unstripped
manifest = {"commit": commit, "packed": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "cuda_archs": archs, "binaries_unstripped": binaries,
            "refs": carried.split(), "refs_left_out": [line for line in left_out.split("\n") if line],
            "bytes": {"tree": int(tree), "bundle": int(bundle), "refs": int(refs),
                      "total": int(tree) + int(bundle) + int(refs), "limit": int(limit)}}
json.dump(manifest, open(path, "w"), indent=1)
PY
echo "device pack in $(( $(date +%s) - t0 )) s (commit $commit, sm_$archs):"
echo "  working tree $(( tree_bytes / 1024 / 1024 )) MiB + bundle $(( bundle_bytes / 1024 / 1024 )) MiB" \
  "+ references $(( refs_bytes / 1024 / 1024 )) MiB = $(( (tree_bytes + bundle_bytes + refs_bytes) / 1024 / 1024 )) MiB" \
  "of $(( carry_bytes / 1024 / 1024 )) MiB"
echo "  references carried: ${carried[*]:-none}"
[ "${#left_out[@]}" -gt 0 ] && printf '  left out: %s\n' "${left_out[@]}"
echo "device call: carry [\".device\"], timeout_s 540, command: bash scripts/device-check.sh"
