#!/usr/bin/env bash
# `moert run` across the namespaced nodes of scripts/cluster.sh. One mode per CTest test:
#   run_test.sh ep          expert parallelism over 2 and 4 nodes, 1 and 2 ranks per node, Open MPI's
#                           ob1/tcp and UCX: outputs equal one rank's; the links carried at least the
#                           dispatch + combine bytes moert reports (1 rank per node: all of them cross);
#                           every rank's local facts (local rank, ranks per node, threads, CPUs) right
#   run_test.sh agree       a rank started with another model is refused by name, across nodes
#   run_test.sh slurm       srun --mpi=pmix -N 2, sbatch of slurm/moert-run-multi-node.sbatch and mpirun
#                           give the same bytes as one rank; a requeued job resumes its output
#   run_test.sh loss-kill   every process of a node killed mid-job / its link unplugged: the job ends
#   run_test.sh loss-link   within seconds with one line naming the lost rank and node, the output
#                           stays whole, and `moert run --resume` on the remaining nodes completes it
#                           with the undisturbed job's results
#   run_test.sh stale       a live cluster of another state folder blocks `up` with one line naming
#                           it; once that folder is gone (its run was killed), `up` takes it down
#                           (nodes, bridge, slurmctld) and builds its own
# Needs MOERT_BIN and MOERT_ROOT (CTest sets them). Exit 77 (skip) where namespaces cannot be made
# (not root, no iproute2), except under CI=true, where that fails. The cluster is taken down on
# every exit; its state lives under the test's folder.
set -euo pipefail
: "${MOERT_BIN:?}" "${MOERT_ROOT:?}"
mode="${1:?usage: run_test.sh ep|agree|slurm|loss-kill|loss-link|stale}"
work="$PWD/multinode_$mode"
cluster="$MOERT_ROOT/scripts/cluster.sh"
export MOERT_CLUSTER_DIR="$work/cluster"
export MOERT_LOG_LEVEL=info           # every rank's resource line (launch/engine_options.h)
export MOERT_PEER_TIMEOUT_S=3         # the peer watch (runtime/comm/peer_watch.h)
unavailable() {
  if [ "${CI:-}" = true ]; then echo "FAIL (CI=true): $1" >&2; exit 1; fi
  echo "SKIP: $1" >&2; exit 77
}
fail() { echo "FAIL: $*" >&2; show_logs; exit 1; }
show_logs() {
  local f
  for f in "$work"/*.log "$MOERT_CLUSTER_DIR"/slurm/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 25 "$f" >&2; }; done
  [ -f "$MOERT_CLUSTER_DIR/slurm/slurm.conf" ] && { echo "--- jobs" >&2; scontrol show job >&2 2>&1 || true; }
  return 0
}
command -v jq >/dev/null || { echo "FAIL: jq missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || unavailable "network namespaces need root"
for tool in ip tc nsenter unshare taskset mpirun; do command -v "$tool" >/dev/null || unavailable "$tool missing"; done

rm -rf "$work" && mkdir -p "$work"
teardown() {
  local rc=$?
  [ -n "${job_name:-}" ] && { scancel --name "$job_name" >/dev/null 2>&1 || true; }
  [ -f "$work/other/.moert-cluster" ] && { MOERT_CLUSTER_DIR="$work/other" bash "$cluster" down >/dev/null 2>&1 || true; }
  bash "$cluster" down >/dev/null 2>&1 || echo "WARNING: cluster.sh down failed" >&2
  exit $rc
}
trap teardown EXIT

# up ARGS...: the cluster, or skip when this machine cannot make namespaces.
up() {
  if ! bash "$cluster" up "$@" > "$work/up.log" 2>&1; then
    if grep -qiE "operation not permitted|permission denied|cannot create namespace" "$work/up.log"; then
      unavailable "cannot make network namespaces here: $(tail -n 1 "$work/up.log")"
    fi
    cat "$work/up.log" >&2; fail "cluster.sh up $* failed"
  fi
  eval "$(bash "$cluster" env)"
}

# make_inputs COUNT TOKENS [STEP]: the model and the reference batch, COUNT greedy requests of
# TOKENS (+ STEP x i for request i: results then finish one after another) output tokens,
# answered by one rank.
make_inputs() {
  local count="$1" tokens="$2" step="${3:-0}"
  [ -f "$work/model/config.json" ] ||
    "$MOERT_BIN" make-model --arch qwen3_moe --preset tiny --seed 7 --out "$work/model" >/dev/null
  for i in $(seq 0 $((count - 1))); do
    echo "{\"id\": \"req$i\", \"prompt_token_ids\": [84, 464, 280, $((100 + i)), $((200 + 7 * i))], \"max_tokens\": $((tokens + step * i))}"
  done > "$work/requests.jsonl"
  rm -f "$work/out_ref.jsonl" "$work/out_ref.jsonl.manifest.json"
  run_args=(run --model "$work/model" --input "$work/requests.jsonl" --kv-cache-mb 64)
  "$MOERT_BIN" "${run_args[@]}" --threads 1 --output "$work/out_ref.jsonl" >"$work/ref.log" 2>&1 ||
    fail "the one-rank reference run failed"
  normalize "$work/out_ref.jsonl" > "$work/norm_ref"
}
# normalize FILE: results sorted by id, timings dropped.
normalize() { jq -c 'del(.time_s, .queue_s, .ttft_s, .e2e_s)' "$1" | jq -s -c 'sort_by(.id)[]'; }
same_as_reference() {
  normalize "$1" > "$1.norm" || fail "$1 is not JSON lines"
  diff -q "$work/norm_ref" "$1.norm" >/dev/null || { diff "$work/norm_ref" "$1.norm" | head -5 >&2; fail "$1 differs from one rank's results ($2)"; }
}
link_bytes() { bash "$cluster" stats | sed 's/.*tx_bytes=\([0-9]*\).*/\1/' | awk '{s += $1} END {printf "%.0f", s}'; }

mode_ep() {
  make_inputs 8 16
  up --nodes 4 --link-mbit 1000
  local nodes ppn transport ranks tag before after sent
  for transport in tcp ucx; do
    for nodes in 2 4; do
      for ppn in 1 2; do
        ranks=$((nodes * ppn)); tag="${transport}_${nodes}x${ppn}"
        echo "[${SECONDS}s] mpirun --transport $transport: $nodes nodes x $ppn ranks"
        before="$(link_bytes)"
        timeout -k 5 120 bash "$cluster" mpirun --transport "$transport" -np "$ranks" --map-by "ppr:$ppn:node" \
          "$MOERT_BIN" "${run_args[@]}" --output "$work/out_$tag.jsonl" </dev/null >"$work/$tag.log" 2>&1 ||
          fail "$tag: mpirun failed"
        after="$(link_bytes)"
        same_as_reference "$work/out_$tag.jsonl" "$tag"
        # Every rank: on the node the mapping put it on, with the local facts of that node.
        local r node local_rank
        for r in $(seq 0 $((ranks - 1))); do
          node="moert-node$((r / ppn + 1))"; local_rank=$((r % ppn))
          grep -q "rank $r on $node: local rank $local_rank of $ppn on this node, 1 thread(s), 1 of $(nproc) CPUs" \
            "$work/$tag.log" || fail "$tag: rank $r's resource line is missing or wrong"
        done
        # The exchange moert counted (to other ranks) against what the links carried.
        sent="$(grep -o 'sent [0-9.]* MB dispatch + [0-9.]* MB combine' "$work/$tag.log" |
                awk '{s += $2 + $5} END {printf "%.0f", s * 1e6}')"
        [ "$sent" -gt 0 ] || fail "$tag: no all-to-all bytes reported"
        echo "  links carried $((after - before)) bytes; moert sent $sent bytes to other ranks"
        if [ "$ppn" = 1 ] && [ $((after - before)) -lt $((sent - 10000 * ranks)) ]; then
          fail "$tag: the links carried $((after - before)) bytes, fewer than the $sent moert sent between nodes"
        fi
      done
    done
  done
  # Control: the same job with both ranks on one node. Their exchange goes through shared memory,
  # so the links must carry less than moert sent; otherwise the counters above prove nothing.
  echo "[${SECONDS}s] control: 2 ranks on moert-node1"
  before="$(link_bytes)"
  timeout -k 5 120 bash "$cluster" mpirun -np 2 --host moert-node1:2 "$MOERT_BIN" "${run_args[@]}" \
    --output "$work/out_one_node.jsonl" </dev/null >"$work/one_node.log" 2>&1 || fail "one-node control: mpirun failed"
  after="$(link_bytes)"
  same_as_reference "$work/out_one_node.jsonl" "2 ranks on one node"
  sent="$(grep -o 'sent [0-9.]* MB dispatch + [0-9.]* MB combine' "$work/one_node.log" |
          awk '{s += $2 + $5} END {printf "%.0f", s * 1e6}')"
  echo "  links carried $((after - before)) bytes; moert sent $sent bytes to other ranks"
  [ $((after - before)) -lt "$sent" ] || fail "one node: the links carried $((after - before)) bytes, not less than the $sent moert sent"
}

