"""One line of JSON comparing `moert score` output with a shared reference's float64 logits
(Python standard library only: no numpy needed beside the device's PyTorch environment).

usage: python3 -I compare_score.py REF_DIR OUT_PREFIX NAME
Exit status 1 when the greedy tokens differ, the worst row's relative L2 error exceeds
MOERT_SCORE_TOLERANCE (1e-4, the tolerance of tests/launch/cli_cuda_test.cpp), or the score
failed; the line is printed in every case.
"""
import ast
import json
import math
import os
import struct
import sys


def load_npy_f32(path):
    """(rows, cols, values) of a little-endian float32 C-order 2-D .npy file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    major = data[6]
    header_len = struct.unpack("<H", data[8:10])[0] if major == 1 else struct.unpack("<I", data[8:12])[0]
    start = 10 if major == 1 else 12
    header = ast.literal_eval(data[start:start + header_len].decode("latin1"))
    if header["descr"] != "<f4" or header["fortran_order"] or len(header["shape"]) != 2:
        raise ValueError(f"{path}: {header} is not a 2-D little-endian float32 C-order array")
    rows, cols = header["shape"]
    body = data[start + header_len:]
    return rows, cols, struct.unpack(f"<{rows * cols}f", body[:4 * rows * cols])


def worst_row_error(expected, got):
    rows_e, cols, e = expected
    rows_g, cols_g, g = got
    if cols != cols_g:
        raise ValueError(f"vocab {cols_g} != reference vocab {cols}")
    worst = 0.0
    for row in range(min(rows_e, rows_g)):
        base = row * cols
        diff = norm = 0.0
        for i in range(base, base + cols):
            diff += (e[i] - g[i]) ** 2
            norm += e[i] * e[i]
        worst = max(worst, math.sqrt(diff / max(norm, 1e-300)))
    return worst


def main():
    ref, got, name = sys.argv[1:4]
    tolerance = float(os.environ.get("MOERT_SCORE_TOLERANCE", "1e-4"))
    line = {"reference": name, "tolerance": tolerance}
    try:
        with open(os.path.join(ref, "ref.json")) as f:
            expected = json.load(f)
        with open(got + ".json") as f:
            scored = json.load(f)
        line["gen_tokens_equal"] = scored.get("gen_tokens") == expected["gen_tokens"]
        line["worst_row_relative_error"] = max(
            worst_row_error(load_npy_f32(os.path.join(ref, f"ref.{part}.npy")), load_npy_f32(f"{got}.{part}.npy"))
            for part in ("prompt_logits", "gen_logits"))
        line["pass"] = line["gen_tokens_equal"] and line["worst_row_relative_error"] <= tolerance
    except (OSError, ValueError, KeyError) as error:
        line["error"] = str(error)[:300]
        line["pass"] = False
    print(json.dumps(line))
    return 0 if line["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
