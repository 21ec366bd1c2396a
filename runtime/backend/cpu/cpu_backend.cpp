#include "runtime/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "attention/cpu/dense_attention.h"
#include "attention/cpu/gated_delta_net.h"
#include "attention/cpu/lightning_indexer.h"
#include "attention/cpu/paged_attention.h"
#include "attention/cpu/sparse_attention.h"
#include "core/check.h"
#include "core/cpu/dot.h"
#include "core/cpu/isa.h"
#include "quant/cpu/bf16_linear.h"
#include "experts/cpu/expert_ffn.h"
#include "experts/grouped/dispatch_layout.h"
#include "quant/cpu/apply_linear.h"
#include "quant/bf16.h"
#include "runtime/backend/cpu/cpu_weight_layout.h"
#include "runtime/backend/reference_ops.h"
#include "runtime/sampling/sampler.h"

namespace moert::backend {

Backend::KernelPaths CpuBackend::kernel_paths() const {
  return {cpu::cpu_isa_name(), quant::bf16_linear_isa_name()};
}

Status CpuBackend::prepare_weights(ModelWeights& weights, const io::Checkpoint& checkpoint,
                                  const WeightPreparation& how) {
  return cpu_weights::lay_out_weights(weights, checkpoint, how);
}

Buffer CpuBackend::allocate(DType dtype, Shape shape) { return Buffer::uninitialized(dtype, std::move(shape)); }

void CpuBackend::embedding_gather(const TensorView& table, const int32_t* tokens, int64_t num_tokens, float* out) {
  const int64_t dim = table.dim(1);
  for (int64_t t = 0; t < num_tokens; ++t) {
    MOERT_CHECK(quant::widen_into_f32(table.row(tokens[t]), out + t * dim),
                "embedding dtype " << dtype_name(table.dtype) << " (F32, BF16 or F16 expected)");
  }
}

void CpuBackend::rms_norm(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps) {
  reference_rms_norm(x, num_rows, dim, weight, eps);
}

void CpuBackend::linear(const quant::LinearWeight& weight, const float* x, int64_t num_rows, const float* bias,
                        float* y) {
  quant::apply_linear(weight, x, num_rows, bias, y, pool_);
}

void CpuBackend::linears_of(const float* x, int64_t num_rows, std::span<const LinearOfX> calls) {
  std::vector<quant::LinearJob> jobs;
  jobs.reserve(calls.size());
  for (const LinearOfX& call : calls) jobs.push_back({call.weight, x, num_rows, call.bias, call.y});
  quant::apply_linears(jobs, pool_);
}

void CpuBackend::rope(const attention::RotaryEmbedding& rope, float* heads, int64_t num_tokens, int num_heads,
                      const int64_t* positions) {
  const int64_t width = static_cast<int64_t>(num_heads) * rope.head_dim();
  for (int64_t t = 0; t < num_tokens; ++t) rope.apply(heads + t * width, num_heads, positions[t]);
}

void CpuBackend::write_kv(const attention::PagedKvLayer& layer, const float* k, const float* v, const int64_t* slots,
                          int64_t num_tokens) {
  attention::write_kv_slots(layer, k, v, slots, num_tokens);
}

void CpuBackend::paged_attention(const float* q, const attention::PagedKvLayer& layer,
                                 const attention::PagedAttentionPlan& plan, int num_heads, float* out) {
  attention::paged_attention_forward(q, layer, plan, num_heads, out, pool_);
}

void CpuBackend::sparse_index_select(const attention::SparseIndexQuery& index, const attention::PagedKvLayer& layer,
                                     int key_offset, const attention::PagedAttentionPlan& plan, int32_t* selected) {
  attention::paged_sparse_index_select(index, layer, key_offset, plan, selected, pool_);
}

void CpuBackend::sparse_paged_attention(const float* q, const attention::PagedKvLayer& layer, int key_width,
                                        const attention::PagedAttentionPlan& plan, int num_heads,
                                        const int32_t* selected, int top_k, float* out) {
  attention::paged_sparse_attention(q, layer, key_width, plan, num_heads, selected, top_k, out, pool_);
}

void CpuBackend::layer_norm(float* x, int64_t num_rows, int64_t dim, const float* weight, const float* bias,
                            float eps) {
  attention::layer_norm(x, num_rows, static_cast<int>(dim), weight, bias, eps, x);
}

void CpuBackend::contiguous_attention(const float* q, int64_t num_tokens, const float* keys, const float* values,
                                      int64_t first_position, int num_heads, int num_kv_heads, int head_dim,
                                      const attention::AttentionVariant& variant, float* out) {
  const int64_t width = static_cast<int64_t>(num_heads) * head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    attention::causal_attention_one_token(q + t * width, keys, values, first_position + t, num_heads, num_kv_heads,
                                          head_dim, out + t * width, variant);
  }
}

void CpuBackend::copy_kv_blocks(const attention::PagedKvLayer& layer, const int32_t* src, const int32_t* dst,
                                int64_t num_copies) {
  attention::copy_kv_blocks(layer, src, dst, num_copies);
}

void CpuBackend::swiglu_ffn(const float* x, int64_t num_rows, const quant::LinearWeight& gate,
                            const quant::LinearWeight& up, const quant::LinearWeight& down, float* out) {
  experts::swiglu_ffn_forward(x, num_rows, gate, up, down, out, pool_);
}

