#!/usr/bin/env bash
# usage: expect_gpu_test.sh COMMAND...   (a cuda-labelled test binary, or mpirun ... binary)
# MOERT_EXPECT_GPU=1 turns "no GPU" into a failure: run COMMAND (with a filter that selects
# no case, so it is cheap) without the variable, then with it:
#   no GPU here: 77 (skipped) without, 1 with, naming MOERT_EXPECT_GPU;
#   a GPU here:  0 both times.
set -uo pipefail
without=$(env -u MOERT_EXPECT_GPU "$@" --gtest_filter=NoSuchSuite.NoSuchCase 2>&1); rc_without=$?
with=$(MOERT_EXPECT_GPU=1 "$@" --gtest_filter=NoSuchSuite.NoSuchCase 2>&1); rc_with=$?
echo "without MOERT_EXPECT_GPU: exit $rc_without: $without"
echo "with MOERT_EXPECT_GPU=1: exit $rc_with: $with"
case $rc_without in
  77) [ "$rc_with" = 1 ] && grep -q "MOERT_EXPECT_GPU=1" <<< "$with" ||
        { echo "FAILED: without a GPU, MOERT_EXPECT_GPU=1 must fail (exit 1) naming the variable"; exit 1; } ;;
  0) [ "$rc_with" = 0 ] || { echo "FAILED: with a GPU, MOERT_EXPECT_GPU=1 must change nothing"; exit 1; } ;;
  *) echo "FAILED: exit $rc_without without MOERT_EXPECT_GPU: expected 0 (a GPU) or 77 (none)"; exit 1 ;;
esac
echo "MOERT_EXPECT_GPU behaves"
