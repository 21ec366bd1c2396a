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

void CpuBackend::embedding_gather(const TensorView& table, DevicePtr<const int32_t> tokens, int64_t num_tokens,
                                  DevicePtr<float> out) {
  const int64_t dim = table.dim(1);
  const int32_t* ids = tokens.host("embedding_gather tokens");
  float* rows = out.host("embedding_gather out");
  for (int64_t t = 0; t < num_tokens; ++t) {
    MOERT_CHECK(quant::widen_into_f32(table.row(ids[t]), rows + t * dim),
                "embedding dtype " << dtype_name(table.dtype) << " (F32, BF16 or F16 expected)");
  }
}

void CpuBackend::rms_norm(DevicePtr<float> x, int64_t num_rows, int64_t dim, const float* weight, float eps) {
  reference_rms_norm(x.host("rms_norm x"), num_rows, dim, weight, eps);
}

void CpuBackend::linear(const quant::LinearWeight& weight, DevicePtr<const float> x, int64_t num_rows,
                        const float* bias, DevicePtr<float> y) {
  quant::apply_linear(weight, x.host("linear x"), num_rows, bias, y.host("linear y"), pool_);
}

void CpuBackend::linears_of(DevicePtr<const float> x, int64_t num_rows, std::span<const LinearOfX> calls) {
  std::vector<quant::LinearJob> jobs;
  jobs.reserve(calls.size());
  for (const LinearOfX& call : calls) {
    jobs.push_back({call.weight, x.host("linears_of x"), num_rows, call.bias, call.y.host("linears_of y")});
  }
  quant::apply_linears(jobs, pool_);
}

void CpuBackend::rope(const attention::RotaryEmbedding& rope, DevicePtr<float> heads, int64_t num_tokens,
                      int num_heads, DevicePtr<const int64_t> positions) {
  const int64_t width = static_cast<int64_t>(num_heads) * rope.head_dim();
  float* rows = heads.host("rope heads");
  const int64_t* at = positions.host("rope positions");
  for (int64_t t = 0; t < num_tokens; ++t) rope.apply(rows + t * width, num_heads, at[t]);
}

void CpuBackend::write_kv(const attention::PagedKvLayer& layer, DevicePtr<const float> k, DevicePtr<const float> v,
                          DevicePtr<const int64_t> slots, int64_t num_tokens) {
  check_device(Device{}, layer.device, "write_kv cache");
  attention::write_kv_slots(layer, k.host("write_kv k"), v.host("write_kv v"), slots.host("write_kv slots"),
                            num_tokens);
}

void CpuBackend::paged_attention(DevicePtr<const float> q, const attention::PagedKvLayer& layer,
                                 const attention::PagedAttentionPlan& plan, int num_heads, DevicePtr<float> out) {
  check_device(Device{}, layer.device, "paged_attention cache");
  check_device(Device{}, plan.device, "paged_attention plan");
  attention::paged_attention_forward(q.host("paged_attention q"), layer, plan, num_heads,
                                     out.host("paged_attention out"), pool_);
}

void CpuBackend::sparse_index_select(const attention::SparseIndexQuery& index, const attention::PagedKvLayer& layer,
                                     int key_offset, const attention::PagedAttentionPlan& plan,
                                     DevicePtr<int32_t> selected) {
  check_device(Device{}, layer.device, "sparse_index_select cache");
  check_device(Device{}, index.device, "sparse_index_select queries");
  attention::paged_sparse_index_select(index, layer, key_offset, plan, selected.host("sparse_index_select selected"),
                                       pool_);
}

void CpuBackend::sparse_paged_attention(DevicePtr<const float> q, const attention::PagedKvLayer& layer, int key_width,
                                        const attention::PagedAttentionPlan& plan, int num_heads,
                                        DevicePtr<const int32_t> selected, int top_k, DevicePtr<float> out) {
  check_device(Device{}, layer.device, "sparse_paged_attention cache");
  attention::paged_sparse_attention(q.host("sparse_paged_attention q"), layer, key_width, plan, num_heads,
                                    selected.host("sparse_paged_attention selected"), top_k,
                                    out.host("sparse_paged_attention out"), pool_);
}

void CpuBackend::layer_norm(DevicePtr<float> x, int64_t num_rows, int64_t dim, const float* weight, const float* bias,
                            float eps) {
  float* rows = x.host("layer_norm x");
  attention::layer_norm(rows, num_rows, static_cast<int>(dim), weight, bias, eps, rows);
}

