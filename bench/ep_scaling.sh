#!/usr/bin/env bash
# Output tokens/s of `moert run` on the large preset at 64 concurrent sequences: one rank
# against two expert-parallel ranks, in the same script so the figures are comparable.
#   bash bench/ep_scaling.sh [threads_per_rank=1] [requests=64] [output_len=64]
# Prints each run's job summary line and the per-rank all-to-all share.
set -euo pipefail
source "$(dirname "$0")/../scripts/env.sh"
threads=${1:-1}
requests=${2:-64}
output_len=${3:-64}
moert="$MOERT_BUILD_DIR/launch/moert"
work="$MOERT_BUILD_DIR/bench-ep"
mkdir -p "$work"
[ -f "$work/large/config.json" ] ||
  "$moert" make-model --arch qwen3_moe --preset large --seed 1 --out "$work/large" > /dev/null
: > "$work/in.jsonl"
for i in $(seq 0 $((requests - 1))); do
  prompt=$(for j in $(seq 0 15); do printf '%d,' $(((i * 257 + j * 31 + 7) % 4096)); done)
  echo "{\"id\": \"s$i\", \"prompt_token_ids\": [${prompt%,}], \"max_tokens\": $output_len}" >> "$work/in.jsonl"
done
run() {  # ranks, threads
  rm -f "$work/out.jsonl"
  mpirun -np "$1" --bind-to none "$moert" run --model "$work/large" --input "$work/in.jsonl" \
    --output "$work/out.jsonl" --threads "$2" --max-seqs 64 --progress-interval 0 2> "$work/log"
  echo "$1 rank(s) x $2 thread(s): $(grep '^job:' "$work/log")"
  grep '^rank' "$work/log" | sed 's/^/    /'
}
run 1 "$threads"
run 2 "$threads"
