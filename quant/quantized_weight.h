// A quantized [N, K] weight as the checkpoints lay it out (NVFP4, MXFP4, FP8 block or
// tensor; docs/quant-formats.md): the format, a borrowed view of its buffers and the checks
// every consumer relies on. Device-neutral: the CPU kernels (quant/cpu/quantized_linear.h)
// and any other backend read the same view.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace moert::quant {

enum class WeightFormat {
  kNvfp4,      // E2M1 elements, E4M3 scale per 16 along K, FP32 global scale (docs/quant-formats.md §1)
  kMxfp4,      // E2M1 elements, E8M0 scale per 32 along K (docs/quant-formats.md §2)
  kFp8Block,   // E4M3 elements, FP32 scale per 128x128 tile (DeepSeek-V3, docs/quant-formats.md §3b)
  kFp8Tensor,  // E4M3 elements, one FP32 scale (ModelOpt / vLLM FP8)
};

const char* weight_format_name(WeightFormat format);

// The order of the E2M1 codes in an NVFP4 / MXFP4 view's `data` (docs/quant-formats.md,
// "CPU code order").
enum class Fp4CodeOrder {
  // As released: byte i of a row holds elements 2i (low nibble) and 2i + 1 (high nibble).
  kCheckpoint,
  // Repacked at load for the CPU kernels: in every full 32-element chunk c of a row, byte
  // 16c + j holds elements 32c + j (low nibble) and 32c + 16 + j (high nibble), so a
  // zero-extension of 16 bytes to 32-bit lanes puts two 16-element groups in lane order. A
  // last 16-element group (K % 32 == 16, NVFP4) stays in checkpoint order.
  kCpuChunk32,
};

// What the CPU kernels compute a weight's dot products with.
enum class ActivationPrecision {
  kF32,   // x as given (the default: exact as the portable reference, quant/cpu/quantized_linear.h)
  kInt8,  // x quantized to int8 per 16 elements (NVFP4 / MXFP4 only; explicit opt-in,
          // quant/cpu/int8_linear.h, docs/quant-formats.md "Int8 activations")
  kFp4,   // x rounded per row to the weight's own FP4 format and back, then the exact product
          // (W4A4: what block-scaled FP4 tensor cores compute; NVFP4 / MXFP4 only; explicit
          // opt-in on every backend, docs/quant-formats.md "FP4 activations")
  kBf16,  // x rounded to BF16, products on BF16 pairs with per-block partial sums (FP8 only;
          // explicit opt-in on the CPU, quant/cpu/bf16_linear.h, docs/quant-formats.md
          // "BF16 activations")
};

// "f32", "int8", "fp4" (the values of `--fp4-activations`) or "bf16" (`--fp8-activations`).
const char* activation_precision_name(ActivationPrecision precision);
Result<ActivationPrecision> parse_activation_precision(const std::string& name);

// Plain view of one quantized [N, K] weight, laid out as in the checkpoints (or with its
// FP4 codes in the CPU order). Borrowed: the buffers must outlive every call that uses it.
struct QuantizedWeightView {
  WeightFormat format = WeightFormat::kNvfp4;
  int64_t rows = 0;  // N
  int64_t cols = 0;  // K
  // nvfp4/mxfp4: packed [N, K/2], element 2i in the low nibble; fp8: E4M3 [N, K].
  const uint8_t* data = nullptr;
  // nvfp4: E4M3 [N, K/16] (ModelOpt `weight_scale`); mxfp4: E8M0 [N, K/32]; fp8: unused.
  const uint8_t* scales = nullptr;
  // fp8 block: [ceil(N/128), ceil(K/128)] dequant multipliers (DeepSeek `weight_scale_inv`);
  // ragged edge tiles included. Other formats: unused.
  const float* block_scale_inv = nullptr;
  // nvfp4: `weight_scale_2` (x_hat = e2m1 * (e4m3 * weight_scale_2)); fp8 tensor: the
  // per-tensor dequant scale. Other formats: unused.
  float global_scale = 1.0f;
  // nvfp4/mxfp4: the order of the codes in `data`. Other formats: kCheckpoint.
  Fp4CodeOrder code_order = Fp4CodeOrder::kCheckpoint;
  // fp8: true only when no code of `data` is an E4M3 NaN (0x7F / 0xFF) -- the loader rejects
  // checkpoints with one, so it sets this for every FP8 weight it binds. Kernels may then
  // leave out NaN handling; a NaN code in a view marked finite decodes to a wrong finite value.
  bool fp8_codes_finite = false;
  // What x is computed as with this weight (set by the loader under `--fp4-activations` and
  // `--fp8-activations`): kInt8 and kBf16 on the CPU only; kFp4 on every backend.
  ActivationPrecision activations = ActivationPrecision::kF32;
};

// The E2M1 code of element i of one row of packed codes (k elements) in `order`.
inline uint8_t fp4_code_at(const uint8_t* row, int64_t i, int64_t k, Fp4CodeOrder order) {
  if (order == Fp4CodeOrder::kCpuChunk32 && (i | 31) < k) {
    const int64_t j = i % 32;
    const uint8_t byte = row[(i - j) / 2 + j % 16];
    return j < 16 ? (byte & 0xF) : (byte >> 4);
  }
  return (i % 2 == 0) ? (row[i / 2] & 0xF) : (row[i / 2] >> 4);
}

// Rewrites the codes of an [N, K] NVFP4/MXFP4 weight (N * K / 2 bytes) from order `from`
// into order `to` (in and out must not overlap; the same order copies).
void reorder_fp4_codes(const uint8_t* in, int64_t rows, int64_t cols, Fp4CodeOrder from, Fp4CodeOrder to,
                       uint8_t* out);

// Ok when the view can be passed to quantized_linear_forward: rows, cols >= 0; K % 16 == 0
// (nvfp4) or K % 32 == 0 (mxfp4); the pointers the format uses are non-null for a non-empty
// matrix; kCpuChunk32 and int8 activations only for NVFP4 / MXFP4. Errors are kInvalidArgument and name the offending value.
Status validate_quantized_weight(const QuantizedWeightView& w);

// A block whose scale is 0 decodes to 0 whatever its codes: legal only when every code of the
// block is +-0 (what moert's and DeepSeek's quantizers write for an all-zero block), since
// otherwise the checkpoint's values are lost without a word (docs/quant-formats.md, "Zero
// block scales"). Checks the FP8 block scales (`weight_scale_inv`) and the NVFP4 E4M3 block
// scales (`weight_scale`, codes in checkpoint order); MXFP4's E8M0 has no zero and FP8 tensor
// scales are checked by the loader. invalid_argument "scale block [bi, bj] (rows r0..r1,
// columns c0..c1) is 0 but code 0xCC at [i, j] is not zero". Reads only the scales, and the
// codes of zero-scale blocks. Precondition: validate_quantized_weight(w) is ok.
Status check_zero_block_scales(const QuantizedWeightView& w);

// The bytes of each buffer of the view (0 for a buffer its format does not use): what a
// copy of the weight (a device upload, a residency registration) must take.
struct QuantizedWeightSizes {
  int64_t data = 0;          // packed codes
  int64_t scales = 0;        // NVFP4 / MXFP4 block scales
  int64_t block_scales = 0;  // FP8 block: block_scale_inv, in bytes
  int64_t total() const { return data + scales + block_scales; }
};
QuantizedWeightSizes quantized_weight_sizes(const QuantizedWeightView& w);

// Bytes of data and scales one pass over the weight reads (for bandwidth figures).
int64_t quantized_weight_bytes(const QuantizedWeightView& w);

}  // namespace moert::quant
