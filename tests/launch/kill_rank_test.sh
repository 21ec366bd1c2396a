#!/bin/bash
# Usage: kill_rank_test.sh <moert binary>
# Kills rank 2 of a running 4-rank `moert run` with SIGKILL. Passes when the job ends
# within 10 s, non-zero, with a message naming rank 2; when every result line written
# before the kill is intact; and when a rerun resumes and completes the batch.
set -u
moert=$1
scratch=$(mktemp -d /tmp/moert-kill-rank.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; [ -f "$scratch/log" ] && tail -20 "$scratch/log"; exit 1; }

"$moert" make-model --arch qwen3_moe --preset tiny --num-layers 2 --out "$scratch/m" > /dev/null 2>&1 ||
  fail "make-model failed"
requests=40
for i in $(seq 0 $((requests - 1))); do
  echo "{\"id\": \"k$i\", \"prompt_token_ids\": [$((i + 1)), 7, 9, 11], \"max_tokens\": $((4 + 12 * i))}"
done > "$scratch/in.jsonl"

timeout -k 5 120 mpirun -np 4 --oversubscribe --bind-to none "$moert" run --model "$scratch/m" \
  --input "$scratch/in.jsonl" --output "$scratch/out.jsonl" --threads 1 > "$scratch/log" 2>&1 &
job=$!

# Wait for the first results, then find rank 2 by the rank its launcher gave it.
for _ in $(seq 1 600); do
  [ -f "$scratch/out.jsonl" ] && [ "$(wc -l < "$scratch/out.jsonl")" -ge 2 ] && break
  kill -0 "$job" 2> /dev/null || fail "the job ended before any rank was killed"
  sleep 0.1
done
[ "$(wc -l < "$scratch/out.jsonl")" -ge 2 ] || fail "no results after 60 s"
victim=""
for pid in $(pgrep -f "$scratch/out.jsonl"); do
  if tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=2"; then victim=$pid; fi
done
[ -n "$victim" ] || fail "rank 2 not found"
lines_before=$(wc -l < "$scratch/out.jsonl")
kill -9 "$victim"
start=$(date +%s%N)
for _ in $(seq 1 150); do
  kill -0 "$job" 2> /dev/null || break
  sleep 0.1
done
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
kill -0 "$job" 2> /dev/null && { kill -9 "$job"; fail "the job was still running 15 s after rank 2 died"; }
wait "$job"
rc=$?
cat "$scratch/log" | tail -8
[ "$elapsed_ms" -lt 10000 ] || fail "the job took ${elapsed_ms} ms to end (limit 10 s)"
[ "$rc" -ne 0 ] || fail "the job exited 0 although rank 2 was killed"
# mpirun's report of the killed process, or the peer watch's line (runtime/comm/peer_watch.h),
# whichever ends the job first.
grep -Eq "rank 2 .*(signal 9|Killed|exited)|lost rank 2 \(pid $victim " "$scratch/log" || fail "no message names rank 2"

# Results written before the kill survive; a resumed run serves only the rest.
"$moert" run --model "$scratch/m" --input "$scratch/in.jsonl" --output "$scratch/out.jsonl" --threads 2 --resume \
  > "$scratch/resume.log" 2>&1 || { cat "$scratch/resume.log"; fail "the resumed run failed"; }
grep -Eq "[1-9][0-9]* skipped \(already done\)" "$scratch/resume.log" ||
  { cat "$scratch/resume.log"; fail "the rerun did not skip the finished requests"; }
total=$(wc -l < "$scratch/out.jsonl")
unique=$(grep -o '"id": *"k[0-9]*"' "$scratch/out.jsonl" | sort -u | wc -l)
[ "$total" -eq "$requests" ] && [ "$unique" -eq "$requests" ] ||
  fail "after resuming: $total lines, $unique distinct ids (expected $requests)"
echo "PASS: the job ended ${elapsed_ms} ms after rank 2 died (exit $rc); $lines_before results kept; resumed to $requests"
