// Fused CPU linear layers over quantized weights: y[T, N] = x[T, K] . dequant(W[N, K])^T (+ bias[N]).
// The packed weights and their scales are read in place (e.g. straight from an mmapped
// checkpoint, layouts as in docs/quant-formats.md); no full-precision copy of W is ever
// made, only one 16- or 32-element block at a time in registers.
//
// Shapes: T tokens (rows of x), N output features (rows of W), K the reduction dim.
//
// Invariant (the one linear_forward keeps): every output element is one dot product whose
// summation order depends only on K, never on T, the thread count, the other rows or the
// instruction set. The canonical order is linear.cpp's: 16 lanes, element k of each full
// 16-element group goes to lane k % 16 as lane = fma(x[k], w[k], lane), the tail elements to
// lanes 0..r-1 the same way, then lane[l] += lane[l + w] for w = 8, 4, 2, 1. w[k] is exactly
// the float the codec's dequantize yields (quant/formats/fp4.h, fp8.h), so the result equals
// the portable reference over a dequantized copy of W bit for bit.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"

namespace moert::quant {

enum class WeightFormat {
  kNvfp4,      // E2M1 elements, E4M3 scale per 16 along K, FP32 global scale (spec §1)
  kMxfp4,      // E2M1 elements, E8M0 scale per 32 along K (spec §2)
  kFp8Block,   // E4M3 elements, FP32 scale per 128x128 tile (DeepSeek-V3, spec §3b)
  kFp8Tensor,  // E4M3 elements, one FP32 scale (ModelOpt / vLLM FP8)
};

const char* weight_format_name(WeightFormat format);

// Plain view of one quantized [N, K] weight, laid out as in the checkpoints. Borrowed: the
// buffers must outlive every call that uses the view.
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
};

// Ok when the view can be passed to quantized_linear_forward: rows, cols >= 0; K % 16 == 0
// (nvfp4) or K % 32 == 0 (mxfp4); the pointers the format uses are non-null for a non-empty
// matrix. Errors are kInvalidArgument and name the offending value.
Status validate_quantized_weight(const QuantizedWeightView& w);

// Bytes of data and scales one pass over the weight reads (for bandwidth figures).
int64_t quantized_weight_bytes(const QuantizedWeightView& w);

// x: [T, K] F32; bias: [N] F32 or nullptr; y: [T, N] F32 (must not alias x). Multi-threaded
// over N on `pool`; AVX-512 or AVX2+FMA chosen at run time (MOERT_CPU_ISA=portable|avx2|avx512
// caps it, as for linear_forward), with a portable fallback. Precondition:
// validate_quantized_weight(w) is ok (checked).
void quantized_linear_forward(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias,
                              float* y, ThreadPool& pool);

// The same computed by the portable path whatever the CPU (tests compare the two; the
// results are bit-identical by the invariant above).
void quantized_linear_forward_portable(const float* x, int64_t num_rows, const QuantizedWeightView& w,
                                       const float* bias, float* y, ThreadPool& pool);

// "avx512", "avx2" or "portable": the path quantized_linear_forward takes on this CPU.
const char* quantized_linear_isa_name();

}  // namespace moert::quant
