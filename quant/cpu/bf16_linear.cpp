#include "quant/cpu/bf16_linear.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/cpu/isa.h"
#include "core/half.h"
#include "quant/cpu/bf16_linear_tiles.h"
#if defined(MOERT_X86_KERNELS)
#include "quant/cpu/x86/bf16_linear_x86.h"
#endif

namespace moert::quant {
namespace {

using namespace bf16_detail;

// The group at element g into 16 lanes, straight from the definition: lane l takes elements
// 2l + 1 and then 2l, each an FMA; weight_at(i) for i < k, +0 past it.
template <typename WeightAt>
void add_group(const uint16_t* xb, int64_t g, int64_t k, WeightAt weight_at, float* lanes) {
  for (int l = 0; l < kGroupLanes; ++l) {
    for (const int64_t i : {g + 2 * l + 1, g + 2 * l}) {  // the odd element first
      lanes[l] = std::fma(bf16_value(xb[i]), i < k ? weight_at(i) : 0.0f, lanes[l]);
    }
  }
}

// One x row t against one weight row, straight from the definition.
struct PortableBf16Kernel {
  static constexpr int kRows = 1;
  static constexpr int kCols = 1;
  static constexpr int kDenseCols = 1;
  template <int rows, int cols>
  static void tile(const Bf16RowsView& x, int64_t t, const RowRef* w, float* out) {
    const int64_t k = x.cols, padded = bf16_padded_cols(k);
    const uint16_t* xb = x.values + t * padded;
    float lanes[kGroupLanes] = {};
    for (int64_t b0 = 0; b0 < k; b0 += kFp8ScaleCols) {
      float partial[kGroupLanes] = {};
      const int64_t b1 = std::min(padded, b0 + kFp8ScaleCols);
      for (int64_t g = b0; g < b1; g += kBf16Group) {
        add_group(xb, g, k, [&](int64_t i) { return weight_value(w[0].data[i]); }, partial);
      }
      const float factor = block_factor(w[0], b0 / kFp8ScaleCols);
      for (int l = 0; l < kGroupLanes; ++l) lanes[l] = std::fma(partial[l], factor, lanes[l]);
    }
    out[0] = reduce_lanes(lanes);
  }
  template <int rows, int cols>
  static void dense_tile(const Bf16RowsView& x, int64_t t, const DenseRowRef* w, float* out) {
    const int64_t k = x.cols, padded = bf16_padded_cols(k);
    const uint16_t* xb = x.values + t * padded;
    float lanes[kGroupLanes] = {};
    for (int64_t g = 0; g < padded; g += kBf16Group) {
      add_group(xb, g, k, [&](int64_t i) { return bf16_value(w[0].data[i]); }, lanes);
    }
    out[0] = reduce_lanes(lanes);
  }
};

void check_call(const Bf16RowsView& x, const QuantizedWeightView& w, int64_t begin, int64_t end) {
  qlinear_detail::check_rows_call(x.cols, w, begin, end);
  MOERT_CHECK(bf16_activations_admitted(w), "bf16 activations with a " << weight_format_name(w.format)
                                                << " weight (FP8 with its codes marked finite only)");
}

enum class Bf16Path { kPortable, kAvx2, kAvx512Bf16 };

Bf16Path bf16_path() {
  if (cpu::cpu_has_avx512_bf16()) return Bf16Path::kAvx512Bf16;
  const cpu::CpuIsa isa = cpu::active_cpu_isa();
  if (isa == cpu::CpuIsa::kAvx512 || isa == cpu::CpuIsa::kAvx2) return Bf16Path::kAvx2;
  return Bf16Path::kPortable;  // NEON takes the portable sums too (no BFDOT path yet)
}

}  // namespace

uint16_t bf16_activation(float x) {
  const uint16_t bits = f32_to_bf16(x);
  // Exponent field below 127 - 55: magnitude below 2^-55 (NaN and inf have field 255).
  return ((bits >> 7) & 0xFFu) < 127 - 55 ? static_cast<uint16_t>(bits & 0x8000u) : bits;
}

void Bf16Rows::round(const float* x, int64_t rows, int64_t cols) {
  MOERT_CHECK(rows >= 0 && cols >= 0, "bf16 rows of " << rows << " x " << cols);
  rows_ = rows;
  cols_ = cols;
  const int64_t padded = bf16_padded_cols(cols);
  values_.assign(static_cast<size_t>(rows * padded), 0);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < cols; ++i) values_[static_cast<size_t>(t * padded + i)] = bf16_activation(x[t * cols + i]);
  }
}

bool bf16_activations_admitted(const QuantizedWeightView& w) {
  return (w.format == WeightFormat::kFp8Block || w.format == WeightFormat::kFp8Tensor) && w.fp8_codes_finite;
}

void bf16_linear_rows_portable(const Bf16RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                               int64_t begin, int64_t end) {
  check_call(x, w, begin, end);
  bf16_forward<PortableBf16Kernel>(x, w, bias, y, begin, end);
}

