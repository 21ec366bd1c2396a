#!/usr/bin/env bash
# The device check of the CUDA backend (docs/cuda-backend.md, "Device check"): one prepared
# run on a machine with a GPU. Writes under $OUT (default ./device-out): summary.json and
# the logs it was made from.
#   1. the cuda-labelled tests: every backend op against float64 (conformance harness) and
#      `moert score|run|bench --device cuda` on the shared references;
#   2. `moert score --device cuda` on every shared reference against its float64 logits;
#   3. decode attention bandwidth against a device copy (batch 32, context 4096);
#   4. batch-1 / batch-32 decode and prefill tok/s on `make-model --preset large`, moert
#      beside Hugging Face transformers' generate() on the same checkpoint; (4b) batch-1 decode
#      with CUDA graphs against --enforce-eager, interleaved, as a ratio;
#   5. the expert-parallel exchange through NCCL on one GPU (4096 x 7168 BF16 rows there and
#      back) against a device copy of the same bytes (docs/expert-parallel-gpu.md);
#   6. the linear kernels alone per format: batch-1 weight bandwidth against a device copy and
#      512-row tensor-core throughput against the F16 SIMT tiles (bench_cuda_linear);
#   7. batch-1 decode of the step-4 model as NVFP4, MXFP4 and FP8, as ratios to BF16.
# NCCL is opened at run time (libnccl.so.2): the one of the machine's PyTorch when the system
# has none on the loader path.
# Binaries: $MOERT_DEVICE_BUNDLE/bin (made here by scripts/device-pack.sh, for sm_90a) or,
# without a bundle, a build for the present GPU in build-device (needs the build deps).
# References: $MOERT_SHARED_DIR/reference (default ../shared).
#
# With a packed bundle (scripts/device-pack.sh) the references travel in chunks, one per
# call: `device-check.sh --stage` unpacks this call's .device/refs-*/ (and the bundle) into
# $MOERT_DEVICE_STAGE (.device/stage in the repository: ignored by git, so the device tool
# keeps it between calls while the machine stays warm); the last call runs the check without
# --stage.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
out="${OUT:-$repo/device-out}"
mkdir -p "$out"
stage="${MOERT_DEVICE_STAGE:-$repo/.device/stage}"
log() { echo "[device-check $(date +%T)] $*" | tee -a "$out/check.log"; }

