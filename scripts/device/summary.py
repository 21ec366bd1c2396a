"""Assembles summary.json of scripts/device-check.sh from its state folder (Python standard
library only: it runs beside, not inside, the machine's PyTorch environment).

usage: python3 -I summary.py STATE_DIR > summary.json

STATE_DIR holds: steps/NN-name.json (one JSON line per step: name, kind, status, rc, seconds,
limit_s, note), results/ (what the steps wrote: *.gtest.json, *.jsonl, *.json, bench logs),
manifest.json (the pack's), and one-line files mode, dry_run, budget_s, started, run_state.

The verdict: "fail" when a setup or correctness step failed or hit its limit; "pass" when every
one of them passed (the build step may be skipped) and their GoogleTest reports skipped no
case; "incomplete" otherwise (still running, killed, skipped for want of time or of a binary
or a reference). Performance steps never change the verdict.
"""
import datetime
import glob
import json
import os
import re
import sys


def read_text(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        return {"unreadable": f"{os.path.basename(path)}: {error}"}


def gtest_counts(report):
    """Counts and the first failed cases of a GoogleTest JSON report."""
    if "unreadable" in report:
        return report
    failed = []
    skipped = 0
    for suite in report.get("testsuites", []):
        for case in suite.get("testsuite", []):
            skipped += case.get("result") == "SKIPPED"
            if case.get("failures"):
                message = case["failures"][0].get("failure", "").strip().splitlines()
                failed.append({"case": f"{suite.get('name')}.{case.get('name')}",
                               "first_line": message[0][:300] if message else ""})
    return {"tests": report.get("tests"), "failures": report.get("failures"), "skipped": skipped,
            "disabled": report.get("disabled"), "errors": report.get("errors"), "seconds": report.get("time"),
            "failed": failed[:20]}


def bench_lines(path):
    """The `moert bench` result lines (key=value with output_tok_s) of a log."""
    lines = []
    try:
        with open(path) as f:
            for line in f:
                fields = dict(re.findall(r"(\w+)=([0-9.]+)", line))
                if "output_tok_s" in fields:
                    lines.append({key: float(value) for key, value in fields.items()})
    except OSError:
        pass
    return lines


def results_of(results_dir):
    results = {}
    for path in sorted(glob.glob(os.path.join(results_dir, "*"))):
        name = os.path.basename(path)
        if name.endswith(".gtest.json"):
            results[name[:-len(".gtest.json")]] = gtest_counts(read_json(path))
        elif name.endswith(".jsonl"):
            rows = []
            with open(path) as f:
                for line in f:
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except ValueError:
                            rows.append({"unreadable": line.strip()[:300]})
            results[name[:-len(".jsonl")]] = rows
        elif name.endswith(".json"):
            results[name[:-len(".json")]] = read_json(path)
        elif name == "gpu.csv":
            fields = [f.strip() for f in (read_text(path) or "").split("\n")[0].split(",")]
            keys = ("name", "driver", "compute_cap", "memory")
            results["gpu"] = dict(zip(keys, fields))
        elif name.endswith(".log"):
            lines = bench_lines(path)
            if lines:
                results[name[:-len(".log")]] = lines
    decode = results.get("moert-bench")
    bf16 = decode[0]["output_tok_s"] if decode else None
    ratios = {}
    for fmt in ("fp8", "nvfp4", "mxfp4"):
        lines = results.get(f"formats-{fmt}")
        if lines and bf16:
            ratios[fmt] = round(lines[0]["output_tok_s"] / bf16, 3)
    if ratios:
        results["decode_batch1_vs_bf16"] = ratios
    graphs = {}
    for mode in ("graphs", "eager"):
        rates = [lines[0]["output_tok_s"] for r in (1, 2) for lines in [results.get(f"graphs-{mode}-{r}")] if lines]
        graphs[mode + "_output_tok_s"] = max(rates) if rates else None
        # The "cuda graphs:" lines show whether the replays happened.
        usage = []
        for r in (1, 2):
            try:
                with open(os.path.join(results_dir, f"graphs-{mode}-{r}.log")) as f:
                    usage += [line.strip() for line in f if line.startswith("cuda graphs:")]
            except OSError:
                pass
        graphs[mode + "_usage"] = usage
    if graphs["graphs_output_tok_s"] and graphs["eager_output_tok_s"]:
        graphs["ratio"] = round(graphs["graphs_output_tok_s"] / graphs["eager_output_tok_s"], 3)
        results["decode_batch1_cuda_graphs"] = graphs
    return results


def verdict_of(steps, results):
    """A correctness step whose GoogleTest report skipped a case does not count as passed."""
    gating = [s for s in steps if s.get("kind") in ("setup", "correctness")]
    if any(s.get("status") in ("fail", "timeout") for s in gating):
        return "fail"

    def passed(step):
        if step.get("name") == "build" and step.get("status") == "skipped":
            return True
        report = results.get(step.get("name"))
        return step.get("status") == "pass" and not (isinstance(report, dict) and report.get("skipped"))

    return "pass" if gating and all(passed(s) for s in gating) else "incomplete"


def main():
    state = sys.argv[1]
    steps = []
    for path in sorted(glob.glob(os.path.join(state, "steps", "*.json"))):
        try:
            steps.append(read_json(path))
        except ValueError:
            steps.append({"unreadable": os.path.basename(path)})
    run_state = read_text(os.path.join(state, "run_state"), "running")
    started = read_text(os.path.join(state, "started"))
    now = datetime.datetime.now(datetime.timezone.utc)
    elapsed = None
    if started:
        start = datetime.datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
        elapsed = round((now - start).total_seconds(), 1)
    results = results_of(os.path.join(state, "results"))
    manifest = read_json(os.path.join(state, "manifest.json")) if os.path.exists(os.path.join(state, "manifest.json")) else None
    summary = {
        "schema": "moert-device-check/1",
        "mode": read_text(os.path.join(state, "mode")),
        "dry_run": read_text(os.path.join(state, "dry_run")) == "1",
        "commit": (manifest or {}).get("commit"),
        "state": run_state,
        "verdict": verdict_of(steps, results),
        "started": started,
        "updated": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "elapsed_s": elapsed,
        "budget_s": int(read_text(os.path.join(state, "budget_s"), "0")),
        "steps": steps,
        "results": results,
        "pack": manifest,
    }
    json.dump(summary, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
