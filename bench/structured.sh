#!/usr/bin/env bash
# Structured output costs (docs/structured-output.md; figures in docs/perf/structured-output.md):
#  1. bench_grammar_masks over the real Qwen3 vocabulary (151,669 ids): compiling a 50-property
#     schema, a step's mask from the per-state cache and applied to a row of logits, against a
#     full vocabulary scan of the same states in the same run.
#  2. End to end: a tiny random model with that vocabulary (as cli_structured_test builds it),
#     16 requests at --max-seqs 16 (batch 16), 64 output tokens each, temperature 1, without a
#     constraint and under two JSON schemas. Both schemas are built so that no output completes
#     within 64 tokens, so every run decodes the same 16 x 64 tokens; each run serves the batch
#     twice (32 requests) so that the second half meets warm grammar caches, as a long job does.
#     The figure compared is the time per decode step (wall seconds / steps).
#   bash bench/structured.sh [threads=2] [repeats=20]
set -euo pipefail
source "$(dirname "$0")/../scripts/env.sh"
threads=${1:-2}
repeats=${2:-20}
moert="$MOERT_BUILD_DIR/launch/moert"
bench_masks="$MOERT_BUILD_DIR/text/grammar/bench_grammar_masks"
tokenizer="$MOERT_ROOT/tests/data/tokenizers/qwen3"
work="$MOERT_BUILD_DIR/bench-structured"
mkdir -p "$work"

echo "== masks over the Qwen3 vocabulary (bench_grammar_masks, $repeats repeats)"
"$bench_masks" "$tokenizer" "$repeats"

model="$work/qwen3-vocab-tiny"
if [ ! -f "$model/config.json" ]; then
  "$moert" make-model --arch qwen3_moe --preset tiny --vocab-size 151669 --hidden-size 64 --num-layers 2 \
    --num-heads 2 --num-kv-heads 1 --head-dim 32 --expert-size 64 --out "$model" > /dev/null
  cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" "$model/"
fi
# An array of at least 12 records (each ~10 tokens or more): never complete in 64 tokens.
records='{"type":"array","minItems":12,"items":{"type":"object","additionalProperties":false,"required":["name","score"],"properties":{"name":{"type":"string","maxLength":24},"score":{"type":"integer","minimum":0,"maximum":100}}}}'
# One long free-text field: a string of at least 400 characters.
text='{"type":"object","additionalProperties":false,"required":["text"],"properties":{"text":{"type":"string","minLength":400}}}'
requests() {  # constraint JSON fragment (or empty)
  for i in $(seq 1 32); do
    printf '{"id": "r%d", "prompt": "Write record %d of the list as JSON.", "max_tokens": 64, "temperature": 1, "seed": %d, "ignore_eos": true%s}\n' \
      "$i" "$i" "$i" "${1:+, $1}"
  done
}
run() {  # label, constraint fragment
  local out
  requests "$2" > "$work/in.jsonl"
  rm -f "$work/out.jsonl" "$work/out.jsonl.manifest.json"
  out=$( { /usr/bin/time -f "cpu %U %S" "$moert" run --model "$model" --input "$work/in.jsonl" --output "$work/out.jsonl" \
           --threads "$threads" --max-seqs 16 --kv-cache-mb 256 --generation-config none; } 2>&1)
  local summary cpu
  summary=$(grep '^summary:' <<< "$out")
  cpu=$(grep '^cpu ' <<< "$out")
  awk -v label="$1" -v cpu="$cpu" '{
      wall = $2; steps = $4;
      for (i = 1; i <= NF; i++) if ($i == "output") { tps = $(i + 1); tokens = $(i + 3) }
      gsub(/[(]/, "", tokens);
      split(cpu, c, " ");
      printf "%-28s %6.2f s %4d steps %7.2f ms/step (cpu %7.2f ms/step)  output %6.1f tok/s (%s tokens)\n",
             label, wall, steps, 1e3 * wall / steps, 1e3 * (c[2] + c[3]) / steps, tps, tokens
    }' <<< "${summary//,/}"
  echo "    finish reasons: $(grep -o '"finish_reason": *"[a-z]*"' "$work/out.jsonl" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"
}
# The machine may be shared: runs alternate and repeat, so compare like rounds and the minima.
echo "== end to end, batch 16, 32 requests x 64 tokens, $threads threads (wall and process CPU time per step)"
for round in 1 2; do
  echo "round $round"
  run "none" ""
  run "json_schema: 12+ records" "\"guided_json\": $records"
  run "json_schema: 400-char text" "\"guided_json\": $text"
done