mkdir -p "$stage/shared/reference"
[ -d "$repo/.device/bundle" ] && cp -r "$repo/.device/bundle" "$stage/"
for packed in "$repo"/.device/refs-*/*.tar.xz; do
  [ -f "$packed" ] && tar -C "$stage/shared/reference" -xJf "$packed" && log "staged $(basename "$packed")"
done
if [ "${1:-}" = "--stage" ]; then
  ls "$stage/shared/reference"
  exit 0
fi
if [ -n "$(ls -A "$stage/shared/reference")" ]; then shared="$stage/shared"; else shared="${MOERT_SHARED_DIR:-$repo/../shared}"; fi
bundle="${MOERT_DEVICE_BUNDLE:-$stage/bundle}"

nvidia-smi -L > "$out/gpu.txt" 2>&1 || { log "no GPU visible (nvidia-smi failed)"; exit 1; }
log "$(head -1 "$out/gpu.txt")"

if [ -x "$bundle/bin/moert" ]; then
  bin="$bundle/bin"
  export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  log "no bundle at $bundle: building for this GPU in build-device"
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
  [ "$cap" = 90 ] && cap=90a
  cmake -S "$repo" -B "$repo/build-device" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERT_CUDA_ARCHS="$cap" \
    -DMOERT_BUILD_BENCHMARKS=OFF > "$out/build.log" 2>&1 &&
    cmake --build "$repo/build-device" -j"$(nproc)" --target moert backend_conformance_cuda_test cli_cuda_test \
      bench_cuda_decode_attention bench_nccl_round_trip bench_cuda_linear >> "$out/build.log" 2>&1 || { log "build failed (build.log)"; exit 1; }
  bin="$out/bin"
  mkdir -p "$bin"
  for t in launch/moert tests/runtime/backend/backend_conformance_cuda_test tests/launch/cli_cuda_test \
           runtime/backend/cuda/bench_cuda_decode_attention runtime/comm/bench_nccl_round_trip runtime/backend/cuda/bench_cuda_linear; do cp "$repo/build-device/$t" "$bin/"; done
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
  nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -f "$nccl_lib/libnccl.so.2" ] || nccl_lib=$(dirname "$(find / -name libnccl.so.2 -not -path '/proc/*' 2>/dev/null | head -1)" 2>/dev/null)
  if [ -n "$nccl_lib" ]; then export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$nccl_lib"; fi
  log "libnccl.so.2 from ${nccl_lib:-nowhere (NCCL steps will fail)}"
fi
export MOERT_BIN="$bin/moert" MOERT_SHARED_DIR="$shared" MOERT_LOG_LEVEL=warn
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

log "1. cuda tests"
"$bin/backend_conformance_cuda_test" --gtest_output="json:$out/conformance.json" > "$out/conformance.log" 2>&1
echo "conformance_rc=$?" >> "$out/rc.txt"
(cd "$work" && "$bin/cli_cuda_test" --gtest_output="json:$out/cli_cuda.json") > "$out/cli_cuda.log" 2>&1
echo "cli_cuda_rc=$?" >> "$out/rc.txt"

log "2. score every shared reference on the GPU"
: > "$out/score.jsonl"
for ref in "$shared"/reference/*/; do
  name=$(basename "$ref")
  [ -f "$ref/ref.json" ] || continue
  tokens=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['prompt_tokens'])))" "$ref/ref.json")
  n=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['gen_tokens']))" "$ref/ref.json")
  "$bin/moert" score --device cuda --model "$ref/hf" --tokens "$tokens" -n "$n" --out "$work/$name" \
    > "$out/score-$name.log" 2>&1
  python3 - "$ref" "$work/$name" "$name" >> "$out/score.jsonl" <<'PY'
import json, sys
ref, got, name = sys.argv[1:4]
try:
    import numpy as np
    expected = json.load(open(ref + "/ref.json"))
    scored = json.load(open(got + ".json"))
    errors = []
    for part in ("prompt_logits", "gen_logits"):
        e = np.load(f"{ref}/ref.{part}.npy").astype(np.float64)
        g = np.load(f"{got}.{part}.npy").astype(np.float64)
        n = min(len(e), len(g))
        errors.append(float(np.max(np.linalg.norm(e[:n] - g[:n], axis=1) / np.linalg.norm(e[:n], axis=1))))
    print(json.dumps({"reference": name, "gen_tokens_equal": scored["gen_tokens"] == expected["gen_tokens"],
                      "worst_row_relative_error": max(errors)}))
except Exception as error:  # a failed score: recorded, the check goes on
    print(json.dumps({"reference": name, "error": str(error)}))
PY
done

log "3. decode attention bandwidth vs device copy"
"$bin/bench_cuda_decode_attention" --batch 32 --context 4096 > "$out/attention.json" 2> "$out/attention.log"

log "4. throughput on the large preset, moert and transformers"
"$bin/moert" make-model --arch qwen3_moe --preset large --out "$work/large" > "$out/make-model.log" 2>&1
"$bin/moert" bench --device cuda --model "$work/large" --batch-sizes 1,32 --input-len 64 --output-len 64 \
  --kv-cache-mb 8192 > "$out/moert-bench.log" 2>&1
python3 "$here/device/hf_generate_bench.py" "$work/large" --batch-sizes 1,32 --input-len 64 --output-len 64 \
  > "$out/hf-bench.json" 2> "$out/hf-bench.log"

