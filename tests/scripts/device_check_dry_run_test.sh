#!/usr/bin/env bash
# usage: device_check_dry_run_test.sh PATH/TO/scripts/device-check.sh
# The device check's flow without a GPU or a build: a fake pack whose binaries are shell
# scripts (moert fails like a machine without a GPU; the conformance test hangs), run with
# --dry-run (fake nvidia-smi). Checks:
#   1. summary.json is rewritten after every step (one snapshot per step start and end), each
#      snapshot valid JSON with every planned step listed;
#   2. the hanging step is killed at its limit (3 s), reported as "timeout", and the run goes
#      on to the later steps and ends with verdict "fail";
#   3. a run killed with SIGKILL mid-step leaves a valid summary.json showing that step
#      "running" and verdict "incomplete"; one stopped with SIGTERM says "interrupted";
#   4. --perf: its steps, the format and CUDA-graph ratios from the bench lines.
set -uo pipefail
check=$1
scratch=$(mktemp -d "${TMPDIR:-/tmp}/device-check-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

# The fake pack.
pack="$scratch/pack"
mkdir -p "$pack/bundle/bin" "$pack/bundle/lib" "$pack/refs" "$scratch/ref/fake-tiny"
fake() { printf '#!/usr/bin/env bash\n%s\n' "$2" > "$pack/bundle/bin/$1"; chmod +x "$pack/bundle/bin/$1"; }
fake moert 'case "$1" in --help) exit 0 ;; esac; echo "moert: error: --device cuda: no CUDA device is visible" >&2; exit 1'
fake backend_conformance_cuda_test 'echo "hanging"; exec sleep 600'
fake cli_cuda_test 'echo "FAILED: MOERT_EXPECT_GPU=1 but no CUDA device is visible" >&2; exit 1'
fake bench_cuda_decode_attention 'echo "{\"fake\": true}"'
fake bench_cuda_linear 'echo "no CUDA device" >&2; exit 1'
echo '{"prompt_tokens": [1, 2, 3], "gen_tokens": [4, 5]}' > "$scratch/ref/fake-tiny/ref.json"
tar -C "$scratch/ref" -cJf "$pack/refs/fake-tiny.tar.xz" fake-tiny
echo '{"commit": "test", "refs": ["fake-tiny"]}' > "$pack/manifest.json"

json() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); $2" "$1"; }

# 1 and 2: a whole dry run.
out="$scratch/out1" snaps="$scratch/snaps"
begin=$(date +%s)
OUT="$out" MOERT_DEVICE_PACK="$pack" MOERT_CHECK_SNAPSHOTS="$snaps" MOERT_CHECK_TIMEOUT_conformance=3 \
  bash "$check" --dry-run > "$scratch/run1.log" 2>&1
rc=$?
took=$(( $(date +%s) - begin ))
cat "$scratch/run1.log"
[ "$rc" = 1 ] || fail "exit status $rc, expected 1 (verdict fail)"
[ -f "$out/summary.json" ] || fail "no summary.json"
json "$out/summary.json" '
steps = {x["name"]: x for x in s["steps"]}
assert s["state"] == "finished" and s["verdict"] == "fail" and s["dry_run"], (s["state"], s["verdict"])
assert list(steps) == ["gpu", "bundle", "build", "conformance", "score", "cli-cuda", "attention", "linear"], list(steps)
assert steps["gpu"]["status"] == "pass" and steps["bundle"]["status"] == "pass", steps
assert steps["build"]["status"] == "skipped", steps["build"]
c = steps["conformance"]
assert c["status"] == "timeout" and c["limit_s"] == 3 and c["rc"] in (124, 137) and c["seconds"] < 15, c
assert steps["score"]["status"] == "fail" and steps["cli-cuda"]["status"] == "fail", steps
assert "no CUDA device" in steps["cli-cuda"]["note"], steps["cli-cuda"]
assert steps["attention"]["status"] == "pass" and s["results"]["attention"] == {"fake": True}, s["results"]
assert steps["linear"]["status"] == "fail", steps["linear"]
assert s["results"]["score"][0]["reference"] == "fake-tiny" and not s["results"]["score"][0]["pass"], s["results"]
assert s["results"]["gpu"]["compute_cap"] == "9.0", s["results"]
assert s["pack"]["commit"] == "test"
' || fail "summary.json of the dry run"
# grep reads the whole listing (grep -q would stop early, and under pipefail tar's SIGPIPE
# would fail the check when the listing outgrows the pipe's first read).
[ -f "$out/logs.tar.gz" ] && tar -tzf "$out/logs.tar.gz" | grep 'logs/conformance.log' > /dev/null ||
  fail "logs.tar.gz lacks the step logs"