void CpuBackend::contiguous_attention(DevicePtr<const float> q, int64_t num_tokens, DevicePtr<const float> keys,
                                      DevicePtr<const float> values, int64_t first_position, int num_heads,
                                      int num_kv_heads, int head_dim, const attention::AttentionVariant& variant,
                                      DevicePtr<float> out) {
  const int64_t width = static_cast<int64_t>(num_heads) * head_dim;
  const float* queries = q.host("contiguous_attention q");
  const float* history_keys = keys.host("contiguous_attention keys");
  const float* history_values = values.host("contiguous_attention values");
  float* rows = out.host("contiguous_attention out");
  for (int64_t t = 0; t < num_tokens; ++t) {
    attention::causal_attention_one_token(queries + t * width, history_keys, history_values, first_position + t,
                                          num_heads, num_kv_heads, head_dim, rows + t * width, variant);
  }
}

void CpuBackend::copy_kv_blocks(const attention::PagedKvLayer& layer, const int32_t* src, const int32_t* dst,
                                int64_t num_copies) {
  check_device(Device{}, layer.device, "copy_kv_blocks cache");
  attention::copy_kv_blocks(layer, src, dst, num_copies);
}

void CpuBackend::swiglu_ffn(DevicePtr<const float> x, int64_t num_rows, const quant::LinearWeight& gate,
                            const quant::LinearWeight& up, const quant::LinearWeight& down, DevicePtr<float> out) {
  experts::swiglu_ffn_forward(x.host("swiglu_ffn x"), num_rows, gate, up, down, out.host("swiglu_ffn out"), pool_);
}

void CpuBackend::grouped_expert_ffn(const experts::ExpertDispatchLayout& layout, DeviceSpan<const float> x,
                                    int hidden_size, const std::function<ExpertWeights(int expert)>& expert_weights,
                                    DeviceSpan<float> contributions) {
  std::vector<experts::GluFfnJob> jobs;
  experts::grouped_expert_ffn(
      layout, x.host("grouped_expert_ffn x"), hidden_size,
      experts::ExpertBatchFn([&](std::span<const experts::ExpertGroup> groups) {
        jobs.clear();
        for (const experts::ExpertGroup& g : groups) {
          const ExpertWeights w = expert_weights(g.expert);
          jobs.push_back({g.x, g.num_rows, w.gate, w.gate_bias, w.up, w.up_bias, w.down, w.down_bias, w.activation,
                          g.y});
        }
        experts::glu_ffn_forward_batch(jobs, pool_);
      }),
      contributions.host("grouped_expert_ffn contributions"));
}

void CpuBackend::route(const experts::RouterConfig& config, DevicePtr<const float> logits, int64_t num_tokens,
                       const float* selection_bias, DevicePtr<int32_t> expert_ids,
                       DevicePtr<float> weights) {
  experts::route_tokens(config, logits.host("route logits"), num_tokens, selection_bias,
                        expert_ids.host("route expert_ids"), weights.host("route weights"));
}

void CpuBackend::count_experts(DevicePtr<const int32_t> expert_ids, int64_t num_entries, int num_experts,
                               DevicePtr<int64_t> counts) {
  const int32_t* ids = expert_ids.host("count_experts expert_ids");
  int64_t* per_expert = counts.host("count_experts counts");
  for (int64_t i = 0; i < num_entries; ++i) {
    const int32_t e = ids[i];
    MOERT_CHECK(e >= 0 && e < num_experts, "expert id " << e << " outside [0, " << num_experts << ")");
    ++per_expert[e];
  }
}

void CpuBackend::combine_rows(std::span<const int64_t> src_rows, int top_k, DeviceSpan<const float> rows,
                              int hidden_size, DeviceSpan<float> out) {
  experts::sum_rows_in_order(src_rows, top_k, rows.host("combine_rows rows"), hidden_size,
                             out.host("combine_rows out"));
}

void CpuBackend::add(DevicePtr<float> x, DevicePtr<const float> y, int64_t count) {
  float* to = x.host("add x");
  const float* from = y.host("add y");
  for (int64_t i = 0; i < count; ++i) to[i] += from[i];
}

void CpuBackend::gated_add(DevicePtr<float> x, DevicePtr<const float> y, DevicePtr<const float> gate_logits,
                           int64_t num_rows, int64_t dim) {
  float* to = x.host("gated_add x");
  const float* from = y.host("gated_add y");
  const float* gates = gate_logits.host("gated_add gate_logits");
  for (int64_t t = 0; t < num_rows; ++t) {
    const float g = gates == nullptr ? 1.0f : 1.0f / (1.0f + std::exp(-gates[t]));
    for (int64_t i = 0; i < dim; ++i) to[t * dim + i] += g * from[t * dim + i];
  }
}

