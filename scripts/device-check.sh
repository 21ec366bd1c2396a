#!/usr/bin/env bash
# The device check of the CUDA backend (docs/gpu-first-light.md): one prepared device call
# that gives a verdict. It runs the pack made here by scripts/device-pack.sh (.device/:
# binaries built for sm_90a, the shared references that fit the call) as a list of steps,
# each under `timeout`, correctness before performance, and rewrites $OUT/summary.json after
# every step, so a run killed at the call's limit still reports how far it got.
#
# usage: bash scripts/device-check.sh [--perf] [--dry-run]
#   (default)  first light: the GPU seen, the bundle loads, the cuda tests with
#              MOERT_EXPECT_GPU=1 (every op against float64; score/run/bench on the carried
#              references), `moert score --device cuda` per reference against its float64
#              logits, then the attention and linear kernel benchmarks.
#   --perf     the optional second call: the `large` preset made on the device (it is too big
#              to carry), moert beside Hugging Face transformers' generate(), CUDA graphs
#              against eager, the NCCL round trip, batch-1 decode per weight format.
#   --dry-run  here, without a GPU: a fake nvidia-smi (scripts/device/fake-nvidia-smi) on
#              PATH; every GPU step then fails in one line, and the flow is what is checked
#              (tests/scripts/device_check_dry_run_test.sh).
#
# Knobs (environment; all optional):
#   OUT                      where summary.json, check.log and logs.tar.gz go (./device-out)
#   MOERT_DEVICE_PACK        the pack (.device in the repository)
#   MOERT_CHECK_BUDGET_S     seconds for the whole run (first light 450, --perf 270); a step
#                            gets at most what is left, less MOERT_CHECK_RESERVE_S (10)
#   MOERT_CHECK_TIMEOUT_<step>  one step's limit in seconds (step names with '-' as '_')
#   MOERT_CHECK_SNAPSHOTS    a folder that receives a copy of every summary written (tests)
# Exit status: 0 when the verdict is pass, 1 otherwise.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
mode=first-light dry_run=0
for arg in "$@"; do
  case "$arg" in
    --perf) mode=perf ;;
    --dry-run) dry_run=1 ;;
    *) echo "device-check.sh: unknown argument '$arg' (expected --perf or --dry-run)" >&2; exit 2 ;;
  esac
done
out="${OUT:-$repo/device-out}"
pack="${MOERT_DEVICE_PACK:-$repo/.device}"
if [ "$mode" = perf ]; then budget="${MOERT_CHECK_BUDGET_S:-270}"; else budget="${MOERT_CHECK_BUDGET_S:-450}"; fi
reserve="${MOERT_CHECK_RESERVE_S:-10}"
start_s=$(date +%s)
deadline=$((start_s + budget))
mkdir -p "$out"
state="$(mktemp -d "${TMPDIR:-/tmp}/moert-device-check.XXXXXX")"
mkdir -p "$state/steps" "$state/results" "$state/logs" "$state/work"
printf '%s\n' "$mode" > "$state/mode"
printf '%s\n' "$dry_run" > "$state/dry_run"
printf '%s\n' "$budget" > "$state/budget_s"
date -u +%FT%TZ > "$state/started"
: > "$out/check.log"

log() { echo "[device-check $(date -u +%T)] $*" | tee -a "$out/check.log" >&2; }

json_string() {  # a bash string as a JSON string
  local s=$1
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}
  printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\037')"
}

# One line of JSON per step in $state/steps/<NN>-<name>.json, rewritten at each change.
# record IDX NAME KIND STATUS RC SECONDS LIMIT NOTE
record() {
  printf '{"name":%s,"kind":%s,"status":%s,"rc":%s,"seconds":%s,"limit_s":%s,"note":%s}\n' \
    "$(json_string "$2")" "$(json_string "$3")" "$(json_string "$4")" "${5:-null}" "${6:-null}" "${7:-null}" \
    "$(json_string "$8")" > "$state/steps/$1-$2.json"
}

