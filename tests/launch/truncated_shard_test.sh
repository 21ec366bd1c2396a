#!/usr/bin/env bash
# A checkpoint shard truncated while `moert run` serves: with --weight-memory mmap (weights
# read in place) the job ends with one clear line (not a core dump), a non-zero exit, and every
# result line written before is whole JSON; with the default copy it never reads the shards
# again and serves every request.
#   truncated_shard_test.sh MOERT_BINARY
set -euo pipefail
moert=$1
work=$(mktemp -d)
job=
trap '[ -z "$job" ] || kill -9 "$job" 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$work/log" >&2 2>/dev/null || true; exit 1; }
# serve_then_truncate MODEL INPUT OUTPUT [run options...]: starts `moert run`, truncates every
# shard of MODEL once the first result is out, and sets rc to the job's exit status.
serve_then_truncate() {
  local model=$1 input=$2 output=$3
  "$moert" make-model --arch qwen3_moe --preset tiny --seed 4 --shard-mb 1 --out "$model" > /dev/null
  "$moert" run --model "$model" --input "$input" --output "$output" --threads 1 --max-seqs 4 \
    --progress-interval 0 "${@:4}" > "$work/log" 2>&1 &
  job=$!
  for _ in $(seq 1 300); do  # wait for the first results
    [ -s "$output" ] && break
    sleep 0.05
  done
  [ -s "$output" ] || fail "no result within 15 s ($*)"
  for shard in "$model"/model-*.safetensors; do truncate -s 4096 "$shard"; done
  rc=0
  wait "$job" || rc=$?
  job=
}
for i in $(seq 0 399); do
  echo "{\"id\": \"t$i\", \"prompt_token_ids\": [$((i % 900 + 1)), 7, 9, 11], \"max_tokens\": 200}"
done > "$work/in.jsonl"
serve_then_truncate "$work/m" "$work/in.jsonl" "$work/out.jsonl" --weight-memory mmap
[ "$rc" -ne 0 ] || fail "the job exited 0 after its shards were truncated"
[ "$rc" -lt 128 ] || fail "the job died of a signal (exit $rc) instead of exiting with an error"
grep -q "truncated or replaced while the job was reading it" "$work/log" || fail "no message names the cause"
[ "$(grep -c -i "error" "$work/log")" -eq 1 ] || fail "not exactly one error line on stderr"
lines=$(wc -l < "$work/out.jsonl")
jq -e . "$work/out.jsonl" > /dev/null || fail "a result line is not whole JSON"
mmap_rc=$rc

# The default copy: the same truncation after the first results changes nothing.
head -n 40 "$work/in.jsonl" > "$work/in40.jsonl"
serve_then_truncate "$work/c" "$work/in40.jsonl" "$work/copy.jsonl"
[ "$rc" -eq 0 ] || fail "copy: the job failed (exit $rc) though its weights were copied at load"
[ "$(wc -l < "$work/copy.jsonl")" -eq 40 ] || fail "copy: not every request was served"
echo "PASS: mmap exit $mmap_rc, $lines result lines kept; copy served all 40"
