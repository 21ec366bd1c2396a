#!/usr/bin/env bash
# bench/sweep.sh over 1 and 2 ranks on a tiny model: one combined CSV with a header and one
# row per (rank count, batch size), rank counts 1 then 2, and a PNG.
#   sweep_test.sh MOERT_BINARY
set -euo pipefail
moert=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
"$moert" make-model --arch qwen3_moe --preset tiny --num-layers 2 --out "$work/m" > /dev/null
MOERT_BIN="$moert" bash "$here/../../bench/sweep.sh" "$work/sweep" "1 2" --model "$work/m" --batch-sizes 1,3 \
  --input-len 12 --output-len 4 --warmup 0 --repeats 1 --threads 1 --kv-cache-mb 32 > "$work/log" 2>&1 ||
  { cat "$work/log" >&2; fail "sweep.sh failed"; }
[ "$(wc -l < "$work/sweep.csv")" -eq 5 ] || { cat "$work/sweep.csv" >&2; fail "expected a header and 4 rows"; }
head -n 1 "$work/sweep.csv" | grep -q '^ranks,batch_size,' || fail "no CSV header"
[ "$(tail -n +2 "$work/sweep.csv" | cut -d, -f1,2 | tr '\n' ' ')" = "1,1 1,3 2,1 2,3 " ] ||
  fail "rows are $(tail -n +2 "$work/sweep.csv" | cut -d, -f1,2 | tr '\n' ' ')"
[ "$(head -c 4 "$work/sweep.png" | tail -c 3)" = "PNG" ] || fail "no PNG"
[ -s "$work/sweep.ranks2.json" ] || fail "no per-rank-count JSON"
echo "PASS"
