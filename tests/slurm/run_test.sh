#!/usr/bin/env bash
# `moert run` with 4 ranks under mpirun, under srun and through the one-node sbatch template:
# each output has every request id once, and the three agree (timings aside).
# Needs MOERT_BIN and MOERT_ROOT (CTest sets them). Starts the local one-node Slurm cluster
# (slurm/local-cluster.sh, idempotent). Exit 77 (skip) when Slurm can't be had, except under
# CI=true, where that fails. MOERT_SLURM_TEST_RANKS overrides the 4 ranks.
set -euo pipefail
: "${MOERT_BIN:?}" "${MOERT_ROOT:?}"
ranks="${MOERT_SLURM_TEST_RANKS:-4}"
work="$PWD/slurm_run"
job_name="moert-slurm-test-$$"

unavailable() {
  if [ "${CI:-}" = true ]; then echo "FAIL (CI=true): $1" >&2; exit 1; fi
  echo "SKIP: $1" >&2; exit 77
}
command -v jq >/dev/null || { echo "FAIL: jq missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
{ command -v srun && command -v sbatch; } >/dev/null || unavailable "Slurm not installed"
bash "$MOERT_ROOT/slurm/local-cluster.sh" start || unavailable "the local Slurm cluster did not start"
# The cluster's config, even where /etc/slurm/slurm.conf belongs to another cluster.
export SLURM_CONF="${MOERT_SLURM_DIR:-/tmp/moert-slurm}/slurm.conf"
# A job left by a timed-out sbatch --wait is cancelled on any exit.
trap 'scancel --name "$job_name" >/dev/null 2>&1 || true' EXIT

# Fresh inputs: a tiny model and 8 greedy requests (outputs are appended to, so none may exist).
rm -rf "$work" && mkdir -p "$work"
"$MOERT_BIN" make-model --arch qwen3_moe --preset tiny --seed 7 --out "$work/model" >/dev/null
for i in 0 1 2 3 4 5 6 7; do
  echo "{\"id\": \"req$i\", \"prompt_token_ids\": [84, 464, 280, $((100 + i)), $((200 + 7 * i))], \"max_tokens\": 8}"
done > "$work/requests.jsonl"
run_args=(run --model "$work/model" --input "$work/requests.jsonl" --threads 1 --kv-cache-mb 64)

# show_logs: what the launchers printed, for a failure (a failing command shows them too).
show_logs() {
  local f
  for f in "$work"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }; done
  return 0
}
trap show_logs ERR

echo "[${SECONDS}s] mpirun -np $ranks"
timeout 120 mpirun -np "$ranks" --oversubscribe --bind-to none \
  "$MOERT_BIN" "${run_args[@]}" --output "$work/out_mpirun.jsonl" </dev/null >"$work/mpirun.log" 2>&1
echo "[${SECONDS}s] srun -n $ranks"
timeout 120 srun -n "$ranks" --overcommit --mpi=pmix --job-name="$job_name" \
  "$MOERT_BIN" "${run_args[@]}" --output "$work/out_srun.jsonl" </dev/null >"$work/srun.log" 2>&1
echo "[${SECONDS}s] sbatch --wait slurm/moert-run-one-node.sbatch"
MODEL="$work/model" INPUT="$work/requests.jsonl" OUTPUT="$work/out_sbatch.jsonl" \
  MOERT_RUN_ARGS="--kv-cache-mb 64" MOERT_BIN="$MOERT_BIN" \
  timeout 180 sbatch --wait --job-name="$job_name" --ntasks="$ranks" --overcommit --cpus-per-task=1 \
  --output="$work/sbatch.log" "$MOERT_ROOT/slurm/moert-run-one-node.sbatch" >/dev/null

# Every request id exactly once in each output; the outputs equal once sorted by id.
jq -r .id "$work/requests.jsonl" | sort > "$work/ids.expected"
for launcher in mpirun srun sbatch; do
  out="$work/out_$launcher.jsonl"
  jq -r .id "$out" | sort > "$work/ids.$launcher"
  if ! diff -u "$work/ids.expected" "$work/ids.$launcher" >&2; then
    echo "FAIL: $out does not hold each request id exactly once" >&2; show_logs; exit 1
  fi
  jq -c 'del(.time_s, .queue_s, .ttft_s, .e2e_s)' "$out" | jq -s -c 'sort_by(.id)[]' > "$work/norm.$launcher"
done
for launcher in srun sbatch; do
  if ! diff -u "$work/norm.mpirun" "$work/norm.$launcher" >&2; then
    echo "FAIL: out_$launcher.jsonl differs from out_mpirun.jsonl" >&2; show_logs; exit 1
  fi
done
echo "[${SECONDS}s] PASS: $ranks ranks, mpirun = srun = sbatch over $(wc -l < "$work/ids.expected") requests"