// Sequences in parallel (each reads and writes only its own rows and states).
void CpuBackend::gated_delta_net(const attention::GatedDeltaShape& shape, const attention::GatedDeltaParams& params,
                                 DevicePtr<const float> u, DevicePtr<const float> z, DevicePtr<const float> a,
                                 DevicePtr<const float> b, std::span<const RecurrentSequence> sequences,
                                 DevicePtr<float> out) {
  const int64_t channels = shape.conv_channels(), nv = shape.num_value_heads;
  const int64_t width = nv * shape.value_head_dim;
  const float* mixed = u.host("gated_delta_net u");
  const float* gate = z.host("gated_delta_net z");
  const float* decay = a.host("gated_delta_net a");
  const float* beta = b.host("gated_delta_net b");
  float* rows = out.host("gated_delta_net out");
  pool_.parallel_for(static_cast<int64_t>(sequences.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const RecurrentSequence& s = sequences[static_cast<size_t>(i)];
      const int64_t r = s.first_row;
      attention::gated_delta_net_sequence(shape, params, mixed + r * channels, gate + r * width, decay + r * nv,
                                          beta + r * nv, s.num_rows, s.conv_state.host("conv_state"),
                                          s.recurrent_state.host("recurrent_state"), rows + r * width,
                                          s.conv_states_after.host("conv_states_after"),
                                          s.recurrent_states_after.host("recurrent_states_after"), s.copies_after);
    }
  });
}

void CpuBackend::sigmoid_mul(DevicePtr<float> x, DevicePtr<const float> gate, int64_t count) {
  float* to = x.host("sigmoid_mul x");
  const float* g = gate.host("sigmoid_mul gate");
  for (int64_t i = 0; i < count; ++i) to[i] *= 1.0f / (1.0f + std::exp(-g[i]));
}

void CpuBackend::copy_bytes(DevicePtr<void> dst, DevicePtr<const void> src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst.host("copy_bytes dst"), src.host("copy_bytes src"), static_cast<size_t>(bytes));
}

void CpuBackend::copy_rows(DevicePtr<float> dst, int64_t dst_stride, DevicePtr<const float> src, int64_t src_stride,
                           int64_t num_rows, int64_t width) {
  float* to = dst.host("copy_rows dst");
  const float* from = src.host("copy_rows src");
  for (int64_t r = 0; r < num_rows; ++r) std::copy_n(from + r * src_stride, width, to + r * dst_stride);
}

// Work items are (head, output row) pairs; each computes that output for every token with
// the canonical dot product (core/cpu/dot.h), so a result depends only on its own inputs.
void CpuBackend::per_head_linear(const float* weights, int num_heads, int64_t out_features, int64_t in_features,
                                 DevicePtr<const float> x_ptr, int64_t x_head_stride, int64_t num_tokens,
                                 DevicePtr<float> y_ptr, int64_t y_head_stride) {
  if (num_tokens == 0) return;
  const float* x = x_ptr.host("per_head_linear x");
  float* y = y_ptr.host("per_head_linear y");
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

void CpuBackend::gather_rows(DevicePtr<const float> src, int64_t dim, const int64_t* rows, int64_t num_rows,
                             DevicePtr<float> dst) {
  const float* from = src.host("gather_rows src");
  float* to = dst.host("gather_rows dst");
  for (int64_t r = 0; r < num_rows; ++r) std::copy_n(from + rows[r] * dim, dim, to + r * dim);
}

void CpuBackend::argmax_rows(DevicePtr<const float> logits, int64_t num_rows, int64_t vocab, DevicePtr<int32_t> out) {
  const float* rows = logits.host("argmax_rows logits");
  int32_t* ids = out.host("argmax_rows out");
  for (int64_t r = 0; r < num_rows; ++r) ids[r] = reference_argmax(rows + r * vocab, vocab);
}

void CpuBackend::sample_rows(DevicePtr<const float> logits, int64_t vocab, std::span<const RowSampling> rows,
                             int32_t* out) {
  const float* values = logits.host("sample_rows logits");
  std::vector<double> scratch;
  for (size_t r = 0; r < rows.size(); ++r) {
    sampling::SamplingParams params;
    params.temperature = rows[r].temperature;
    params.top_k = rows[r].top_k;
    params.top_p = rows[r].top_p;
    out[r] = sampling::sample_token(values + static_cast<int64_t>(r) * vocab, static_cast<int>(vocab), params,
                                    rows[r].uniform, &scratch);
  }
}

}  // namespace moert::backend
