#!/usr/bin/env bash
# The built-in example: install what is missing, build, make a small Qwen3-MoE model and
# score a prompt with greedy decoding, then serve a small batch with `moert run` on 2 MPI
# ranks, plainly and with speculative decoding (a draft model).
set -euo pipefail
here="$(dirname "$0")"
bash "$here/install-deps.sh"
bash "$here/build.sh"
source "$here/env.sh"
model="$MOERT_BUILD_DIR/example/qwen3moe-tiny"
"$MOERT_BUILD_DIR/launch/moert" make-model --arch qwen3_moe --preset tiny --seed 7 --out "$model"
"$MOERT_BUILD_DIR/launch/moert" score --model "$model" --tokens 84,464,280,117,397,107,275,114 -n 16 \
  --out "$MOERT_BUILD_DIR/example/score"
echo "logits written to $MOERT_BUILD_DIR/example/score.{json,prompt_logits.npy,gen_logits.npy}"

# A batch of 9 requests through the continuous-batching engine (paged KV cache).
requests="$MOERT_BUILD_DIR/example/requests.jsonl"
: > "$requests"
for i in 0 1 2 3 4 5 6 7; do
  echo "{\"id\": \"req$i\", \"prompt_token_ids\": [84, 464, 280, $((100 + i)), $((200 + 7 * i))], \"max_tokens\": 12}" \
    >> "$requests"
done
echo '{"id": "sampled", "prompt_token_ids": [84, 464, 280], "max_tokens": 12, "temperature": 0.8, "top_p": 0.95, "n": 2, "seed": 1}' \
  >> "$requests"
# Served by 2 expert-parallel ranks: rank 0 assigns the requests and writes the results,
# every rank runs its own paged KV cache and half of the routed experts.
rm -f "$MOERT_BUILD_DIR/example/results.jsonl"
mpirun -np 2 --bind-to none "$MOERT_BUILD_DIR/launch/moert" run --model "$model" --input "$requests" \
  --output "$MOERT_BUILD_DIR/example/results.jsonl" --threads 1
echo "results written to $MOERT_BUILD_DIR/example/results.jsonl:"
head -3 "$MOERT_BUILD_DIR/example/results.jsonl"

# The same batch with speculative decoding: a draft-friendly target and its 1-layer
# truncation as the draft model; greedy results equal plain decoding.
target="$MOERT_BUILD_DIR/example/qwen3moe-faithful"
draft="$MOERT_BUILD_DIR/example/qwen3moe-faithful-draft"
shape="--arch qwen3_moe --preset tiny --seed 7 --faithful-layers 1 --late-layer-scale 0.2"
"$MOERT_BUILD_DIR/launch/moert" make-model $shape --out "$target" > /dev/null
"$MOERT_BUILD_DIR/launch/moert" make-model $shape --num-layers 1 --out "$draft" > /dev/null
rm -f "$MOERT_BUILD_DIR/example/results-spec.jsonl"
mpirun -np 2 --bind-to none "$MOERT_BUILD_DIR/launch/moert" run --model "$target" --input "$requests" \
  --output "$MOERT_BUILD_DIR/example/results-spec.jsonl" --threads 1 --spec draft --draft-model "$draft" --spec-k 4
echo "speculative results written to $MOERT_BUILD_DIR/example/results-spec.jsonl"
