#include "quant/cpu/int8_linear.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/cpu/isa.h"
#include "quant/cpu/int8_linear_tiles.h"
#include "quant/cpu/quantized_linear_tiles.h"
#if defined(MOERT_X86_KERNELS)
#include "quant/cpu/x86/int8_linear_x86.h"
#endif
#if defined(MOERT_ARM_KERNELS)
#include "quant/cpu/arm/int8_linear_neon.h"
#endif

namespace moert::quant {
namespace {

using namespace int8_detail;

// One x row t against one weight row, straight from the definition (any code order).
struct PortableInt8Kernel {
  static constexpr int kRows = 1;
  static constexpr int kCols = 1;
  template <int rows, int cols>
  static void tile(const Int8RowsView& x, int64_t t, const Int8Col* w, float* out) {
    const int64_t groups = int8_groups(x.cols);
    const int8_t* codes = x.codes + t * groups * kInt8Group;
    const float* lane_scales = x.lane_scales + t * groups * kInt8GroupLanes;
    float lanes[kInt8GroupLanes] = {};
    for (int64_t g = 0; g < groups; ++g) {
      float block_scales[4];
      for (int b = 0; b < 4; ++b) block_scales[b] = block_scale(w[0], 4 * g + b);
      for (int l = 0; l < kInt8GroupLanes; ++l) {
        int32_t sum = 0;
        for (int j = 4 * l; j < 4 * l + 4; ++j) {
          sum += static_cast<int32_t>(codes[g * kInt8Group + j]) * kDoubledE2m1[group_code(w[0], g, j)];
        }
        const float scale = block_scales[lane_block(l)] * lane_scales[g * kInt8GroupLanes + l];
        lanes[l] = std::fma(static_cast<float>(sum), scale, lanes[l]);
      }
    }
    out[0] = reduce_lanes(lanes);
  }
};

void check_call(const Int8RowsView& x, const QuantizedWeightView& w, int64_t begin, int64_t end) {
  qlinear_detail::check_rows_call(x.cols, w, begin, end);
  MOERT_CHECK(w.format == WeightFormat::kNvfp4 || w.format == WeightFormat::kMxfp4,
              "int8 activations with " << weight_format_name(w.format) << " weights (NVFP4 / MXFP4 only)");
}

enum class Int8Path { kPortable, kAvx2, kAvx512, kAvx512Vnni, kNeon, kNeonDotprod };

Int8Path int8_path() {
  switch (cpu::active_cpu_isa()) {
    case cpu::CpuIsa::kAvx512: return cpu::cpu_has_avx512_vnni() ? Int8Path::kAvx512Vnni : Int8Path::kAvx512;
    case cpu::CpuIsa::kAvx2: return Int8Path::kAvx2;
    case cpu::CpuIsa::kNeon: return cpu::cpu_has_neon_dotprod() ? Int8Path::kNeonDotprod : Int8Path::kNeon;
    case cpu::CpuIsa::kPortable: return Int8Path::kPortable;
  }
  return Int8Path::kPortable;
}

}  // namespace

void Int8Rows::quantize(const float* x, int64_t rows, int64_t cols) {
  MOERT_CHECK(rows >= 0 && cols >= 0 && cols % 16 == 0, "int8 rows of " << rows << " x " << cols
                                                                        << " (columns a multiple of 16)");
  rows_ = rows;
  cols_ = cols;
  const int64_t groups = int8_groups(cols);
  codes_.assign(static_cast<size_t>(rows * groups * kInt8Group), 0);
  lane_scales_.assign(static_cast<size_t>(rows * groups * kInt8GroupLanes), 0.0f);
  lane_offsets_.assign(static_cast<size_t>(rows * groups * kInt8GroupLanes), 0);
  switch (int8_path()) {
#if defined(MOERT_X86_KERNELS)
    case Int8Path::kAvx512Vnni:
    case Int8Path::kAvx512:
      return x86::quantize_int8_rows_avx512(x, rows, cols, codes_.data(), lane_scales_.data(), lane_offsets_.data());
    case Int8Path::kAvx2:
      return x86::quantize_int8_rows_avx2(x, rows, cols, codes_.data(), lane_scales_.data(), lane_offsets_.data());
#else
    case Int8Path::kAvx512Vnni:
    case Int8Path::kAvx512:
    case Int8Path::kAvx2:
#endif
    case Int8Path::kNeon:  // the portable quantizer (x is small next to W)
    case Int8Path::kNeonDotprod:
    case Int8Path::kPortable:
      return quantize_rows(x, rows, cols, codes_.data(), lane_scales_.data(), lane_offsets_.data(),
                           quantize_block_portable);
  }
}

Int8RowsView Int8Rows::view() const {
  return {codes_.data(), lane_scales_.data(), lane_offsets_.data(), rows_, cols_};
}

void int8_linear_rows_portable(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                               int64_t begin, int64_t end) {
  check_call(x, w, begin, end);
  int8_forward_rows<PortableInt8Kernel>(x, w, bias, y, begin, end);
}

void int8_linear_rows(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y, int64_t begin,
                      int64_t end) {
  check_call(x, w, begin, end);
  if (x.rows == 0 || begin == end) return;
  // The SIMD tiles read either code order (kCpuChunk32 saves two unpacks per 64 elements).
  // Their NVFP4 scale decode folds 2^8 into the global scale: a global scale too large for it
  // (never in real checkpoints) runs portable.
  const Int8Path path = qlinear_detail::scale_foldable(w.global_scale) ? int8_path() : Int8Path::kPortable;
  switch (path) {
#if defined(MOERT_X86_KERNELS)
    case Int8Path::kAvx512Vnni: return x86::int8_linear_rows_avx512_vnni(x, w, bias, y, begin, end);
    case Int8Path::kAvx512: return x86::int8_linear_rows_avx512(x, w, bias, y, begin, end);
    case Int8Path::kAvx2: return x86::int8_linear_rows_avx2(x, w, bias, y, begin, end);
#else
    case Int8Path::kAvx512Vnni:
    case Int8Path::kAvx512:
    case Int8Path::kAvx2:  // never selected without the x86 kernels (core/cpu/isa.cpp)
#endif
#if defined(MOERT_ARM_KERNELS)
    case Int8Path::kNeonDotprod: return arm::int8_linear_rows_neon_dotprod(x, w, bias, y, begin, end);
    case Int8Path::kNeon: return arm::int8_linear_rows_neon(x, w, bias, y, begin, end);
#else
    case Int8Path::kNeonDotprod:
    case Int8Path::kNeon:  // never selected without the AArch64 kernels
#endif
    case Int8Path::kPortable: return int8_forward_rows<PortableInt8Kernel>(x, w, bias, y, begin, end);
  }
}

const char* int8_linear_isa_name() {
  switch (int8_path()) {
    case Int8Path::kAvx512Vnni: return "avx512-vnni";
    case Int8Path::kAvx512: return "avx512";
    case Int8Path::kAvx2: return "avx2";
    case Int8Path::kNeonDotprod: return "neon-dotprod";
    case Int8Path::kNeon: return "neon";
    case Int8Path::kPortable: return "portable";
  }
  return "?";
}

}  // namespace moert::quant
