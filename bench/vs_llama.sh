#!/usr/bin/env bash
# moert against llama.cpp on the CPU, same weights, same threads, one run (issue 50,
# docs/perf/vs-llama.md):
#   bash bench/vs_llama.sh LLAMA_BUILD LLAMA_SRC [threads=2] [rounds=3] [formats=bf16,nvfp4,mxfp4,fp8] [shape=30b]
# LLAMA_BUILD: a llama.cpp build dir holding bin/llama-bench, bin/llama-batched-bench and
# bin/llama-quantize (CPU build, GGML_NATIVE=ON); LLAMA_SRC: its source tree (gguf-py is read from
# it). Both may also come from the environment (LLAMA_CPP_BUILD, LLAMA_CPP_SRC).
# shape: 30b (the Qwen3-30B-A3B shape: hidden 2048, 128 experts top-8 of width 768, 32 q / 4 kv
# heads x 128, vocab 151,936, 4 layers) or large (make-model's preset).
#
# What it does, in order:
#   * makes the model with `moert make-model` (BF16) and the same weights as a qwen3moe GGUF
#     (tools/moert_to_gguf.py), checks that both have the same dimensions and parameter count and
#     prints them, then the quantized copies of each format pair:
#       bf16  = moert BF16        vs llama.cpp BF16
#       nvfp4 = moert NVFP4       vs llama.cpp Q4_0       (4-bit, 16/32-element blocks)
#       mxfp4 = moert MXFP4       vs llama.cpp MXFP4_MOE  (MXFP4 experts; llama.cpp Q8_0 elsewhere)
#       fp8   = moert FP8 (block) vs llama.cpp Q8_0
#     (moert keeps the LM head BF16, as releases do; llama-quantize quantizes it: the MB/token
#     column shows what each engine reads per decode token);
#   * rounds: each round measures the FMA peak (core/cpu/bench/bench_fma_peak) and then, for each
#     format, both engines back to back on every workload, so each ratio is formed within a round
#     (minutes apart at most); the table shows medians over rounds and the ratio's range.
# Workloads (tokens/s):
#   pp64, pp512  one prompt of 64 / 512 tokens. llama-bench -p; moert bench --input-len N
#                --output-len 1 (input_tok_s: prompt tokens over the request's wall time, which
#                also holds the sampling of the one token: a slight disadvantage to moert).
#   tg32         batch-1 decode. llama-bench -n 32; moert bench batch 1, 8-token prompts, 32
#                tokens, 1000 / tpot_ms_p50.
#   dec1, dec8, dec32  decode tokens/s of 1 / 8 / 32 sequences, 8-token prompts, 32 tokens each.
#                llama-batched-bench S_TG; moert bench B x 1000 / tpot_ms_p50 (B requests at once;
#                moert's dec1 is its tg32 run).
#   tot1, tot8, tot32  the same runs, prompt + generated tokens over the whole time (batched-bench
#                S, moert total_tok_s).
# The GEMM column states pp512 as a fraction of the FMA peak: 2 x the parameters one token's
# linear layers multiply (attention, router, top_k experts; no LM head) x tokens/s, over the peak
# of the same threads (a lower bound of the GEMMs' own rate: attention and the rest are in the time).
# The machine is shared in practice: run it on a quiet machine, and read the ranges.
set -euo pipefail
source "$(dirname "$0")/../scripts/env.sh"
die() { echo "vs_llama: $*" >&2; exit 2; }

llama_build=${1:-${LLAMA_CPP_BUILD:-}}
llama_src=${2:-${LLAMA_CPP_SRC:-}}
threads=${3:-2}
rounds=${4:-3}
formats_arg=${5:-bf16,nvfp4,mxfp4,fp8}
shape=${6:-30b}
[ -n "$llama_build" ] && [ -n "$llama_src" ] ||
  die "usage: bash bench/vs_llama.sh LLAMA_BUILD LLAMA_SRC [threads=2] [rounds=3] [formats=bf16,nvfp4,mxfp4,fp8] [shape=30b|large]"
for tool in llama-bench llama-batched-bench llama-quantize; do
  [ -x "$llama_build/bin/$tool" ] || die "$llama_build/bin/$tool is missing (build targets llama-bench llama-batched-bench llama-quantize)"
done
[ -f "$llama_src/gguf-py/gguf/__init__.py" ] || die "$llama_src/gguf-py/gguf is missing (LLAMA_SRC must be a llama.cpp source tree)"
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || die "threads = '$threads' must be a positive integer"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "rounds = '$rounds' must be a positive integer"
IFS=, read -r -a formats <<< "$formats_arg"
[ "${#formats[@]}" -gt 0 ] || die "formats = '$formats_arg' names no format"
declare -A llama_type=([bf16]=BF16 [nvfp4]=Q4_0 [mxfp4]=MXFP4_MOE [fp8]=Q8_0)
for format in "${formats[@]}"; do
  [ -n "${llama_type[$format]:-}" ] || die "format '$format' is not one of bf16, nvfp4, mxfp4, fp8"
