#!/usr/bin/env bash
# One node with two threads (and two ranks of one thread) against two nodes with one thread each
# (expert parallelism over a shaped link of scripts/cluster.sh), on the large preset: decode at
# batch 1, 16 and 64 and a prefill, at each link rate. Root only (it builds the namespaced cluster and takes it down).
#   bash bench/multinode.sh [link rates in Mbit/s, default "100 1000 10000"]
# Knobs (environment):
#   MOERT_BENCH_PRESET   make-model preset (default large)
#   MOERT_BENCH_MODEL_ARGS further make-model options (shape overrides, e.g. the Qwen3-30B-A3B shape of
#                        docs/perf/multinode.md); the model's folder is named by MOERT_BENCH_MODEL_NAME
#                        (default: the preset), which must change with these options
#   MOERT_BENCH_DECODE   output tokens per decode request (default 32; prompts are 16 tokens)
#   MOERT_BENCH_PREFILL  prefill: "requests x prompt tokens", one output token each (default 4x512)
#   MOERT_BENCH_VARIANTS exchange variants compared across nodes, each DISPATCH/COMBINE/MICRO/PROGRESS:
#                        --ep-dispatch-dtype, --ep-combine-dtype, --micro-batches, and "pt" for Open MPI's
#                        TCP progress thread (--mca btl_tcp_progress_thread 1), "eb" for 8 MiB TCP eager
#                        limit and socket buffers (a message goes out whole at its start), "-" for none
#                        (default "f32/f32/1/- f32/f32/2/- f32/f32/2/pt bf16/bf16/1/- fp8/bf16/1/-")
#   MOERT_BENCH_WORKLOADS subset of "decode1 decode16 decode32 decode64 prefill"
#                        (default "decode1 decode16 decode64 prefill")
#   MOERT_BENCH_SAME_HOST 0 skips the same-host runs (default 1)
#   MOERT_BENCH_ROUNDS   rounds over the variants of a workload (default 1); with more than one, the
#                        rounds interleave (a load change hits every variant alike) and a median
#                        table follows the rows
# Prints one CSV row per run to stdout (and $MOERT_BUILD_DIR/bench-multinode/results.csv):
#   setup,link_mbit,variant,workload,round,tok_s,exchange_pct,hidden_pct,link_bytes_per_token
# hidden_pct: the share of the exchange's time in flight that compute hid (rank 0's line).
# tok_s: output tokens/s for decode, prompt tokens/s for prefill (moert's job summary);
# exchange_pct: the all-to-all's share of the ranks' step time; link_bytes_per_token: bytes both
# links carried during the run (tx of every node) per token counted in tok_s.
set -euo pipefail
source "$(dirname "$0")/../scripts/env.sh"
rates="${1:-100 1000 10000}"
preset="${MOERT_BENCH_PRESET:-large}"
read -r -a model_args <<< "${MOERT_BENCH_MODEL_ARGS:-}"
model="${MOERT_BENCH_MODEL_NAME:-$preset}"
decode_len="${MOERT_BENCH_DECODE:-32}"
prefill="${MOERT_BENCH_PREFILL:-4x512}"
variants="${MOERT_BENCH_VARIANTS:-f32/f32/1/- f32/f32/2/- f32/f32/2/pt bf16/bf16/1/- fp8/bf16/1/-}"
rounds="${MOERT_BENCH_ROUNDS:-1}"
eager=$((8 << 20))  # the "eb" variants' eager limit and socket buffers: a whole exchange in one send
moert="$MOERT_BUILD_DIR/launch/moert"
cluster="$MOERT_ROOT/scripts/cluster.sh"
work="$MOERT_BUILD_DIR/bench-multinode"
export MOERT_CLUSTER_DIR="$work/cluster"
mkdir -p "$work"
trap 'bash "$cluster" down >/dev/null 2>&1 || true' EXIT
[ -f "$work/$model/config.json" ] ||
  "$moert" make-model --arch qwen3_moe --preset "$preset" --seed 1 "${model_args[@]}" --out "$work/$model" > /dev/null

# requests FILE COUNT PROMPT_LEN OUTPUT_LEN: deterministic prompts.
requests() {
  : > "$1"
  local i j prompt
  for i in $(seq 0 $(($2 - 1))); do
    prompt=$(for j in $(seq 0 $(($3 - 1))); do printf '%d,' $(((i * 257 + j * 31 + 7) % 4096)); done)
    echo "{\"id\": \"s$i\", \"prompt_token_ids\": [${prompt%,}], \"max_tokens\": $4}" >> "$1"
  done
}
read -r -a workloads <<< "${MOERT_BENCH_WORKLOADS:-decode1 decode16 decode64 prefill}"
workloads_here=("${workloads[@]}")  # the same-host runs (MOERT_BENCH_SAME_HOST=0: none)
requests "$work/decode1.jsonl" 1 16 "$decode_len"
requests "$work/decode16.jsonl" 16 16 "$decode_len"
requests "$work/decode32.jsonl" 32 16 "$decode_len"
requests "$work/decode64.jsonl" 64 16 "$decode_len"
requests "$work/prefill.jsonl" "${prefill%x*}" "${prefill#*x}" 1

