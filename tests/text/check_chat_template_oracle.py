#!/usr/bin/env python3
"""Checks the chat template oracle against Python's Jinja (docs/chat_template.md, "Test data").

tests/data/chat_templates/<name>.oracle.jsonl is made by @huggingface/jinja
(tests/text/make_chat_template_oracle.js). transformers renders chat templates with Python's
Jinja2 instead; this script renders every case the way transformers sets Jinja up
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
raise_exception and strftime_now) and reports every case where the two disagree. The committed
data has none. Needs only the jinja2 package (Debian: python3-jinja2); not run by the tests.

Usage: python3 tests/text/check_chat_template_oracle.py tests/data/chat_templates
"""
import datetime
import glob
import json
import os
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(Exception):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' tojson filter (Jinja's own escapes HTML characters).
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render(source, case):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    now = datetime.datetime(*case["now"])
    env.globals["strftime_now"] = now.strftime
    try:
        return env.from_string(source).render(**case["context"]), None
    except Raised as e:
        return None, ("raised", str(e))
    except Exception as e:  # noqa: BLE001 - any other error is reported as such
        return None, ("error", f"{type(e).__name__}: {e}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    disagreements = 0
    for path in sorted(glob.glob(os.path.join(folder, "*.oracle.jsonl"))):
        name = os.path.basename(path)[: -len(".oracle.jsonl")]
        with open(os.path.join(folder, name + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        count = 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                case = json.loads(line)
                count += 1
                output, error = render(source, case)
                if "output" in case:
                    ok = output == case["output"]
                    detail = f"python: {error}" if error else "outputs differ"
                else:
                    ok = error is not None and (not case["raised"] or error == ("raised", case["error"]))
                    detail = f"oracle error {case['error']!r}, python: {error or 'rendered'}"
                if not ok:
                    disagreements += 1
                    print(f"{name} {case['case']}: {detail}")
        print(f"{name}: {count} cases checked")
    print(f"{disagreements} disagreements")
    sys.exit(1 if disagreements else 0)


if __name__ == "__main__":
    main()