done
case "$shape" in
  30b) model_args="--vocab-size 151936 --hidden-size 2048 --num-layers 4 --num-experts 128 --top-k 8 --expert-size 768
        --num-heads 32 --num-kv-heads 4 --head-dim 128" ;;
  large) model_args="--preset large" ;;
  *) die "shape = '$shape' is not 30b or large" ;;
esac
moert="$MOERT_BUILD_DIR/launch/moert"
peak_bin="$MOERT_BUILD_DIR/core/cpu/bench_fma_peak"
[ -x "$moert" ] && [ -x "$peak_bin" ] || die "build first: $moert and $peak_bin (targets moert bench_fma_peak)"
python=${PYTHON:-/usr/bin/python3}
"$python" -c 'import numpy' 2> /dev/null || die "$python lacks numpy (set PYTHON to a python3 that has it)"
tool="$MOERT_ROOT/tools/moert_to_gguf.py"
export PYTHONPATH="$llama_src/gguf-py${PYTHONPATH:+:$PYTHONPATH}"

# ---- the models ------------------------------------------------------------------------------
work=${VS_LLAMA_WORK:-$MOERT_BUILD_DIR/bench-vs-llama-$shape}
mkdir -p "$work"
# shellcheck disable=SC2086  # model_args is a list of options
[ -f "$work/bf16/config.json" ] ||
  "$moert" make-model --arch qwen3_moe $model_args --seed 1 --out "$work/bf16" > /dev/null
[ -f "$work/llama-BF16.gguf" ] || "$python" "$tool" "$work/bf16" "$work/llama-BF16.gguf" > /dev/null
for format in "${formats[@]}"; do
  [ "$format" = bf16 ] && continue
  [ -f "$work/$format/config.json" ] ||
    "$moert" quantize --model "$work/bf16" --format "$format" --out "$work/$format" > /dev/null
  type=${llama_type[$format]}
  [ -f "$work/llama-$type.gguf" ] ||
    "$llama_build/bin/llama-quantize" "$work/llama-BF16.gguf" "$work/llama-$type.gguf" "$type" "$threads" \
      > "$work/llama-quantize-$type.log" 2>&1 || die "llama-quantize $type failed: $work/llama-quantize-$type.log"
done

# The same model on both sides: dimensions and parameter count of the moert BF16 checkpoint and
# of every GGUF (the "params=" and dimension fields must match; MB/token differ by format).
reference=$("$python" "$tool" --shape "$work/bf16")
dims_of() { sed 's/ mb_per_token=[^ ]*//' <<< "$1"; }
field_of() { grep -o "$2=[0-9.]*" <<< "$1" | cut -d= -f2; }
declare -A mb_moert mb_llama
echo "moert bf16:        $reference"
for format in "${formats[@]}"; do
  type=${llama_type[$format]}
  line=$("$python" "$tool" --shape "$work/llama-$type.gguf")
  printf '%-18s %s\n' "llama.cpp $type:" "$line"
  [ "$(dims_of "$line")" = "$(dims_of "$reference")" ] || die "llama.cpp $type does not have moert's dimensions"
  mb_llama[$format]=$(field_of "$line" mb_per_token)
  moert_line=$("$python" "$tool" --shape "$work/$format")
  mb_moert[$format]=$(field_of "$moert_line" mb_per_token)
  echo "  files: moert $format $(du -sb "$work/$format" | cut -f1) bytes, llama.cpp $type" \
    "$(stat -c %s "$work/llama-$type.gguf") bytes; MB/token moert ${mb_moert[$format]}, llama.cpp ${mb_llama[$format]}"
done
active_params=$(field_of "$reference" active_linear_params)

# ---- the measurements ------------------------------------------------------------------------
workloads=(pp64 pp512 tg32 dec1 dec8 dec32 tot1 tot8 tot32)
declare -A result

