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
#include "quant/quantized_weight.h"

namespace moert::quant {

// x: [T, K] F32; bias: [N] F32 or nullptr; y: [T, N] F32 (must not alias x). Multi-threaded
// over N on `pool`; AVX-512, AVX2+FMA or NEON chosen at run time (MOERT_CPU_ISA caps it, as
// for linear_forward), with a portable fallback. Precondition:
// validate_quantized_weight(w) is ok (checked).
void quantized_linear_forward(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias,
                              float* y, ThreadPool& pool);

// The same computed by the portable path whatever the CPU (tests compare the two; the
// results are bit-identical by the invariant above).
void quantized_linear_forward_portable(const float* x, int64_t num_rows, const QuantizedWeightView& w,
                                       const float* bias, float* y, ThreadPool& pool);

// Output features [begin, end) of quantized_linear_forward (0 <= begin <= end <= N), on the
// calling thread: apply_linears (quant/cpu/apply_linear.h) splits several layers' features
// over one wake-up of the pool. Same bits as quantized_linear_forward.
void quantized_linear_rows(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias, float* y,
                           int64_t begin, int64_t end);

// The FP4 code order the path chosen on this CPU computes `format` (NVFP4 / MXFP4) fastest
// (the loader repacks into it, runtime/model/weights.h): kCpuChunk32 for both on AVX-512 and
// for MXFP4 on AVX2 (measured by bench_quantized_linear, docs/perf/cpu-roofline.md), else
// kCheckpoint (the NEON tiles read only that one). Every order computes the same bits on every path.
Fp4CodeOrder preferred_fp4_code_order(WeightFormat format);

// "avx512", "avx2", "neon" or "portable": the path quantized_linear_forward takes on this CPU.
const char* quantized_linear_isa_name();

}  // namespace moert::quant
