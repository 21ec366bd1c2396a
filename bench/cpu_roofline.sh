#!/usr/bin/env bash
# CPU roofline of decode (issue 18, docs/perf/cpu-roofline.md): in one run on one machine state,
#   * the streaming read bandwidth (bench_read_bandwidth, the same threads),
#   * the weight bytes one decode token reads in each format (attention, dense and shared
#     weights, top_k / num_experts of the routed experts, the LM head; not the embedding,
#     of which one row is read),
#   * `moert bench` batch-1 decode, 64-token prefill and 32-sequence decode of BF16, FP8, NVFP4
#     and MXFP4 copies of one model (medians of the repeats), the FP4 ones also with
#     `--fp4-activations int8` (rows nvfp4+int8, mxfp4+int8; docs/quant-formats.md §5b) and FP8
#     also with `--fp8-activations bf16` (row fp8+bf16; §5e) and BF16 with `--bf16-activations
#     bf16` (row bf16+bf16; §5f),
# and the ratios the goals are stated in: bandwidth used by batch-1 decode, each format's
# decode rate over BF16's, prefill over decode, 32 sequences over 1.
#   bash bench/cpu_roofline.sh [threads=2] [preset=large] [repeats=3] [output_len=32]
set -euo pipefail
source "$(dirname "$0")/../scripts/env.sh"
threads=${1:-2}
preset=${2:-large}
repeats=${3:-3}
output_len=${4:-32}
moert="$MOERT_BUILD_DIR/launch/moert"
bandwidth_bin="$MOERT_BUILD_DIR/core/cpu/bench_read_bandwidth"
[ -x "$moert" ] && [ -x "$bandwidth_bin" ] || { echo "cpu_roofline: build first (scripts/build.sh)" >&2; exit 1; }
work="$MOERT_BUILD_DIR/bench-roofline-$preset"
mkdir -p "$work"
[ -f "$work/bf16/config.json" ] || "$moert" make-model --arch qwen3_moe --preset "$preset" --seed 1 --out "$work/bf16" > /dev/null
for format in fp8 nvfp4 mxfp4; do
  [ -f "$work/$format/config.json" ] || "$moert" quantize --model "$work/bf16" --format "$format" --out "$work/$format" > /dev/null
done

# Bytes of the weights one decode token reads (safetensors headers only).
bytes_per_token() {
  /usr/bin/python3 - "$1" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
cfg = json.load(open(os.path.join(d, "config.json")))
experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
top_k = cfg.get("num_experts_per_tok")
total = 0.0
for name in sorted(os.listdir(d)):
    if not name.endswith(".safetensors"):
        continue
    with open(os.path.join(d, name), "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    for tensor, info in header.items():
        if tensor == "__metadata__" or "embed_tokens" in tensor:
            continue
        nbytes = info["data_offsets"][1] - info["data_offsets"][0]
        total += nbytes * (top_k / experts if ".mlp.experts." in tensor else 1.0)
print(int(total))
PY
}

# The median output_tok_s / input_tok_s of one `moert bench` configuration.
bench_field() {  # model field batch input_len output_len [extra flags]
  "$moert" bench --model "$1" --batch-sizes "$3" --num-requests $(($3 == 1 ? 4 : 2 * $3)) --input-len "$4" \
    --output-len "$5" --threads "$threads" --warmup 1 --repeats "$repeats" ${6:-} | grep '^bench:' |
    grep -o "$2=[0-9.]*" | cut -d= -f2
}

bandwidth=$("$bandwidth_bin" "$threads" 1024 5 | grep -o 'read_bandwidth_gb_s=[0-9.]*' | cut -d= -f2)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $threads threads, read bandwidth $bandwidth GB/s"
printf '%-11s %12s %12s %10s %12s %12s %12s\n' format "MB/token" "decode tok/s" "bandwidth" "prefill tok/s" "32-seq tok/s" "vs bf16"
declare -A decode
for format in bf16 bf16+bf16 fp8 fp8+bf16 nvfp4 nvfp4+int8 mxfp4 mxfp4+int8; do
  dir="$work/${format%+*}"
  case "$format" in
    *+int8) extra="--fp4-activations int8" ;;
    bf16+bf16) extra="--bf16-activations bf16" ;;
    *+bf16) extra="--fp8-activations bf16" ;;
    *) extra="" ;;
  esac
  bytes=$(bytes_per_token "$dir")
  decode[$format]=$(bench_field "$dir" output_tok_s 1 8 "$output_len" "$extra")
  prefill=$(bench_field "$dir" input_tok_s 1 64 1 "$extra")
  batched=$(bench_field "$dir" output_tok_s 32 8 "$output_len" "$extra")
  awk -v f="$format" -v b="$bytes" -v d="${decode[$format]}" -v p="$prefill" -v s="$batched" -v bw="$bandwidth" \
      -v base="${decode[bf16]}" 'BEGIN {
        printf "%-11s %12.1f %12.1f %9.0f%% %12.1f %12.1f %11.2fx\n", f, b / 1e6, d, 100 * d * b / (bw * 1e9), p, s, d / base
        printf "       prefill / decode %.2fx, 32 sequences / batch 1 %.2fx\n", p / d, s / d }'
done
