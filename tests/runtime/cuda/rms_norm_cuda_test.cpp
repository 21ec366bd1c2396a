// The CUDA RMSNorm against its CPU twin. Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/cuda/rms_norm.h"
#include "runtime/model/reference_forward.h"

namespace moert {
namespace {

TEST(CudaRmsNorm, MatchesCpuTwin) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 64}, {7, 256}, {33, 1000}}) {
    std::vector<float> x(static_cast<size_t>(rows * dim)), w(static_cast<size_t>(dim));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.8f + 0.4f * std::cos(static_cast<float>(i));
    std::vector<float> expected = x;
    rms_norm_rows(expected.data(), rows, dim, w.data(), 1e-6f);
    ASSERT_EQ(cuda::rms_norm_rows_host(x.data(), rows, dim, w.data(), 1e-6f), 0);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      diff += (x[i] - expected[i]) * (x[i] - expected[i]);
      norm += expected[i] * expected[i];
    }
    EXPECT_LT(std::sqrt(diff / norm), 1e-6) << rows << "x" << dim;
  }
}

}  // namespace
}  // namespace moert