mode_agree() {
  make_inputs 2 4
  up --nodes 2
  "$MOERT_BIN" make-model --arch qwen3_moe --preset tiny --seed 8 --out "$work/model_other" >/dev/null
  # Node 2's rank gets another model (an MPMD job: one app context per node).
  local rc=0
  timeout -k 5 60 bash "$cluster" mpirun -np 1 --host moert-node1 "$MOERT_BIN" "${run_args[@]}" --output "$work/out.jsonl" : \
    -np 1 --host moert-node2 "$MOERT_BIN" run --model "$work/model_other" --input "$work/requests.jsonl" \
    --kv-cache-mb 64 --output "$work/out.jsonl" </dev/null >"$work/agree.log" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a job with two models exited $rc"
  grep -q "rank 1.*model" "$work/agree.log" || fail "no message names rank 1 and the model"
  [ ! -s "$work/out.jsonl" ] || fail "the refused job wrote results"
  echo "refused: $(grep -m1 'rank 1.*model' "$work/agree.log")"
}

mode_slurm() {
  command -v slurmctld >/dev/null && command -v srun >/dev/null || unavailable "Slurm not installed"
  make_inputs 8 8
  up --nodes 2 --slurm
  job_name="moert-multinode-test-$$"
  echo "[${SECONDS}s] srun --mpi=pmix -N 2"
  timeout -k 5 120 srun --mpi=pmix -N 2 --ntasks-per-node=1 --job-name="$job_name" \
    bash -c 'echo "task $SLURM_PROCID on $(hostname)"; exec "$@"' task "$MOERT_BIN" "${run_args[@]}" \
    --output "$work/out_srun.jsonl" </dev/null >"$work/srun.log" 2>&1 || fail "srun failed"
  grep -q "task 0 on moert-node1" "$work/srun.log" && grep -q "task 1 on moert-node2" "$work/srun.log" ||
    fail "srun did not place one task on each node"
  same_as_reference "$work/out_srun.jsonl" srun
  echo "[${SECONDS}s] mpirun over the same nodes"
  timeout -k 5 120 bash "$cluster" mpirun -np 2 --map-by ppr:1:node "$MOERT_BIN" "${run_args[@]}" \
    --output "$work/out_mpirun.jsonl" </dev/null >"$work/mpirun.log" 2>&1 || fail "mpirun failed"
  cmp -s "$work/out_srun.jsonl.norm" <(normalize "$work/out_mpirun.jsonl") || fail "srun and mpirun differ"
  echo "[${SECONDS}s] sbatch --wait --nodes 2 slurm/moert-run-multi-node.sbatch"
  MODEL="$work/model" INPUT="$work/requests.jsonl" OUTPUT="$work/out_sbatch.jsonl" MOERT_BIN="$MOERT_BIN" \
    MOERT_RUN_ARGS="--kv-cache-mb 64" timeout -k 5 180 sbatch --wait --nodes 2 --ntasks-per-node 1 \
    --cpus-per-task 1 --job-name="$job_name" --output="$work/sbatch.log" \
    "$MOERT_ROOT/slurm/moert-run-multi-node.sbatch" >/dev/null || fail "the sbatch job failed"
  same_as_reference "$work/out_sbatch.jsonl" sbatch

  # Requeue: a longer batch; once results appear the job is requeued (killed and queued again)
  # and must finish by resuming its own output.
  make_inputs 24 4 6
  echo "[${SECONDS}s] sbatch, then scontrol requeue once results appear"
  local job_id
  job_id="$(MODEL="$work/model" INPUT="$work/requests.jsonl" OUTPUT="$work/out_requeue.jsonl" MOERT_BIN="$MOERT_BIN" \
    MOERT_RUN_ARGS="--kv-cache-mb 64" sbatch --parsable --requeue --nodes 2 --ntasks-per-node 1 --cpus-per-task 1 \
    --job-name="$job_name" --open-mode=append --output="$work/requeue.log" \
    "$MOERT_ROOT/slurm/moert-run-multi-node.sbatch")"
  local deadline=$((SECONDS + 120))
  until [ -s "$work/out_requeue.jsonl" ]; do
    [ $SECONDS -lt $deadline ] || fail "no results from job $job_id after 120 s"
    sleep 0.2
  done
  scontrol requeue "$job_id" || fail "scontrol requeue $job_id failed"
  local state=""
  deadline=$((SECONDS + 180))
  while [ $SECONDS -lt $deadline ]; do
    state="$(scontrol show job "$job_id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)"
    [ "$state" = COMPLETED ] && grep -q "skipping" "$work/requeue.log" && break
    case "$state" in FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) fail "requeued job $job_id ended $state" ;; esac
    sleep 1
  done
  [ "$state" = COMPLETED ] || fail "requeued job $job_id is $state after 180 s"
  grep -E "skipping [1-9][0-9]* request\(s\) already in" "$work/requeue.log" || fail "the requeued job did not resume"
  same_as_reference "$work/out_requeue.jsonl" "requeued sbatch"
}