void CpuBackend::grouped_expert_ffn(const experts::ExpertDispatchLayout& layout, std::span<const float> x,
                                    int hidden_size, const std::function<ExpertWeights(int expert)>& expert_weights,
                                    std::span<float> contributions) {
  std::vector<experts::GluFfnJob> jobs;
  experts::grouped_expert_ffn(
      layout, x, hidden_size,
      experts::ExpertBatchFn([&](std::span<const experts::ExpertGroup> groups) {
        jobs.clear();
        for (const experts::ExpertGroup& g : groups) {
          const ExpertWeights w = expert_weights(g.expert);
          jobs.push_back({g.x, g.num_rows, w.gate, w.gate_bias, w.up, w.up_bias, w.down, w.down_bias, w.activation,
                          g.y});
        }
        experts::glu_ffn_forward_batch(jobs, pool_);
      }),
      contributions);
}

void CpuBackend::route(const experts::RouterConfig& config, const float* logits, int64_t num_tokens,
                       const float* selection_bias, int32_t* expert_ids, float* weights) {
  experts::route_tokens(config, logits, num_tokens, selection_bias, expert_ids, weights);
}

void CpuBackend::count_experts(const int32_t* expert_ids, int64_t num_entries, int num_experts, int64_t* counts) {
  for (int64_t i = 0; i < num_entries; ++i) {
    const int32_t e = expert_ids[i];
    MOERT_CHECK(e >= 0 && e < num_experts, "expert id " << e << " outside [0, " << num_experts << ")");
    ++counts[e];
  }
}

void CpuBackend::combine_rows(std::span<const int64_t> src_rows, int top_k, std::span<const float> rows,
                              int hidden_size, std::span<float> out) {
  experts::sum_rows_in_order(src_rows, top_k, rows, hidden_size, out);
}

void CpuBackend::add(float* x, const float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

void CpuBackend::gated_add(float* x, const float* y, const float* gate_logits, int64_t num_rows, int64_t dim) {
  for (int64_t t = 0; t < num_rows; ++t) {
    const float g = gate_logits == nullptr ? 1.0f : 1.0f / (1.0f + std::exp(-gate_logits[t]));
    for (int64_t i = 0; i < dim; ++i) x[t * dim + i] += g * y[t * dim + i];
  }
}

// Sequences in parallel (each reads and writes only its own rows and states).
void CpuBackend::gated_delta_net(const attention::GatedDeltaShape& shape, const attention::GatedDeltaParams& params,
                                 const float* u, const float* z, const float* a, const float* b,
                                 std::span<const RecurrentSequence> sequences, float* out) {
  const int64_t channels = shape.conv_channels(), nv = shape.num_value_heads;
  const int64_t width = nv * shape.value_head_dim;
  pool_.parallel_for(static_cast<int64_t>(sequences.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const RecurrentSequence& s = sequences[static_cast<size_t>(i)];
      const int64_t r = s.first_row;
      attention::gated_delta_net_sequence(shape, params, u + r * channels, z + r * width, a + r * nv, b + r * nv,
                                          s.num_rows, s.conv_state, s.recurrent_state, out + r * width,
                                          s.conv_states_after, s.recurrent_states_after, s.copies_after);
    }
  });
}

void CpuBackend::sigmoid_mul(float* x, const float* gate, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
}

void CpuBackend::copy(float* dst, const float* src, int64_t count) {
  copy_bytes(dst, src, count * static_cast<int64_t>(sizeof(float)));
}

void CpuBackend::copy_bytes(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void CpuBackend::copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t num_rows,
                           int64_t width) {
  for (int64_t r = 0; r < num_rows; ++r) std::copy_n(src + r * src_stride, width, dst + r * dst_stride);
}

// Work items are (head, output row) pairs; each computes that output for every token with
// the canonical dot product (core/cpu/dot.h), so a result depends only on its own inputs.
void CpuBackend::per_head_linear(const float* weights, int num_heads, int64_t out_features, int64_t in_features,
                                 const float* x, int64_t x_head_stride, int64_t num_tokens, float* y,
                                 int64_t y_head_stride) {
  if (num_tokens == 0) return;
  const int64_t token_stride_x = num_heads * x_head_stride, token_stride_y = num_heads * y_head_stride;
  pool_.parallel_for(num_heads * out_features, 8, [&](int64_t begin, int64_t end) {
    float dots[cpu::kMaxDotRows];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t head = item / out_features, o = item % out_features;
      const float* w = weights + (head * out_features + o) * in_features;
      for (int64_t t0 = 0; t0 < num_tokens; t0 += cpu::kMaxDotRows) {
        const int rows = static_cast<int>(std::min<int64_t>(cpu::kMaxDotRows, num_tokens - t0));
        cpu::dot_f32_rows(x + t0 * token_stride_x + head * x_head_stride, token_stride_x, rows, w, in_features, dots);
        for (int r = 0; r < rows; ++r) y[(t0 + r) * token_stride_y + head * y_head_stride + o] = dots[r];
      }
    }
  });
}

void CpuBackend::gather_rows(const float* src, int64_t dim, const int64_t* rows, int64_t num_rows, float* dst) {
  for (int64_t r = 0; r < num_rows; ++r) std::copy_n(src + rows[r] * dim, dim, dst + r * dim);
}

void CpuBackend::argmax_rows(const float* logits, int64_t num_rows, int64_t vocab, int32_t* out) {
  for (int64_t r = 0; r < num_rows; ++r) out[r] = reference_argmax(logits + r * vocab, vocab);
}

void CpuBackend::sample_rows(const float* logits, int64_t vocab, std::span<const RowSampling> rows, int32_t* out) {
  std::vector<double> scratch;
  for (size_t r = 0; r < rows.size(); ++r) {
    sampling::SamplingParams params;
    params.temperature = rows[r].temperature;
    params.top_k = rows[r].top_k;
    params.top_p = rows[r].top_p;
    out[r] = sampling::sample_token(logits + static_cast<int64_t>(r) * vocab, static_cast<int>(vocab), params,
                                    rows[r].uniform, &scratch);
  }
}

}  // namespace moert::backend
