#!/usr/bin/env bash
# The built-in example: install what is missing, build, make a small Qwen3-MoE model and
# score a prompt with greedy decoding.
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