# mode_loss kill|link: 3 nodes x 1 rank; node 3 goes mid-job; nodes 1-2 finish the job.
mode_loss() {
  local how="$1"
  make_inputs 24 4 6
  up --nodes 3 --link-mbit 1000
  timeout -k 5 120 bash "$cluster" mpirun -np 3 --map-by ppr:1:node "$MOERT_BIN" "${run_args[@]}" \
    --output "$work/out.jsonl" </dev/null >"$work/job.log" 2>&1 &
  local job=$! deadline=$((SECONDS + 90))
  until [ -s "$work/out.jsonl" ] && [ "$(wc -l < "$work/out.jsonl")" -ge 2 ]; do
    kill -0 "$job" 2>/dev/null || fail "the job ended before node 3 was lost"
    [ $SECONDS -lt $deadline ] || fail "no results after 90 s"
    sleep 0.1
  done
  local start end rc=0
  start=$(date +%s%N)
  if [ "$how" = kill ]; then bash "$cluster" kill moert-node3; else bash "$cluster" link moert-node3 down; fi
  wait "$job" || rc=$?
  end=$(date +%s%N)
  local elapsed_ms=$(((end - start) / 1000000))
  echo "the job ended $elapsed_ms ms after node 3 was lost ($how), exit $rc"
  [ "$rc" -ne 0 ] || fail "the job exited 0 although node 3 was lost"
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung until the test's timeout"
  [ "$elapsed_ms" -lt 15000 ] || fail "the job took $elapsed_ms ms to end (limit 15 s)"
  local named
  named="$(grep -c "lost rank 2 (pid [0-9]* on moert-node3)" "$work/job.log" || true)"
  [ "$named" -eq 1 ] || fail "expected one line naming rank 2 on moert-node3, found $named"
  grep "lost rank 2" "$work/job.log"
  # Whole lines only: each parses, the file ends with a newline.
  jq -c . "$work/out.jsonl" >/dev/null || fail "out.jsonl has a torn or invalid line"
  [ "$(tail -c 1 "$work/out.jsonl" | od -An -c | tr -d ' ')" = '\n' ] || fail "out.jsonl does not end with a newline"
  local kept
  kept=$(wc -l < "$work/out.jsonl")
  [ "$how" = link ] && bash "$cluster" link moert-node3 up
  # The documented way on: the same command with --resume on the nodes that remain.
  timeout -k 5 120 bash "$cluster" mpirun -np 2 --host moert-node1,moert-node2 "$MOERT_BIN" "${run_args[@]}" \
    --output "$work/out.jsonl" --resume </dev/null >"$work/resume.log" 2>&1 || fail "the resumed run failed"
  grep -qE "skipping $kept request\(s\) already in" "$work/resume.log" || fail "the resumed run did not skip the $kept results kept"
  same_as_reference "$work/out.jsonl" "resumed on 2 nodes"
  echo "resumed: $kept results kept, $(($(wc -l < "$work/out.jsonl") - kept)) served on moert-node1,2"
}

