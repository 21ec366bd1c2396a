#!/usr/bin/env bash
# Load balancing on a deliberately skewed router: MaxVio without balancing, with
# --balance=bias (and what the bias costs: greedy token agreement with the unbalanced
# run) and with --balance=replicate (EPLB replicas; what changes is the compute per rank).
#   bash bench/balance.sh [ranks=2] [skew=1] [gamma=0.01]
set -euo pipefail
source "$(dirname "$0")/../scripts/env.sh"
ranks=${1:-2}
skew=${2:-1}
gamma=${3:-0.01}
moert="$MOERT_BUILD_DIR/launch/moert"
work="$MOERT_BUILD_DIR/bench-balance"
mkdir -p "$work"
"$moert" make-model --arch qwen3_moe --preset tiny --seed 5 --router-skew "$skew" --out "$work/model" > /dev/null
: > "$work/in.jsonl"
for i in $(seq 0 63); do
  prompt=$(for j in $(seq 0 15); do printf '%d,' $(((i * 131 + j * 37 + 11) % 1024)); done)
  echo "{\"id\": \"b$i\", \"prompt_token_ids\": [${prompt%,}], \"max_tokens\": 32}" >> "$work/in.jsonl"
done
run() {  # name, extra options
  rm -f "$work/$1.jsonl"
  mpirun -np "$ranks" --bind-to none "$moert" run --model "$work/model" --input "$work/in.jsonl" \
    --output "$work/$1.jsonl" --threads 1 --progress-interval 0 "${@:2}" 2> "$work/$1.log"
  echo "$1: $(grep '^balance' "$work/$1.log")"
  echo "    $(grep '^expert MaxVio by layer' "$work/$1.log")"
}
# Position-wise greedy agreement and identical sequences of two result files.
agreement() {
  join <(jq -r '[.id, (.outputs[0].token_ids | map(tostring) | join(","))] | @tsv' "$work/$1.jsonl" | sort) \
       <(jq -r '[.id, (.outputs[0].token_ids | map(tostring) | join(","))] | @tsv' "$work/$2.jsonl" | sort) |
    awk '{ n = split($2, a, ","); split($3, b, ","); same = 1
           for (i = 1; i <= n; i++) { total++; if (a[i] == b[i]) agree++; else same = 0 }
           sequences++; identical += same }
         END { printf "token agreement %.3f (%d of %d), identical sequences %d of %d\n", agree / total, agree, total, identical, sequences }'
}
run none
run bias --balance bias --balance-gamma "$gamma"
run replicate --balance replicate --balance-interval 4 --balance-redundant 1
echo "bias vs none: $(agreement none bias)"
echo "replicate vs none: $(agreement none replicate)"
