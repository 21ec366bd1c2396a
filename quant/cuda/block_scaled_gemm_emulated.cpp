// block_scaled_gemm in the emulation: the definition of block_scaled_gemm.h computed on the
// CPU (float64 sums, rounded once), reading the scales through the tiled layout as the
// tensor cores do, so the backend's block-scaled path is tested here end to end: only the
// library call itself is the GPU's (docs/cuda-backend.md "Block-scaled FP4").
#include "quant/cuda/block_scaled_gemm.h"

#include <atomic>
#include <vector>

#include "quant/formats/fp4.h"
#include "quant/formats/minifloat.h"
#include "core/cuda/emulation/emulated_runtime.h"

namespace moert::cuda_emulation {
namespace {
std::atomic<int64_t> gemm_calls{0};
}  // namespace
int64_t block_scaled_gemm_calls() { return gemm_calls; }
}  // namespace moert::cuda_emulation

namespace moert::cuda_emulated {
namespace {

// Row `row` of an operand decoded: e2m1 code * its block's scale.
std::vector<double> decode_row(Fp4Activations format, const BlockScaledOperand& operand, int64_t row, int64_t k) {
  const int64_t block = fp4_activation_block(format), scale_cols = k / block;
  const auto* codes = static_cast<const uint8_t*>(operand.codes) + row * (k / 2);
  std::vector<double> values(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    const uint8_t scale_code = operand.tiled_scales[quant::scale_tile_offset(row, i / block, scale_cols)];
    const double scale = format == Fp4Activations::kNvfp4 ? quant::e4m3_decode(scale_code) : quant::e8m0_decode(scale_code);
    const uint8_t code = i % 2 == 0 ? codes[i / 2] & 0xF : codes[i / 2] >> 4;
    values[static_cast<size_t>(i)] = quant::e2m1_decode(code) * scale;
  }
  return values;
}

}  // namespace

int block_scaled_gemm(Fp4Activations format, const BlockScaledOperand& w, const BlockScaledOperand& x, int64_t k,
                      float alpha, float* y, void* /*workspace*/, CUstream_st* /*stream*/) {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (major < 10 || format == Fp4Activations::kNone || k % 32 != 0) return kBlockScaledUnsupported;
  auto compute = [=] {
    ++cuda_emulation::gemm_calls;
    std::vector<std::vector<double>> weight_rows;
    for (int64_t n = 0; n < w.rows; ++n) weight_rows.push_back(decode_row(format, w, n, k));
    for (int64_t r = 0; r < x.rows; ++r) {
      const std::vector<double> xr = decode_row(format, x, r, k);
      for (int64_t n = 0; n < w.rows; ++n) {
        double sum = 0.0;
        for (int64_t i = 0; i < k; ++i) sum += xr[static_cast<size_t>(i)] * weight_rows[static_cast<size_t>(n)][static_cast<size_t>(i)];
        y[r * w.rows + n] = static_cast<float>(alpha * sum);
      }
    }
  };
  // A graph records the library call as it records a kernel.
  if (cuda_emulation::capturing()) {
    cuda_emulation::record(compute);
  } else {
    compute();
  }
  return 0;
}

}  // namespace moert::cuda_emulated
