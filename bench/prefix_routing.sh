#!/usr/bin/env bash
# Prefix-cache hit rate of `moert run` on a shared-prefix workload: 8 system prompts of 64
# tokens, 8 requests each with its own 8-token question, in shuffled order. One rank against
# two ranks with cache-aware routing (--request-routing prefix, the default) and with the
# free-block rule alone (--request-routing free-blocks), in the same script.
#   bash bench/prefix_routing.sh [model_dir]   (default: a tiny qwen3_moe made here)
set -euo pipefail
source "$(dirname "$0")/../scripts/env.sh"
moert="$MOERT_BUILD_DIR/launch/moert"
work="$MOERT_BUILD_DIR/bench-prefix"
mkdir -p "$work"
model=${1:-$work/tiny}
[ -f "$model/config.json" ] || "$moert" make-model --arch qwen3_moe --preset tiny --seed 3 --out "$model" > /dev/null
: > "$work/in.jsonl"
for i in $(seq 0 63); do
  s=$(( (i * 5 + i / 8) % 8 ))  # shuffled: each system prompt 8 times, both parities
  prompt=$(for j in $(seq 0 63); do printf '%d,' $(((s * 131 + j * 17 + 3) % 1000)); done;
           for j in $(seq 0 7); do printf '%d,' $(((i * 71 + j * 13 + 500) % 1000)); done)
  echo "{\"id\": \"p$i\", \"prompt_token_ids\": [${prompt%,}], \"max_tokens\": 4}" >> "$work/in.jsonl"
done
run() {  # label, ranks, extra options
  rm -f "$work/out.jsonl"
  mpirun -np "$2" --oversubscribe --bind-to none "$moert" run --model "$model" --input "$work/in.jsonl" \
    --output "$work/out.jsonl" --threads 1 --max-seqs 8 --progress-interval 0 "${@:3}" 2> "$work/log"
  printf '%-40s %s; requests per rank: %s\n' "$1" "$(grep -o 'prefix-cache hit rate [0-9.]* ([0-9]* of [0-9]* prompt tokens)' "$work/log")" \
    "$(grep -o '^rank [0-9]*: [0-9]* requests' "$work/log" | grep -o '[0-9]* requests' | grep -o '[0-9]*' | paste -sd/)"
}
run "1 rank" 1
run "2 ranks, --request-routing prefix" 2
run "2 ranks, --request-routing free-blocks" 2 --request-routing free-blocks