# summary.json from $state: by scripts/device/summary.py (stdlib only, no LD_LIBRARY_PATH),
# or, should Python fail, by bash from the step lines alone; written to a temporary file
# then renamed, so that a reader (or a kill) never sees half of one.
write_summary() {
  local run_state=${1:-running}
  printf '%s\n' "$run_state" > "$state/run_state"
  if ! env -u LD_LIBRARY_PATH -u PYTHONPATH python3 -I -S "$here/device/summary.py" "$state" > "$out/summary.json.tmp" 2>> "$state/logs/summary.log"; then
    { printf '{"schema":"moert-device-check/1","mode":%s,"state":%s,"verdict":"unknown","note":"summary.py failed: step lines only","steps":[' \
        "$(json_string "$mode")" "$(json_string "$run_state")"
      local first=1 line
      for f in "$state"/steps/*.json; do
        [ -f "$f" ] || continue
        line=$(cat "$f"); [ $first = 1 ] || printf ','; first=0; printf '%s' "$line"
      done
      printf ']}\n'; } > "$out/summary.json.tmp"
  fi
  mv -f "$out/summary.json.tmp" "$out/summary.json"
  if [ "$run_state" != running ] || [ -z "$current_step" ]; then  # not while a step is only starting
    # GNU tar exits 1 when a file changed while it read it (a step's log still being written):
    # the archive is whole up to that moment, so it is kept.
    { tar -C "$state" -czf "$out/logs.tar.gz.tmp" logs results 2> /dev/null || [ $? -eq 1 ]; } &&
      mv -f "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"
  fi
  if [ -n "${MOERT_CHECK_SNAPSHOTS:-}" ]; then
    mkdir -p "$MOERT_CHECK_SNAPSHOTS"
    cp "$out/summary.json" "$MOERT_CHECK_SNAPSHOTS/$(date +%s%N).json"
  fi
}

current_step="" step_pid=""
on_signal() {
  [ -n "$step_pid" ] && kill -TERM "$step_pid" 2> /dev/null
  [ -n "$current_step" ] && log "interrupted during step $current_step"
  write_summary interrupted
  exit 1
}
trap on_signal TERM INT HUP
trap 'rm -rf "$state"' EXIT

# The plan: every step is listed as pending before any runs.
# plan NAME KIND LIMIT_S FUNCTION
declare -a step_names=() step_kinds=() step_limits=() step_functions=()
plan() {
  local override="MOERT_CHECK_TIMEOUT_${1//-/_}"
  step_names+=("$1"); step_kinds+=("$2"); step_limits+=("${!override:-$3}"); step_functions+=("$4")
}

# run_step INDEX: the step's function under `timeout` (signals reach its whole process
# group); rc 124/137 = killed at its limit.
run_step() {
  local i=$1 name=${step_names[$1]} kind=${step_kinds[$1]} fn=${step_functions[$1]}
  local idx; idx=$(printf '%02d' "$i")
  local limit=${step_limits[$i]}
  local left=$((deadline - $(date +%s) - reserve))
  if [ "$left" -lt 5 ]; then
    record "$idx" "$name" "$kind" skipped null 0 "$limit" "no time left in the ${budget} s budget"
    log "$name: skipped (no time left)"; write_summary; return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  current_step=$name
  record "$idx" "$name" "$kind" running null null "$limit" ""
  write_summary
  log "$name: start (limit ${limit} s)"
  local t0 t1 rc status note=""
  t0=$(date +%s%N)
  # In the background and waited for, so that a TERM to this script is handled at once.
  STEP="$name" timeout -k 5 "$limit" bash -c "$fn" > "$state/logs/$name.log" 2>&1 &
  step_pid=$!
  wait "$step_pid"
  rc=$?
  step_pid=""
  t1=$(date +%s%N)
  local seconds; seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  case $rc in
    0) status=pass ;;
    124|137) status=timeout; note="killed at its ${limit} s limit" ;;
    77) status=skipped; note="$(tail -1 "$state/logs/$name.log")" ;;
    *) status=fail; note="$(grep -v '^\s*$' "$state/logs/$name.log" | tail -1 | cut -c1-300)" ;;
  esac
  record "$idx" "$name" "$kind" "$status" "$rc" "$seconds" "$limit" "$note"
  current_step=""
  write_summary
  log "$name: $status (rc $rc, ${seconds} s)${note:+: $note}"
  [ "$status" = pass ]
}

# ---- The environment the steps run in (exported: each step is a fresh bash) -------------
export MOERT_LOG_LEVEL=warn MOERT_EXPECT_GPU=1 STATE="$state" HERE="$here" PACK="$pack" MODE="$mode"
export WORK="$state/work" RESULTS="$state/results" SHARED="$state/shared"
if [ "$dry_run" = 1 ]; then
  mkdir -p "$state/fake-bin"
  ln -s "$here/device/fake-nvidia-smi" "$state/fake-bin/nvidia-smi"
  export PATH="$state/fake-bin:$PATH"
fi
# The bundle: a folder, or (as device-pack.sh makes it) bundle.tar.xz, unpacked by step_bundle.
if [ -d "$pack/bundle" ]; then export BUNDLE="${MOERT_DEVICE_BUNDLE:-$pack/bundle}"; else export BUNDLE="${MOERT_DEVICE_BUNDLE:-$state/bundle}"; fi
# The bundle's shared libraries, for its binaries only (never for python3): `bundled CMD`.
bundled() { env LD_LIBRARY_PATH="$BUNDLE/lib${NCCL_LIB:+:$NCCL_LIB}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
py() { env -u LD_LIBRARY_PATH -u PYTHONPATH python3 -I "$@"; }
export -f bundled py

# ---- Steps -------------------------------------------------------------------------------
step_gpu() {
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader > "$RESULTS/gpu.csv"
  cat "$RESULTS/gpu.csv"
}
# Every bundled binary resolves its libraries and starts; the pack's references unpacked.
unpack() {  # unpack ARCHIVE.tar.xz FOLDER: Python's tarfile where tar cannot run xz
  tar -C "$2" -xJf "$1" 2> /dev/null || py -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"
}
step_bundle() {
  if [ ! -d "$BUNDLE/bin" ] && [ -f "$PACK/bundle.tar.xz" ]; then
    mkdir -p "$BUNDLE" && unpack "$PACK/bundle.tar.xz" "$(dirname "$BUNDLE")" && echo "unpacked bundle.tar.xz"
  fi
  [ -d "$BUNDLE/bin" ] || { echo "no bundle at $BUNDLE/bin (make it with scripts/device-pack.sh)"; exit 1; }
  local bad=0 binary
  for binary in "$BUNDLE"/bin/*; do
    if bundled ldd "$binary" 2>&1 | grep 'not found' > /dev/null; then
      echo "$(basename "$binary"): $(bundled ldd "$binary" 2>&1 | grep 'not found' | tr -s ' \t' ' ' | paste -sd';')"; bad=1
    fi
  done
  bundled "$BUNDLE/bin/moert" --help > /dev/null 2>&1 || { echo "moert --help failed"; bad=1; }
  mkdir -p "$SHARED/reference"
  for packed in "$PACK"/refs/*.tar.xz; do
    [ -f "$packed" ] || continue
    unpack "$packed" "$SHARED/reference" || bad=1
    echo "unpacked $(basename "$packed")"
  done
  exit $bad
}
# Fallback when the bundle does not load here: build for this GPU in the repository's
# build-device (needs CMake, Ninja and nvcc; the tests only where GoogleTest is installed).
step_build() {
  local cap; cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
  [ "$cap" = 90 ] && cap=90a
  local build="$HERE/../build-device"
  cmake -S "$HERE/.." -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERT_CUDA_ARCHS="$cap" -DMOERT_WITH_MPI=OFF \
    -DMOERT_BUILD_TESTS="$( [ -n "$(ls /usr/lib/*/libgtest* /usr/lib/libgtest* 2> /dev/null)" ] && echo ON || echo OFF)" || exit 1
  cmake --build "$build" -j"$(nproc)" --target moert bench_cuda_decode_attention bench_cuda_linear || exit 1
  cmake --build "$build" -j"$(nproc)" --target backend_conformance_cuda_test cli_cuda_test bench_nccl_round_trip || true
  mkdir -p "$BUNDLE/bin"
  for t in launch/moert tests/runtime/backend/backend_conformance_cuda_test tests/launch/cli_cuda_test \
           runtime/backend/cuda/bench_cuda_decode_attention runtime/comm/bench_nccl_round_trip runtime/backend/cuda/bench_cuda_linear; do
    [ -f "$build/$t" ] && cp "$build/$t" "$BUNDLE/bin/"
  done
  true
}
need() { [ -x "$BUNDLE/bin/$1" ] || { echo "$1 is not in the bundle"; exit 77; }; }
step_conformance() {
  need backend_conformance_cuda_test
  bundled "$BUNDLE/bin/backend_conformance_cuda_test" --gtest_output="json:$RESULTS/$STEP.gtest.json"
}
step_score() {
  need moert
  local ref name failed=0 tokens n
  ls "$SHARED/reference" | grep -q . || { echo "no references in the pack"; exit 77; }
  for ref in "$SHARED"/reference/*/; do
    name=$(basename "$ref")
    [ -f "$ref/ref.json" ] || continue
    tokens=$(py -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['prompt_tokens'])))" "$ref/ref.json")
    n=$(py -c "import json,sys; print(len(json.load(open(sys.argv[1]))['gen_tokens']))" "$ref/ref.json")
    echo "== $name"
    timeout -k 5 "${MOERT_CHECK_SCORE_TIMEOUT_S:-60}" bash -c 'bundled "$@"' _ "$BUNDLE/bin/moert" score --device cuda --model "$ref/hf" \
      --tokens "$tokens" -n "$n" --out "$WORK/score-$name" 2>&1 | tail -5
    py "$HERE/device/compare_score.py" "$ref" "$WORK/score-$name" "$name" >> "$RESULTS/$STEP.jsonl" || failed=1
  done
  exit $failed
}
step_cli_cuda() {
  need cli_cuda_test
  ls "$SHARED/reference" 2> /dev/null | grep -q . || { echo "no references in the pack: cli_cuda_test would skip its cases"; exit 77; }
  mkdir -p "$WORK/cli" && cd "$WORK/cli" || exit 1
  MOERT_BIN="$BUNDLE/bin/moert" MOERT_SHARED_DIR="$SHARED" bundled "$BUNDLE/bin/cli_cuda_test" \
    --gtest_output="json:$RESULTS/$STEP.gtest.json"
}
step_attention() {
  need bench_cuda_decode_attention
  bundled "$BUNDLE/bin/bench_cuda_decode_attention" --batch 32 --context 4096 > "$RESULTS/$STEP.json"
}
step_linear() {
  need bench_cuda_linear
  bundled "$BUNDLE/bin/bench_cuda_linear" --n 16384 --k 16384 --prefill-rows 512 > "$RESULTS/$STEP.json"
}
# --perf: the `large` preset is ~800 MB of weights, more than a call carries: made here.
step_make_large() {
  need moert
  bundled "$BUNDLE/bin/moert" make-model --arch qwen3_moe --preset large --out "$WORK/large"
}
moert_bench() {  # moert_bench MODEL LOG [extra args]
  local model=$1 log=$2; shift 2
  bundled "$BUNDLE/bin/moert" bench --device cuda --model "$model" --input-len 64 --output-len 64 --kv-cache-mb 8192 "$@" \
    > "$RESULTS/$log" 2>&1
  local rc=$?; tail -3 "$RESULTS/$log"; return $rc
}
step_moert_bench() { moert_bench "$WORK/large" "$STEP.log" --batch-sizes 1,32; }
step_hf_bench() {
  py "$HERE/device/hf_generate_bench.py" "$WORK/large" --batch-sizes 1,32 --input-len 64 --output-len 64 > "$RESULTS/$STEP.json"
}
step_graphs() {  # batch-1 decode with CUDA graphs against --enforce-eager, interleaved
  local round rc=0
  for round in 1 2; do
    moert_bench "$WORK/large" "$STEP-graphs-$round.log" --batch-sizes 1 || rc=1
    moert_bench "$WORK/large" "$STEP-eager-$round.log" --batch-sizes 1 --enforce-eager || rc=1
  done
  exit $rc
}
step_nccl() {
  need bench_nccl_round_trip
  bundled "$BUNDLE/bin/bench_nccl_round_trip" --tokens 4096 --hidden 7168 --element-bytes 2 > "$RESULTS/$STEP.json"
}
step_formats() {  # batch-1 decode per weight format, as ratios to BF16 (summary.py)
  local format rc=0
  for format in fp8 nvfp4 mxfp4; do
    bundled "$BUNDLE/bin/moert" quantize --model "$WORK/large" --format "$format" --out "$WORK/large-$format" || { rc=1; continue; }
    moert_bench "$WORK/large-$format" "$STEP-$format.log" --batch-sizes 1 || rc=1
  done
  exit $rc
}
export -f unpack step_gpu step_bundle step_build need step_conformance step_score step_cli_cuda step_attention step_linear \
  step_make_large moert_bench step_moert_bench step_hf_bench step_graphs step_nccl step_formats

# NCCL is opened at run time (libnccl.so.2): the system's, else the one of the machine's
# PyTorch (nvidia.nccl); put on the loader path of the bundled binaries only.
if ! ldconfig -p 2> /dev/null | grep 'libnccl\.so\.2' > /dev/null; then
  NCCL_LIB=$(py -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2> /dev/null || true)
  [ -f "$NCCL_LIB/libnccl.so.2" ] || NCCL_LIB=""
  export NCCL_LIB
fi

# ---- The plan: correctness first, then performance --------------------------------------
plan gpu setup 30 step_gpu
plan bundle setup 60 step_bundle
plan build setup 300 step_build  # only when the bundle does not load here
if [ "$mode" = first-light ]; then
  plan conformance correctness 150 step_conformance
  plan score correctness 120 step_score
  plan cli-cuda correctness 150 step_cli_cuda
  plan attention perf 45 step_attention
  plan linear perf 45 step_linear
else
  plan make-large setup 90 step_make_large
  plan moert-bench perf 60 step_moert_bench
  plan hf-bench perf 90 step_hf_bench
  plan graphs perf 60 step_graphs
  plan nccl perf 30 step_nccl
  plan formats perf 90 step_formats
fi
for i in "${!step_names[@]}"; do
  record "$(printf '%02d' "$i")" "${step_names[$i]}" "${step_kinds[$i]}" pending null null "${step_limits[$i]}" ""
done
[ -f "$pack/manifest.json" ] && cp "$pack/manifest.json" "$state/manifest.json"
write_summary
log "$mode$([ "$dry_run" = 1 ] && echo ' (dry run)'): ${#step_names[@]} steps in at most ${budget} s; summary: $out/summary.json"

bundle_ok=0
for i in "${!step_names[@]}"; do
  name=${step_names[$i]}
  idx=$(printf '%02d' "$i")
  if [ "$name" = build ]; then
    if [ "$bundle_ok" = 1 ] || [ "$dry_run" = 1 ]; then
      note="not needed: the bundle loads"; [ "$bundle_ok" = 1 ] || note="not in a dry run"
      record "$idx" build setup skipped null 0 "${step_limits[$i]}" "$note"
      continue
    fi
  fi
  if run_step "$i"; then
    [ "$name" = bundle ] && bundle_ok=1
    continue
  fi
  if [ "$name" = gpu ]; then  # nothing else can run
    for j in "${!step_names[@]}"; do
      [ "$j" -gt "$i" ] && record "$(printf '%02d' "$j")" "${step_names[$j]}" "${step_kinds[$j]}" skipped null 0 \
        "${step_limits[$j]}" "no GPU (step gpu failed)"
    done
    break
  fi
done
write_summary finished
verdict=$(py -c 'import json,sys; print(json.load(open(sys.argv[1])).get("verdict"))' "$out/summary.json" 2> /dev/null)
log "verdict: ${verdict:-unknown} ($(( $(date +%s) - start_s )) s)"
[ "$verdict" = pass ]