# One `moert bench` run (one timed run after a warmup); prints its bench: line.
moert_bench() {  # model batch input_len output_len num_requests
  "$moert" bench --model "$1" --batch-sizes "$2" --num-requests "$5" --input-len "$3" --output-len "$4" \
    --threads "$threads" --warmup 1 --repeats 1 | grep '^bench:'
}
measure_moert() {  # format round
  local dir="$work/$1" line b
  line=$(moert_bench "$dir" 1 64 1 1)
  result[moert,$1,pp64,$2]=$(field_of "$line" input_tok_s)
  line=$(moert_bench "$dir" 1 512 1 1)
  result[moert,$1,pp512,$2]=$(field_of "$line" input_tok_s)
  line=$(moert_bench "$dir" 1 8 32 2)
  result[moert,$1,tg32,$2]=$(awk -v t="$(field_of "$line" tpot_ms_p50)" 'BEGIN { print 1000 / t }')
  result[moert,$1,dec1,$2]=${result[moert,$1,tg32,$2]}
  result[moert,$1,tot1,$2]=$(field_of "$line" total_tok_s)
  for b in 8 32; do
    line=$(moert_bench "$dir" "$b" 8 32 "$b")
    result[moert,$1,dec$b,$2]=$(awk -v b="$b" -v t="$(field_of "$line" tpot_ms_p50)" 'BEGIN { print b * 1000 / t }')
    result[moert,$1,tot$b,$2]=$(field_of "$line" total_tok_s)
  done
}
# jsonl lines of llama-bench / llama-batched-bench -> "key value" pairs.
parse_llama() {
  "$python" -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if "avg_ts" in r:
        if r["n_gen"] == 0:
            print("pp%d %s" % (r["n_prompt"], r["avg_ts"]))
        elif r["n_prompt"] == 0:
            print("tg%d %s" % (r["n_gen"], r["avg_ts"]))
    elif "speed_tg" in r:
        print("dec%d %s" % (r["pl"], r["speed_tg"]))
        print("tot%d %s" % (r["pl"], r["speed"]))
'
}
measure_llama() {  # format round
  local gguf="$work/llama-${llama_type[$1]}.gguf" key value
  while read -r key value; do
    result[llama,$1,$key,$2]=$value
  done < <({
    "$llama_build/bin/llama-bench" -m "$gguf" -t "$threads" -p 64,512 -n 32 -r 1 -o jsonl 2> /dev/null
    "$llama_build/bin/llama-batched-bench" -m "$gguf" -t "$threads" -tb "$threads" -c 2048 -npp 8 -ntg 32 \
      -npl 1,8,32 --output-format jsonl 2> /dev/null
  } | parse_llama)
  for key in "${workloads[@]}"; do
    [ -n "${result[llama,$1,$key,$2]:-}" ] || die "llama.cpp printed no $key figure for ${llama_type[$1]}"
  done
}

peaks=()
for round in $(seq 1 "$rounds"); do
  peaks+=("$("$peak_bin" "$threads" 3 | grep 'active=1' | grep -o 'gflop_s=[0-9.]*' | head -1 | cut -d= -f2)")
  for format in "${formats[@]}"; do
    measure_moert "$format" "$round"
    measure_llama "$format" "$round"
    line="round $round of $rounds, $format (moert / llama.cpp tok/s):"
    for key in "${workloads[@]}"; do line+=" $key ${result[moert,$format,$key,$round]} / ${result[llama,$format,$key,$round]}"; done
    echo "$line" >&2
  done
done

# ---- the table ---------------------------------------------------------------------------------
# Median and range of the numbers given: "median min max".
stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {
  m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m, v[1], v[NR] }'; }
read -r peak peak_min peak_max <<< "$(stats "${peaks[@]}")"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), isa $("$peak_bin" 1 1 1 | grep 'active=1' |
  grep -o 'isa=[a-z0-9]*' | cut -d= -f2), $threads threads, FMA peak $peak GFLOP/s (rounds $peak_min-$peak_max);" \
  "shape $shape; medians of $rounds rounds; tokens/s"
printf '%-6s %-6s %10s %10s %22s\n' format load moert llama.cpp "moert/llama (range)"
for format in "${formats[@]}"; do
  for key in "${workloads[@]}"; do
    ours=() theirs=() ratios=()
    for round in $(seq 1 "$rounds"); do
      ours+=("${result[moert,$format,$key,$round]}")
      theirs+=("${result[llama,$format,$key,$round]}")
      ratios+=("$(awk -v a="${result[moert,$format,$key,$round]}" -v b="${result[llama,$format,$key,$round]}" \
        'BEGIN { print a / b }')")
    done
    read -r o _ _ <<< "$(stats "${ours[@]}")"
    read -r t _ _ <<< "$(stats "${theirs[@]}")"
    read -r r r_min r_max <<< "$(stats "${ratios[@]}")"
    extra=""
    case "$key" in
      pp512) extra=$(awk -v o="$o" -v t="$t" -v p="$active_params" -v peak="$peak" 'BEGIN {
        printf "  GEMM %.0f%% / %.0f%% of peak", 100 * o * 2 * p / 1e9 / peak, 100 * t * 2 * p / 1e9 / peak }') ;;
      tg32) extra=$(awk -v o="$o" -v t="$t" -v a="${mb_moert[$format]}" -v b="${mb_llama[$format]}" 'BEGIN {
        printf "  streams %.1f / %.1f GB/s (%.0f / %.0f MB/token)", o * a / 1e3, t * b / 1e3, a, b }') ;;
    esac
    awk -v f="$format" -v k="$key" -v o="$o" -v t="$t" -v r="$r" -v rl="$r_min" -v rh="$r_max" -v e="$extra" \
      'BEGIN { printf "%-6s %-6s %10.1f %10.1f %8.2fx (%.2f-%.2f)%s\n", f, k, o, t, r, rl, rh, e }'
  done
done