mode_stale() {
  local other="$work/other" ctld
  MOERT_CLUSTER_DIR="$other" bash "$cluster" up --nodes 2 --slurm > "$work/other-up.log" 2>&1 ||
    { cat "$work/other-up.log" >&2; fail "the other cluster did not come up"; }
  # Live: refused, naming the owner; the other cluster untouched.
  if bash "$cluster" up --nodes 1 > "$work/refused.log" 2>&1; then fail "up took over a live cluster"; fi
  grep -qF "a cluster with state in $other is up" "$work/refused.log" || { cat "$work/refused.log" >&2; fail "the refusal does not name $other"; }
  MOERT_CLUSTER_DIR="$other" bash "$cluster" status > "$work/other-status.log" 2>&1 || fail "the refused up disturbed the other cluster"
  ctld="$(cat "$other/slurm/slurmctld.pid")"
  kill -0 "$ctld" || fail "the other cluster's slurmctld is not running"
  # Stale: its state folder gone, as when its run is killed and its build tree removed.
  rm -rf "$other"
  up --nodes 2
  grep -qF "taking down the stale cluster of $other" "$work/up.log" || { cat "$work/up.log" >&2; fail "up did not say it took the stale cluster down"; }
  for _ in $(seq 50); do kill -0 "$ctld" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$ctld" 2>/dev/null; then fail "the stale cluster's slurmctld ($ctld) still runs"; fi
  bash "$cluster" status > "$work/status.log" 2>&1 || { cat "$work/status.log" >&2; fail "the new cluster is not up"; }
  grep -q "state in $MOERT_CLUSTER_DIR" "$work/status.log" || fail "status does not show the new cluster's state folder"
  bash "$cluster" exec moert-node2 true || fail "moert-node2 of the new cluster cannot run a command"
}

case "$mode" in
  ep) mode_ep ;;
  agree) mode_agree ;;
  slurm) mode_slurm ;;
  loss-kill) mode_loss kill ;;
  loss-link) mode_loss link ;;
  stale) mode_stale ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
echo "[${SECONDS}s] PASS: $mode"