log "4b. batch-1 decode with and without CUDA graphs (same run, interleaved)"
for round in 1 2; do
  for mode in graphs eager; do
    extra=""; [ "$mode" = eager ] && extra="--enforce-eager"
    "$bin/moert" bench --device cuda --model "$work/large" --batch-sizes 1 --input-len 64 --output-len 64 \
      --kv-cache-mb 8192 $extra > "$out/moert-bench-$mode-$round.log" 2>&1
  done
done

log "5. NCCL dispatch + combine round trip vs device copy"
"$bin/bench_nccl_round_trip" --tokens 4096 --hidden 7168 --element-bytes 2 > "$out/nccl.json" 2> "$out/nccl.log"

log "6. linear kernels per format"
"$bin/bench_cuda_linear" --n 16384 --k 16384 --prefill-rows 512 > "$out/linear.json" 2> "$out/linear.log"

log "7. batch-1 decode per weight format"
for format in nvfp4 mxfp4 fp8; do
  "$bin/moert" quantize --model "$work/large" --format "$format" --out "$work/large-$format" > "$out/quantize-$format.log" 2>&1
  "$bin/moert" bench --device cuda --model "$work/large-$format" --batch-sizes 1 --input-len 64 --output-len 64 \
    --kv-cache-mb 8192 > "$out/moert-bench-$format.log" 2>&1
done

python3 - "$out" "$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)" > "$out/summary.json" <<'PY'
import json, re, sys, datetime
out, commit = sys.argv[1:3]
def load(path, default=None):
    try:
        return json.load(open(path))
    except Exception:
        return default
summary = {"date": datetime.date.today().isoformat(), "commit": commit,
           "gpu": open(out + "/gpu.txt").read().strip(),
           "rc": dict(line.strip().split("=") for line in open(out + "/rc.txt") if "=" in line),
           "score": [json.loads(line) for line in open(out + "/score.jsonl") if line.strip()],
           "attention": load(out + "/attention.json"),
           "transformers": load(out + "/hf-bench.json"), "nccl_round_trip": load(out + "/nccl.json"),
           "linear_kernels": load(out + "/linear.json")}
def bench_lines(path):
    lines = []
    try:
        for line in open(path):
            fields = dict(re.findall(r"(\w+)=([0-9.]+)", line))
            if "output_tok_s" in fields:
                lines.append({k: float(v) for k, v in fields.items()})
    except OSError:
        pass
    return lines
summary["moert_bench"] = bench_lines(out + "/moert-bench.log")
bf16 = summary["moert_bench"][0]["output_tok_s"] if summary["moert_bench"] else None
summary["decode_batch1_vs_bf16"] = {}
for fmt in ("nvfp4", "mxfp4", "fp8"):
    lines = bench_lines(f"{out}/moert-bench-{fmt}.log")
    if lines and bf16:
        summary["decode_batch1_vs_bf16"][fmt] = round(lines[0]["output_tok_s"] / bf16, 3)
# CUDA graphs: decode tok/s of each mode (best of the interleaved rounds) and their ratio;
# the "cuda graphs:" summary line shows whether the graphs were used.
graphs = {}
for mode in ("graphs", "eager"):
    rates = [l[0]["output_tok_s"] for r in (1, 2) for l in [bench_lines(f"{out}/moert-bench-{mode}-{r}.log")] if l]
    graphs[mode + "_output_tok_s"] = max(rates) if rates else None
    try:
        used = [line.strip() for r in (1, 2) for line in open(f"{out}/moert-bench-{mode}-{r}.log")
                if line.startswith("cuda graphs:")]
    except OSError:
        used = []
    graphs[mode + "_usage"] = used
if graphs.get("graphs_output_tok_s") and graphs.get("eager_output_tok_s"):
    graphs["ratio"] = round(graphs["graphs_output_tok_s"] / graphs["eager_output_tok_s"], 3)
summary["decode_batch1_cuda_graphs"] = graphs
print(json.dumps(summary, indent=1))
PY
log "summary: $out/summary.json"
cat "$out/summary.json"
