// CUDA element-wise and data-movement kernels of the Backend table (runtime/backend/
// backend.h): host launchers only (device pointers, sizes, a stream; no CUDA headers).
// Each is the twin of the CpuBackend op of the same name and gives the same bits (no
// reductions across elements but argmax and the in-order combine). Every launcher returns
// 0 or the CUDA error code.
//
// Shapes: T tokens, R rows, D / dim row width, V vocab, K top-k.
#pragma once

#include <cstdint>

#include "experts/glu_activation.h"
#include "core/cuda/namespace.h"

namespace moert::MOERT_CUDA_NS {

enum class TableType : int32_t { kF32, kBF16, kF16 };
// out[t] = table[tokens[t]] widened to F32. table: [V, D]; tokens: [T]; out: [T, D].
int embedding_gather(const void* table, TableType type, int64_t dim, const int32_t* tokens, int64_t num_tokens,
                     float* out, CUstream_st* stream);
// x[i] += y[i].
int add(float* x, const float* y, int64_t count, CUstream_st* stream);
// x[t, :] += sigmoid(gate_logits[t]) * y[t, :], or += y without gate logits (null).
int gated_add(float* x, const float* y, const float* gate_logits, int64_t num_rows, int64_t dim, CUstream_st* stream);
// x[i] *= sigmoid(gate[i]) (gated attention's output).
int sigmoid_mul(float* x, const float* gate, int64_t count, CUstream_st* stream);
// dst[r * dst_stride + i] = src[r * src_stride + i], r < R, i < width.
int copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t num_rows, int64_t width,
              CUstream_st* stream);
// dst[r, :] = src[rows[r], :]. rows: [R].
int gather_rows(const float* src, int64_t dim, const int64_t* rows, int64_t num_rows, float* dst, CUstream_st* stream);
// out[rows[r], :] = weights[rows[r]] * src[r, :], one product rounded (rows distinct; src [R, dim]).
int scatter_weighted_rows(const float* src, int64_t dim, const int64_t* rows, int64_t num_rows, const float* weights,
                          float* out, CUstream_st* stream);
// out[t] = sum over j ascending of rows[src_rows[t * K + j]], from +0.0f. out: [T, D].
int combine_rows(const int64_t* src_rows, int64_t num_tokens, int top_k, const float* rows, int64_t dim, float* out,
                 CUstream_st* stream);
// out[r] = argmax of logits[r, :V], the lowest index on ties.
int argmax_rows(const float* logits, int64_t num_rows, int64_t vocab, int32_t* out, CUstream_st* stream);
// gate[i] = act(gate[i], up[i]) (experts/glu_activation.h), in place.
int glu(float* gate, const float* up, int64_t count, const experts::GluActivation& activation, CUstream_st* stream);

}  // namespace moert::MOERT_CUDA_NS
