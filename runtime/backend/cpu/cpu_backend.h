// The CPU backend: the op table over the CPU kernels (quant/cpu, attention/cpu, experts),
// host memory and a thread pool. Results are bit-identical to calling the kernels directly.
// It lays weights out for its kernels itself (prepare_weights: cpu_weight_layout.h).
#pragma once

#include "core/thread_pool.h"
#include "runtime/backend/backend.h"

namespace moert::backend {

class CpuBackend : public Backend {
 public:
  // pool must outlive the backend.
  explicit CpuBackend(ThreadPool& pool) : pool_(pool) {}

  const char* name() const override { return "cpu"; }
  Device device() const override { return {}; }
  KernelPaths kernel_paths() const override;
  Status prepare_weights(ModelWeights& weights, const io::Checkpoint& checkpoint,
                         const WeightPreparation& how) override;
  Buffer allocate(DType dtype, Shape shape) override;
  // F32: exact, and the CPU computes in F32 anyway (BF16 / FP8 halve / quarter the memory).
  DType preferred_kv_cache_dtype() const override { return DType::kF32; }

  void embedding_gather(const TensorView& table, DevicePtr<const int32_t> tokens, int64_t num_tokens,
                        DevicePtr<float> out) override;
  void rms_norm(DevicePtr<float> x, int64_t num_rows, int64_t dim, const float* weight, float eps) override;
  void linear(const quant::LinearWeight& weight, DevicePtr<const float> x, int64_t num_rows, const float* bias,
              DevicePtr<float> y) override;
  void linears_of(DevicePtr<const float> x, int64_t num_rows, std::span<const LinearOfX> calls) override;
  void rope(const attention::RotaryEmbedding& rope, DevicePtr<float> heads, int64_t num_tokens, int num_heads,
            DevicePtr<const int64_t> positions) override;
  void write_kv(const attention::PagedKvLayer& layer, DevicePtr<const float> k, DevicePtr<const float> v,
                DevicePtr<const int64_t> slots, int64_t num_tokens) override;
  void paged_attention(DevicePtr<const float> q, const attention::PagedKvLayer& layer,
                       const attention::PagedAttentionPlan& plan, int num_heads, DevicePtr<float> out) override;
  void sparse_index_select(const attention::SparseIndexQuery& index, const attention::PagedKvLayer& layer,
                           int key_offset, const attention::PagedAttentionPlan& plan,
                           DevicePtr<int32_t> selected) override;
  void sparse_paged_attention(DevicePtr<const float> q, const attention::PagedKvLayer& layer, int key_width,
                              const attention::PagedAttentionPlan& plan, int num_heads,
                              DevicePtr<const int32_t> selected, int top_k, DevicePtr<float> out) override;
  void layer_norm(DevicePtr<float> x, int64_t num_rows, int64_t dim, const float* weight, const float* bias,
                  float eps) override;
  void contiguous_attention(DevicePtr<const float> q, int64_t num_tokens, DevicePtr<const float> keys,
                            DevicePtr<const float> values, int64_t first_position, int num_heads, int num_kv_heads,
                            int head_dim, const attention::AttentionVariant& variant, DevicePtr<float> out) override;
  void copy_kv_blocks(const attention::PagedKvLayer& layer, const int32_t* src, const int32_t* dst,
                      int64_t num_copies) override;
  void gated_delta_net(const attention::GatedDeltaShape& shape, const attention::GatedDeltaParams& params,
                       DevicePtr<const float> u, DevicePtr<const float> z, DevicePtr<const float> a,
                       DevicePtr<const float> b, std::span<const RecurrentSequence> sequences,
                       DevicePtr<float> out) override;
  void sigmoid_mul(DevicePtr<float> x, DevicePtr<const float> gate, int64_t count) override;
  void swiglu_ffn(DevicePtr<const float> x, int64_t num_rows, const quant::LinearWeight& gate,
                  const quant::LinearWeight& up, const quant::LinearWeight& down, DevicePtr<float> out) override;
  void grouped_expert_ffn(const experts::ExpertDispatchLayout& layout, DeviceSpan<const float> x, int hidden_size,
                          const std::function<ExpertWeights(int expert)>& expert_weights,
                          DeviceSpan<float> contributions) override;
  void route(const experts::RouterConfig& config, DevicePtr<const float> logits, int64_t num_tokens,
             const float* selection_bias, DevicePtr<int32_t> expert_ids, DevicePtr<float> weights) override;
  void count_experts(DevicePtr<const int32_t> expert_ids, int64_t num_entries, int num_experts,
                     DevicePtr<int64_t> counts) override;
  void combine_rows(std::span<const int64_t> src_rows, int top_k, DeviceSpan<const float> rows, int hidden_size,
                    DeviceSpan<float> out) override;
  void add(DevicePtr<float> x, DevicePtr<const float> y, int64_t count) override;
  void gated_add(DevicePtr<float> x, DevicePtr<const float> y, DevicePtr<const float> gate_logits, int64_t num_rows,
                 int64_t dim) override;
  void copy_bytes(DevicePtr<void> dst, DevicePtr<const void> src, int64_t bytes) override;
  void copy_rows(DevicePtr<float> dst, int64_t dst_stride, DevicePtr<const float> src, int64_t src_stride,
                 int64_t num_rows, int64_t width) override;
  void per_head_linear(const float* weights, int num_heads, int64_t out_features, int64_t in_features,
                       DevicePtr<const float> x, int64_t x_head_stride, int64_t num_tokens, DevicePtr<float> y,
                       int64_t y_head_stride) override;
  void gather_rows(DevicePtr<const float> src, int64_t dim, const int64_t* rows, int64_t num_rows,
                   DevicePtr<float> dst) override;
  void argmax_rows(DevicePtr<const float> logits, int64_t num_rows, int64_t vocab, DevicePtr<int32_t> out) override;
  // sampling::sample_token per row: the engine's host path, draw for draw.
  void sample_rows(DevicePtr<const float> logits, int64_t vocab, std::span<const RowSampling> rows,
                   int32_t* out) override;

  ThreadPool& pool() const { return pool_; }

 private:
  ThreadPool& pool_;
};

}  // namespace moert::backend