void bf16_linear_rows(const Bf16RowsView& x, const QuantizedWeightView& w, const float* bias, float* y, int64_t begin,
                      int64_t end) {
  check_call(x, w, begin, end);
  if (x.rows == 0 || begin == end) return;
  switch (bf16_path()) {
#if defined(MOERT_X86_KERNELS)
    case Bf16Path::kAvx512Bf16: return x86::bf16_linear_rows_avx512_bf16(x, w, bias, y, begin, end);
    case Bf16Path::kAvx2: return x86::bf16_linear_rows_avx2(x, w, bias, y, begin, end);
#else
    case Bf16Path::kAvx512Bf16:
    case Bf16Path::kAvx2:  // never selected without the x86 kernels (core/cpu/isa.cpp)
#endif
    case Bf16Path::kPortable: return bf16_forward<PortableBf16Kernel>(x, w, bias, y, begin, end);
  }
}

namespace {

// Exponent field (bits 7-14) of a BF16 weight: below 127 - 56 (under 2^-56, subnormals and
// zeros included) or 255 (inf, NaN).
bool below_floor(uint16_t v) { return ((v >> 7) & 0xFFu) < 127 - 56; }
bool non_finite(uint16_t v) { return ((v >> 7) & 0xFFu) == 0xFFu; }

}  // namespace

bool enable_bf16_activations(LinearWeight& w, const Bf16WeightStorage& storage) {
  if (w.packed.has_value() || w.dense.dtype != DType::kBF16 || w.dense.shape.size() != 2 || !w.dense.is_contiguous()) {
    return false;
  }
  // Branch-free per block, so the scan vectorises.
  const uint16_t* values = static_cast<const uint16_t*>(w.dense.data);
  const int64_t count = w.dense.numel();
  constexpr int64_t kBlock = 4096;
  bool tiny = false;
  for (int64_t b0 = 0; b0 < count; b0 += kBlock) {
    const int64_t b1 = std::min(count, b0 + kBlock);
    int bad = 0, small = 0;
    for (int64_t i = b0; i < b1; ++i) {
      bad |= static_cast<int>(non_finite(values[i]));
      small |= static_cast<int>((values[i] & 0x7FFFu) != 0 && below_floor(values[i]));
    }
    if (bad != 0) return false;
    tiny = tiny || small != 0;
  }
  if (tiny) {
    if (!storage) return false;
    uint16_t* flushed = storage(count);
    for (int64_t i = 0; i < count; ++i) {
      flushed[i] = below_floor(values[i]) ? static_cast<uint16_t>(values[i] & 0x8000u) : values[i];
    }
    w.dense.data = flushed;
  }
  w.dense_activations = ActivationPrecision::kBf16;
  return true;
}

namespace {

void check_dense_call(const Bf16RowsView& x, const LinearWeight& w, int64_t begin, int64_t end) {
  MOERT_CHECK(!w.packed.has_value() && w.dense_activations == ActivationPrecision::kBf16,
              "bf16 activations with a " << w.format_name() << " weight not enabled for them");
  const int64_t n = w.out_features();
  MOERT_CHECK(x.cols == w.in_features(), "bf16 linear: x has " << x.cols << " columns, the weight " << w.in_features());
  MOERT_CHECK(begin >= 0 && begin <= end && end <= n, "bf16 linear: features [" << begin << ", " << end << ") of " << n);
}

}  // namespace

void bf16_dense_linear_rows_portable(const Bf16RowsView& x, const LinearWeight& w, const float* bias, float* y,
                                     int64_t begin, int64_t end) {
  check_dense_call(x, w, begin, end);
  bf16_dense_forward<PortableBf16Kernel>(x, static_cast<const uint16_t*>(w.dense.data), w.out_features(), bias, y,
                                         begin, end);
}

void bf16_dense_linear_rows(const Bf16RowsView& x, const LinearWeight& w, const float* bias, float* y, int64_t begin,
                            int64_t end) {
  check_dense_call(x, w, begin, end);
  if (x.rows == 0 || begin == end) return;
  const uint16_t* values = static_cast<const uint16_t*>(w.dense.data);
  const int64_t n = w.out_features();
  switch (bf16_path()) {
#if defined(MOERT_X86_KERNELS)
    case Bf16Path::kAvx512Bf16: return x86::bf16_dense_linear_rows_avx512_bf16(x, values, n, bias, y, begin, end);
    case Bf16Path::kAvx2: return x86::bf16_dense_linear_rows_avx2(x, values, n, bias, y, begin, end);
#else
    case Bf16Path::kAvx512Bf16:
    case Bf16Path::kAvx2:  // never selected without the x86 kernels (core/cpu/isa.cpp)
#endif
    case Bf16Path::kPortable: return bf16_dense_forward<PortableBf16Kernel>(x, values, n, bias, y, begin, end);
  }
}

const char* bf16_linear_isa_name() {
  switch (bf16_path()) {
    case Bf16Path::kAvx512Bf16: return "avx512-bf16";
    case Bf16Path::kAvx2: return "avx2";
    case Bf16Path::kPortable: return "portable";
  }
  return "?";
}

}  // namespace moert::quant
