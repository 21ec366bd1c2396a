// Logits against a float64 reference saved as .npy ([rows, vocab] float32, the layout of the
// shared reference outputs): the largest per-row relative L2 error, each row over `tolerance`
// reported as a test failure. Used by the reference and DSA model tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/io/npy.h"
#include "tests/support/test_support.h"

namespace moert::testing {

inline double max_row_error(const std::vector<float>& actual, const std::string& npy_path, int64_t rows, int64_t vocab,
                            double tolerance = 1e-4) {
  Result<io::NpyArray> expected = io::read_npy(npy_path);
  EXPECT_TRUE(expected.is_ok()) << expected.status().to_string();
  if (!expected.is_ok()) return 1.0;
  EXPECT_EQ(expected->shape, (Shape{rows, vocab})) << npy_path;
  if (expected->shape != Shape{rows, vocab} || static_cast<int64_t>(actual.size()) != rows * vocab) return 1.0;
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const double error = relative_l2_error(actual.data() + r * vocab, expected->values.data() + r * vocab, vocab);
    EXPECT_LT(error, tolerance) << npy_path << " row " << r;
    worst = std::max(worst, error);
  }
  return worst;
}

}  // namespace moert::testing