# Every step that ran was written as running then as finished: 1 (plan) + 2 per step run
# (7: the build step is decided without running) + 1 (finished).
count=$(ls "$snaps" | wc -l)
[ "$count" -ge 16 ] || fail "$count summaries written, expected at least 16 (before and after each step)"
for snap in "$snaps"/*.json; do
  json "$snap" 'assert len(s["steps"]) == 8, len(s["steps"])' || fail "snapshot $(basename "$snap") is not a valid summary"
done
seen=$(for snap in "$snaps"/*.json; do json "$snap" 'print(" ".join(x["name"] + ":" + x["status"] for x in s["steps"]))'; done)
for expected in "conformance:running" "conformance:timeout" "score:running" "score:fail" "linear:running" "linear:fail"; do
  grep -q "$expected" <<< "$seen" || fail "no summary showed $expected"
done

# 3: killed from outside during the hanging step (its own limit 60 s): the whole process
# group, as the device tool kills a command at its limit (KILL), or the script alone (TERM).
for signal in KILL TERM; do
  out="$scratch/out-$signal"
  OUT="$out" MOERT_DEVICE_PACK="$pack" MOERT_CHECK_TIMEOUT_conformance=60 \
    setsid bash "$check" --dry-run > "$scratch/run-$signal.log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do  # the summary shows the step running before the log says it started
    grep -q 'conformance: start' "$out/check.log" 2> /dev/null && break
    sleep 0.1
  done
  if [ "$signal" = KILL ]; then kill -KILL -- "-$pid"; else kill -TERM "$pid"; fi
  wait "$pid" 2> /dev/null
  [ "$signal" = TERM ] && kill -KILL -- "-$pid" 2> /dev/null  # the hanging fake, had it outlived the script
  [ -f "$out/summary.json" ] || fail "SIG$signal: no summary.json"
  expected_state=running; [ "$signal" = TERM ] && expected_state=interrupted
  json "$out/summary.json" "
steps = {x['name']: x for x in s['steps']}
assert s['state'] == '$expected_state' and s['verdict'] == 'incomplete', (s['state'], s['verdict'])
assert steps['conformance']['status'] == 'running', steps['conformance']
assert steps['score']['status'] == 'pending', steps['score']
" || fail "SIG$signal: summary.json after the kill"
  ls "$out" | grep 'tmp$' > /dev/null && fail "SIG$signal: a temporary file was left in OUT: $(ls "$out")"
done
# 4: the --perf call's flow and figures, with a moert that prints bench lines.
fake moert 'case "$1" in make-model|quantize) exit 0 ;; bench) rate=100; [[ "$*" == *enforce-eager* ]] && rate=80
  [[ "$*" == *-fp8* ]] && rate=150; echo "batch=1 output_tok_s=$rate"; echo "cuda graphs: 3 replays" ;; esac'
out="$scratch/out-perf"
OUT="$out" MOERT_DEVICE_PACK="$pack" bash "$check" --dry-run --perf > "$scratch/run-perf.log" 2>&1
json "$out/summary.json" '
steps = {x["name"]: x for x in s["steps"]}
assert s["mode"] == "perf" and s["state"] == "finished", s
assert list(steps) == ["gpu", "bundle", "build", "make-large", "moert-bench", "hf-bench", "graphs", "nccl", "formats"], list(steps)
assert steps["nccl"]["status"] == "skipped", steps["nccl"]
r = s["results"]
assert r["decode_batch1_vs_bf16"] == {"fp8": 1.5, "nvfp4": 1.0, "mxfp4": 1.0}, r["decode_batch1_vs_bf16"]
g = r["decode_batch1_cuda_graphs"]
assert g["ratio"] == 1.25 and g["graphs_usage"] == ["cuda graphs: 3 replays"] * 2, g
' || { cat "$scratch/run-perf.log"; fail "summary.json of the --perf dry run"; }
echo "device check dry run: flow, step timeout, killed runs and --perf as expected (first run ${took} s)"
