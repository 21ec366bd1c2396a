#!/bin/sh
# Usage: expect_job_failure.sh <seconds> <extended regex> <command...>
# Passes when <command> exits non-zero within <seconds> and its output (stdout and
# stderr) matches <regex>; fails when it succeeds, hangs, or prints no such line.
limit=$1
pattern=$2
shift 2
out=$(timeout -k 5 "$limit" "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "FAIL: the job was still running after ${limit}s (exit $rc): a rank hangs"
  exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the job exited 0 although a rank failed"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then
  echo "FAIL: the output has no line matching /$pattern/"
  exit 1
fi
echo "PASS: the job ended with exit code $rc and a line matching /$pattern/"
