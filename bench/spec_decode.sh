#!/usr/bin/env bash
# Speculative decoding on the large preset: output tokens/s and acceptance at batch 1 and
# 16, without speculation and with (a) the 1-layer truncation of a draft-friendly target,
# (b) the target's own NVFP4 copy as its draft (self-speculation; also computed with int8
# activations, --draft-fp4-activations int8), (c) the n-gram
# proposer on repetitive prompts; fixed K and --spec-k auto. A control at the end: the
# same target shape with 4 experts all active per token (--num-experts 4 --top-k 4, the
# same active parameters), where a K+1-token verify pass reads no more expert weights
# than a 1-token step. Every figure comes from this
# one script, so the ratios compare runs on the same machine state. Batch B serves 2B
# requests (4 at batch 1) with --max-seqs B. Last, a DeepSeek-V3-shaped target (large preset,
# layer 0 dense, MLA) with a faithful MTP layer (docs/mtp.md), batch 1: none, its 2-layer
# truncation as a draft, and --spec mtp with K = 1..3, side by side.
# sections="mtp" runs only that last part (sections="qwen mtp" by default).
#   bash bench/spec_decode.sh [threads=2] [output_len=64] [k=4]
set -euo pipefail
source "$(dirname "$0")/../scripts/env.sh"
threads=${1:-2}
output_len=${2:-64}
k=${3:-4}
moert="$MOERT_BUILD_DIR/launch/moert"
work="$MOERT_BUILD_DIR/bench-spec"
mkdir -p "$work"
shape="--arch qwen3_moe --preset large --seed 1 --faithful-layers 1 --late-layer-scale 0.1"
[ -f "$work/target/config.json" ] || "$moert" make-model $shape --out "$work/target" > /dev/null
[ -f "$work/draft1/config.json" ] || "$moert" make-model $shape --num-layers 1 --out "$work/draft1" > /dev/null
[ -f "$work/nvfp4/config.json" ] || "$moert" quantize --model "$work/target" --format nvfp4 --out "$work/nvfp4" > /dev/null
model="$work/target"
bench() {  # label, batch, extra options
  local line spec
  local out
  out=$("$moert" bench --model "$model" --num-requests $(($2 == 1 ? 4 : 2 * $2)) --max-seqs "$2" --input-len 32 \
        --output-len "$output_len" --threads "$threads" "${@:3}")
  line=$(grep '^bench:' <<< "$out")
  spec=$(grep '^spec: .* passes' <<< "$out" || true)
  printf '%-28s batch %2d  %s  %s\n' "$1" "$2" "$(grep -o 'output_tok_s=[0-9.]*' <<< "$line")" \
    "$(grep -o 'acceptance=[0-9.]* tokens_per_pass=[0-9.]*' <<< "$line")"
  [ -z "$spec" ] || echo "    ${spec#spec: }"
}
sections=${sections:-qwen mtp}
if [[ " $sections " == *" qwen "* ]]; then
for batch in 1 16; do
  bench "none" "$batch"
  bench "draft 1-layer K=$k" "$batch" --spec draft --draft-model "$work/draft1" --spec-k "$k"
  bench "draft 1-layer auto" "$batch" --spec draft --draft-model "$work/draft1" --spec-k auto
  bench "nvfp4 self-draft K=$k" "$batch" --spec draft --draft-model "$work/nvfp4" --spec-k "$k"
  bench "nvfp4 int8 self-draft K=$k" "$batch" --spec draft --draft-model "$work/nvfp4" --spec-k "$k" \
    --draft-fp4-activations int8
  bench "none, repetitive" "$batch" --repetitive
  bench "ngram K=$k, repetitive" "$batch" --repetitive --spec ngram --spec-k "$k"
  bench "ngram auto, repetitive" "$batch" --repetitive --spec ngram --spec-k auto
done
shape4="$shape --num-experts 4 --top-k 4"
[ -f "$work/all4/config.json" ] || "$moert" make-model $shape4 --out "$work/all4" > /dev/null
[ -f "$work/all4_draft1/config.json" ] || "$moert" make-model $shape4 --num-layers 1 --out "$work/all4_draft1" > /dev/null
model="$work/all4"
echo "control: 4 experts, all active per token"
bench "none" 1
bench "draft 1-layer K=$k" 1 --spec draft --draft-model "$work/all4_draft1" --spec-k "$k"
bench "draft 1-layer auto" 1 --spec draft --draft-model "$work/all4_draft1" --spec-k auto
fi
if [[ " $sections " == *" mtp "* ]]; then
  ds="--arch deepseek_v3 --preset large --seed 1 --faithful-layers 1 --late-layer-scale 0.1"
  [ -f "$work/ds_mtp/config.json" ] || "$moert" make-model $ds --mtp-layers 1 --out "$work/ds_mtp" > /dev/null
  # Its 2-layer truncation (the same dense layer 0 and damped MoE layer 1) drafts.
  [ -f "$work/ds_draft2/config.json" ] || "$moert" make-model $ds --num-layers 2 --out "$work/ds_draft2" > /dev/null
  model="$work/ds_mtp"
  echo "DeepSeek-V3-shaped target with its MTP layer"
  bench "none" 1
  bench "draft 2-layer K=$k" 1 --spec draft --draft-model "$work/ds_draft2" --spec-k "$k"
  for mtp_k in 1 2 3; do bench "mtp K=$mtp_k" 1 --spec mtp --spec-k "$mtp_k"; done
  bench "none (again: the drift)" 1
fi
