#include "quant/cpu/quantized_linear.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "core/cpu/isa.h"
#include "quant/cpu/linear.h"
#include "quant/cpu/quantized_linear_tiles.h"
#if defined(MOERT_X86_KERNELS)
#include "quant/cpu/x86/quantized_linear_x86.h"
#endif
#if defined(MOERT_ARM_KERNELS)
#include "quant/cpu/arm/quantized_linear_neon.h"
#endif
#include "quant/formats/fp4.h"
#include "quant/formats/fp8.h"
#include "quant/formats/minifloat.h"
#include "core/check.h"

namespace moert::quant {
namespace {

using namespace qlinear_detail;  // the canonical lanes, RowRef, weight_at, the row driver

// Every scale the SIMD paths multiply by 256 (FP8 block and tensor scales, the NVFP4 global
// scale: see kFp8FoldLimit) stays finite (else the portable path runs).
bool fp8_scales_foldable(const QuantizedWeightView& w) {
  if (w.format == WeightFormat::kFp8Tensor || w.format == WeightFormat::kNvfp4) return scale_foldable(w.global_scale);
  if (w.format != WeightFormat::kFp8Block) return true;
  const int64_t count = ((w.rows + kFp8BlockSize - 1) / kFp8BlockSize) * ((w.cols + kFp8ScaleCols - 1) / kFp8ScaleCols);
  for (int64_t i = 0; i < count; ++i) {
    if (!scale_foldable(w.block_scale_inv[i])) return false;
  }
  return true;
}

// ---- Portable --------------------------------------------------------------------------------
template <WeightFormat f>
void tile_portable(int rows, const float* x, int64_t x_stride, int64_t k, const RowRef& w, float* out) {
  float lanes[4][kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float wv = weight_at<f>(w, i + l);
      for (int r = 0; r < rows; ++r) lanes[r][l] = std::fma(x[r * x_stride + i + l], wv, lanes[r][l]);
    }
  }
  for (int r = 0; r < rows; ++r) {
    out[r] = finish(lanes[r], kIdentity, x + r * x_stride, i, k, [&](int64_t j) { return weight_at<f>(w, j); });
  }
}

// The portable path: one weight row per tile, up to 4 x rows.
struct PortableKernel {
  static constexpr int kRows = 4;
  static constexpr int kCols = 1;
  template <WeightFormat f, int rows, int cols>
  static void tile(const float* x, int64_t k, const RowRef* w, float* out) {
    tile_portable<f>(rows, x, k, k, w[0], out);
  }
};

// ---- Dispatch ----------------------------------------------------------------------------------
using Isa = cpu::CpuIsa;
inline Isa active_isa() { return cpu::active_cpu_isa(); }

void check_call(int64_t num_rows, const QuantizedWeightView& w) {
  const Status status = validate_quantized_weight(w);
  MOERT_CHECK(status.is_ok(), "" << status.to_string());
  MOERT_CHECK(num_rows >= 0, "num_rows = " << num_rows);
}

void rows_on_path(Isa isa, const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias, float* y,
                  int64_t begin, int64_t end) {
  // A scale too large to carry the FP8 decode's 2^8 (never the case for real checkpoints)
  // takes the portable path, which gives the same bits.
  if (isa != Isa::kPortable && !fp8_scales_foldable(w)) isa = Isa::kPortable;
  switch (isa) {
#if defined(MOERT_X86_KERNELS)
    case Isa::kAvx512: return x86::quantized_linear_rows_avx512(x, num_rows, w, bias, y, begin, end);
    case Isa::kAvx2: return x86::quantized_linear_rows_avx2(x, num_rows, w, bias, y, begin, end);
#else
    case Isa::kAvx512:
    case Isa::kAvx2:  // never selected without the x86 kernels (core/cpu/isa.cpp)
#endif
#if defined(MOERT_ARM_KERNELS)
    case Isa::kNeon:  // the NEON tiles read FP4 codes in the checkpoint order (the one NEON prefers)
      if (w.code_order == Fp4CodeOrder::kCheckpoint) {
        return arm::quantized_linear_rows_neon(x, num_rows, w, bias, y, begin, end);
      }
      return forward_kernel<PortableKernel>(x, num_rows, w, bias, y, begin, end);
#else
    case Isa::kNeon:  // never selected without the AArch64 kernels
#endif
    case Isa::kPortable: return forward_kernel<PortableKernel>(x, num_rows, w, bias, y, begin, end);
  }
}

void forward_on_path(Isa isa, const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias,
                     float* y, ThreadPool& pool) {
  check_call(num_rows, w);
  if (num_rows == 0 || w.rows == 0) return;
  pool.parallel_for(w.rows, linear_row_grain(w.cols),
                    [&](int64_t begin, int64_t end) { rows_on_path(isa, x, num_rows, w, bias, y, begin, end); });
}

}  // namespace

Fp4CodeOrder preferred_fp4_code_order(WeightFormat format) {
  const Isa isa = active_isa();
  const bool chunk32 = (isa == Isa::kAvx512 && format == WeightFormat::kNvfp4) ||
                       ((isa == Isa::kAvx512 || isa == Isa::kAvx2) && format == WeightFormat::kMxfp4);
  return chunk32 ? Fp4CodeOrder::kCpuChunk32 : Fp4CodeOrder::kCheckpoint;
}

const char* quantized_linear_isa_name() { return cpu::cpu_isa_label(active_isa()); }

void quantized_linear_forward(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias,
                              float* y, ThreadPool& pool) {
  forward_on_path(active_isa(), x, num_rows, w, bias, y, pool);
}

void quantized_linear_forward_portable(const float* x, int64_t num_rows, const QuantizedWeightView& w,
                                       const float* bias, float* y, ThreadPool& pool) {
  forward_on_path(Isa::kPortable, x, num_rows, w, bias, y, pool);
}

void quantized_linear_rows(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias, float* y,
                           int64_t begin, int64_t end) {
  check_call(num_rows, w);
  MOERT_CHECK(0 <= begin && begin <= end && end <= w.rows, "rows [" << begin << ", " << end << ") of " << w.rows);
  if (num_rows == 0 || begin == end) return;
  rows_on_path(active_isa(), x, num_rows, w, bias, y, begin, end);
}

}  // namespace moert::quant