link_bytes() {
  if [ -s "$MOERT_CLUSTER_DIR/nodes" ]; then
    bash "$cluster" stats | sed 's/.*tx_bytes=\([0-9]*\).*/\1/' | awk '{s += $1} END {printf "%.0f", s}'
  else
    echo 0
  fi
}

# run SETUP LINK VARIANT WORKLOAD ROUND THREADS LAUNCH...: one job, one CSV row.
run() {
  local setup="$1" link="$2" variant="$3" workload="$4" round="$5" threads="$6"; shift 6
  local dispatch combine micro progress
  IFS=/ read -r dispatch combine micro progress <<< "$variant"
  local before after tok_s tokens pct hidden
  rm -f "$work/out.jsonl" "$work/out.jsonl.manifest.json"
  before="$(link_bytes)"
  "$@" "$moert" run --model "$work/$model" --input "$work/$workload.jsonl" --output "$work/out.jsonl" \
    --threads "$threads" --max-seqs 64 --progress-interval 0 \
    --ep-dispatch-dtype "$dispatch" --ep-combine-dtype "$combine" --micro-batches "$micro" 2> "$work/log" ||
    { tail -n 20 "$work/log" >&2; echo "bench: $setup $workload failed" >&2; exit 1; }
  after="$(link_bytes)"
  if [ "$workload" = prefill ]; then
    read -r tok_s tokens < <(sed -n 's/^summary: .* input \([0-9.]*\) tok\/s (\([0-9]*\) tokens).*/\1 \2/p' "$work/log")
  else
    read -r tok_s tokens < <(sed -n 's/^job: .* output \([0-9.]*\) tok\/s (\([0-9]*\) tokens).*/\1 \2/p' "$work/log")
  fi
  pct="$(sed -n 's/^job: .*all-to-all \([0-9.]*\)% of step time.*/\1/p' "$work/log")"
  hidden="$(sed -n 's/^rank 0: .*, \([0-9.]*\)% of it hidden behind compute.*/\1/p' "$work/log")"
  echo "$setup,$link,$variant,$workload,$round,$tok_s,$pct,${hidden:-0},$(awk -v b=$((after - before)) -v t="$tokens" 'BEGIN {printf "%.0f", b / t}')" |
    tee -a "$work/results.csv"
}

echo "setup,link_mbit,variant,workload,round,tok_s,exchange_pct,hidden_pct,link_bytes_per_token" | tee "$work/results.csv"
bash "$cluster" down >/dev/null
# The same host: one rank with two threads, and two ranks (shared memory, no link) with one and
# two micro-batches (the A/B that shows whether the overlap costs anything where there is no link).
[ "${MOERT_BENCH_SAME_HOST:-1}" = 1 ] || workloads_here=()
for w in "${workloads_here[@]}"; do
  for round in $(seq 1 "$rounds"); do
    run 1node_x2threads - f32/f32/1/- "$w" "$round" 2 env
    for micro in 1 2; do
      run 1node_x2ranks - "f32/f32/$micro/-" "$w" "$round" 1 mpirun --allow-run-as-root -np 2 --bind-to core
    done
  done
done
for rate in $rates; do
  bash "$cluster" up --nodes 2 --link-mbit "$rate" >/dev/null
  for w in "${workloads[@]}"; do
    # The variants back to back per workload and round: their ratios share the machine's state.
    for round in $(seq 1 "$rounds"); do
      for variant in $variants; do
        case "${variant##*/}" in
          pt) mca=(--mca btl_tcp_progress_thread 1) ;;
          eb) mca=(--mca btl_tcp_eager_limit "$eager" --mca btl_tcp_max_send_size "$eager"
                   --mca btl_tcp_sndbuf "$eager" --mca btl_tcp_rcvbuf "$eager") ;;
          *) mca=() ;;
        esac
        run 2nodes_x1thread "$rate" "$variant" "$w" "$round" 1 \
          bash "$cluster" mpirun "${mca[@]}" -np 2 --map-by ppr:1:node
      done
    done
  done
done
if [ "$rounds" -gt 1 ]; then
  echo "median over $rounds rounds: setup,link_mbit,variant,workload,tok_s"
  tail -n +2 "$work/results.csv" | sort -t, -k1,4 -k6,6g |
    awk -F, -v n="$rounds" '{key = $1 "," $2 "," $3 "," $4; i[key]++; if (i[key] == int((n + 1) / 2)) print key "," $6}'
fi
