#!/usr/bin/env bash
# A checkpoint shard truncated while `moert run` serves: the job ends with one clear line
# (not a core dump), a non-zero exit, and every result line written before is whole JSON.
#   truncated_shard_test.sh MOERT_BINARY
set -euo pipefail
moert=$1
work=$(mktemp -d)
job=
trap '[ -z "$job" ] || kill -9 "$job" 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$work/log" >&2 2>/dev/null || true; exit 1; }
"$moert" make-model --arch qwen3_moe --preset tiny --seed 4 --shard-mb 1 --out "$work/m" > /dev/null
for i in $(seq 0 399); do
  echo "{\"id\": \"t$i\", \"prompt_token_ids\": [$((i % 900 + 1)), 7, 9, 11], \"max_tokens\": 200}"
done > "$work/in.jsonl"
"$moert" run --model "$work/m" --input "$work/in.jsonl" --output "$work/out.jsonl" --threads 1 --max-seqs 4 \
  --progress-interval 0 > "$work/log" 2>&1 &
job=$!
for _ in $(seq 1 300); do  # wait for the first results
  [ -s "$work/out.jsonl" ] && break
  sleep 0.05
done
[ -s "$work/out.jsonl" ] || fail "no result within 15 s"
for shard in "$work"/m/model-*.safetensors; do truncate -s 4096 "$shard"; done
rc=0
wait "$job" || rc=$?
job=
[ "$rc" -ne 0 ] || fail "the job exited 0 after its shards were truncated"
[ "$rc" -lt 128 ] || fail "the job died of a signal (exit $rc) instead of exiting with an error"
grep -q "truncated or replaced while the job was reading it" "$work/log" || fail "no message names the cause"
[ "$(grep -c -i "error" "$work/log")" -eq 1 ] || fail "not exactly one error line on stderr"
lines=$(wc -l < "$work/out.jsonl")
jq -e . "$work/out.jsonl" > /dev/null || fail "a result line is not whole JSON"
echo "PASS: exit $rc, $lines result lines kept"
