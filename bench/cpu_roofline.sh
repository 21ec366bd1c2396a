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
# The repeats are rounds: each round measures the bandwidth and then every format and
# configuration once, so each ratio is taken within one round (minutes apart at most, not the
# length of the whole run) and the table shows the median over rounds, the ratio over BF16
# with its range (these machines drift by tens of percent over a run).
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

# output_tok_s / input_tok_s of one `moert bench` configuration (one timed run after a warmup).
bench_field() {  # model field batch input_len output_len [extra flags]
  "$moert" bench --model "$1" --batch-sizes "$3" --num-requests $(($3 == 1 ? 4 : 2 * $3)) --input-len "$4" \
    --output-len "$5" --threads "$threads" --warmup 1 --repeats 1 ${6:-} | grep '^bench:' |
    grep -o "$2=[0-9.]*" | cut -d= -f2
}

# Median and range of the numbers given: "median min max".
stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {
  m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m, v[1], v[NR] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print a / b }'; }

formats=(bf16 bf16+bf16 fp8 fp8+bf16 nvfp4 nvfp4+int8 mxfp4 mxfp4+int8)
declare -A bytes extra decode prefill batched
for format in "${formats[@]}"; do
  bytes[$format]=$(bytes_per_token "$work/${format%+*}")
  case "$format" in
    *+int8) extra[$format]="--fp4-activations int8" ;;
    bf16+bf16) extra[$format]="--bf16-activations bf16" ;;
    *+bf16) extra[$format]="--fp8-activations bf16" ;;
    *) extra[$format]="" ;;
  esac
done
bandwidths=()
for round in $(seq 1 "$repeats"); do
  bandwidth=$("$bandwidth_bin" "$threads" 1024 5 | grep -o 'read_bandwidth_gb_s=[0-9.]*' | cut -d= -f2)
  bandwidths+=("$bandwidth")
  for format in "${formats[@]}"; do
    dir="$work/${format%+*}"
    decode[$format,$round]=$(bench_field "$dir" output_tok_s 1 8 "$output_len" "${extra[$format]}")
    prefill[$format,$round]=$(bench_field "$dir" input_tok_s 1 64 1 "${extra[$format]}")
    batched[$format,$round]=$(bench_field "$dir" output_tok_s 32 8 "$output_len" "${extra[$format]}")
  done
  echo "round $round of $repeats: bandwidth $bandwidth GB/s, bf16 decode ${decode[bf16,$round]} tok/s" >&2
done

read -r bw_median bw_min bw_max <<< "$(stats "${bandwidths[@]}")"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $threads threads, read bandwidth $bw_median GB/s" \
  "(rounds $bw_min-$bw_max); medians of $repeats rounds"
printf '%-11s %12s %12s %10s %12s %12s %20s\n' format "MB/token" "decode tok/s" "bandwidth" "prefill tok/s" "32-seq tok/s" \
  "vs bf16 (range)"
for format in "${formats[@]}"; do
  decodes=() prefills=() batcheds=() used=() vs_bf16=() prefill_ratio=() batched_ratio=()
  for round in $(seq 1 "$repeats"); do
    d=${decode[$format,$round]}
    decodes+=("$d") prefills+=("${prefill[$format,$round]}") batcheds+=("${batched[$format,$round]}")
    used+=("$(awk -v d="$d" -v b="${bytes[$format]}" -v bw="${bandwidths[$((round - 1))]}" 'BEGIN { print d * b / (bw * 1e9) }')")
    vs_bf16+=("$(ratio "$d" "${decode[bf16,$round]}")")
    prefill_ratio+=("$(ratio "${prefill[$format,$round]}" "$d")")
    batched_ratio+=("$(ratio "${batched[$format,$round]}" "$d")")
  done
  read -r d _ _ <<< "$(stats "${decodes[@]}")"
  read -r p _ _ <<< "$(stats "${prefills[@]}")"
  read -r b _ _ <<< "$(stats "${batcheds[@]}")"
  read -r u _ _ <<< "$(stats "${used[@]}")"
  read -r v v_min v_max <<< "$(stats "${vs_bf16[@]}")"
  read -r pr pr_min pr_max <<< "$(stats "${prefill_ratio[@]}")"
  read -r br br_min br_max <<< "$(stats "${batched_ratio[@]}")"
  awk -v f="$format" -v mb="${bytes[$format]}" -v d="$d" -v u="$u" -v p="$p" -v b="$b" -v v="$v" -v vl="$v_min" \
      -v vh="$v_max" -v pr="$pr" -v prl="$pr_min" -v prh="$pr_max" -v br="$br" -v brl="$br_min" -v brh="$br_max" 'BEGIN {
        printf "%-11s %12.1f %12.1f %9.0f%% %12.1f %12.1f %8.2fx (%.2f-%.2f)\n", f, mb / 1e6, d, 100 * u, p, b, v, vl, vh
        printf "       prefill / decode %.2fx (%.2f-%.2f), 32 sequences / batch 1 %.2fx (%.2f-%.2f)\n", pr, prl, prh, br, brl, brh }'
done
