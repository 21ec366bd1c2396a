// The compute backend: one table of the operations a forward pass needs, so the model,
// the engine, expert parallelism and speculative decoding never call a kernel directly.
// Backends are peers (docs/architecture.md): runtime/backend/cpu (the CPU kernels) and
// runtime/backend/cuda (device memory and the CUDA kernels) implement the same table, and each
// lays a model's weights out for its kernels (prepare_weights). No backend pointer is null. tests/runtime/backend/conformance_test.cpp checks every op of
// every compiled backend against the simple references of reference_ops.h.
//
// Contract of every op: activations are F32 arrays, row-major, with the shapes given beside
// each op. Every array an op reads or writes is a DevicePtr / DeviceSpan (core/device.h) that
// names its device: the backend's own (device()), or the host where an op says it takes host
// data (index arrays, sampled tokens). A device backend also takes host arrays elsewhere and
// stages them for the call (tests, small host-built operands); it never asks the driver where a
// raw pointer lives. Weights are the model's plain views in host memory (quant::LinearWeight,
// TensorView, and the `const float*` norm weights, biases and sinks): the backend placed them
// at prepare_weights / place_host_weights and finds its copy by the view. Every op is
// row-invariant: a row's result depends only on that row's inputs (and, for attention,
// its own sequence's K/V), never on the batch around it.
//
// Shapes: T tokens, D hidden, V vocab, H / KVH heads, Dh head_dim, E experts, K top-k,
// N expert entries, R rows.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>

#include "attention/paged_kv.h"
#include "attention/gated_delta_shape.h"
#include "attention/rope.h"
#include "core/status.h"
#include "core/tensor.h"
#include "experts/glu_activation.h"
#include "experts/grouped/grouped_expert_ffn.h"
#include "experts/router.h"
#include "quant/weight.h"

namespace moert {
struct ModelWeights;  // runtime/model/weights.h: the model's plain weight views
namespace io {
class Checkpoint;
}
}  // namespace moert

namespace moert::backend {

// Where the weights a CPU computes with live (docs/architecture.md "Weight memory").
enum class WeightMemory {
  kCopy,   // copied out of the mappings into one buffer of this process (huge pages); the default
  kMmap,   // read in place from the mappings: nothing copied, pages shared by a node's ranks
  kMlock,  // read in place from the mappings, locked with mlock(2) (needs RLIMIT_MEMLOCK)
};

// What a backend is asked to do with a model's weights before computing with them.
struct WeightPreparation {
  // CPU-only activation modes (quant/weight.h; launch refuses them for a device): FP8
  // weights computed with BF16 activations, dense BF16 weights with BF16 activations.
  quant::ActivationPrecision fp8_activations = quant::ActivationPrecision::kF32;
  quant::ActivationPrecision bf16_activations = quant::ActivationPrecision::kF32;
  WeightMemory memory = WeightMemory::kCopy;
  // Whether this rank computes routed expert `expert` of `layer` (an expert-parallel rank
  // lays out and holds only its own); empty: every expert.
  std::function<bool(int layer, int expert)> routed_expert_here;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual Device device() const = 0;
  // The instruction sets this backend's kernels chose on this machine (empty: not applicable):
  // the dense kernels, and those of the BF16 activation modes. Shown at start-up and in reports.
  struct KernelPaths {
    std::string isa;
    std::string bf16_activations;
  };
  virtual KernelPaths kernel_paths() const { return {}; }

  // What this backend computes where, so that callers choose a path up front (in the manner of
  // ggml's supports_op) instead of an op falling back silently: route_on and
  // routed_experts_on (below) take the backend's path within these bounds and the host's
  // beyond them, naming the fallback once in the log.
  struct Capabilities {
    // route() takes router configs of at most this many experts and groups.
    int max_router_experts = std::numeric_limits<int>::max();
    int max_router_groups = std::numeric_limits<int>::max();
    // routed_experts() plans its layout on the device for at most this many tokens and T x K
    // entries (0: it has no device planning; the default routed_experts plans on the host).
    int64_t max_device_layout_tokens = 0;
    int64_t max_device_layout_entries = 0;
  };
  virtual Capabilities capabilities() const { return {}; }

  // Lays `weights` (views into `checkpoint`'s mappings, in the checkpoint's layout) out for
  // this backend's kernels, in the manner of ggml's buffer types: the CPU repacks FP4 codes
  // into its order, makes the BF16-mode copies and holds the weights in memory as `how` says;
  // a device uploads the regions this rank computes with, as they are. Same results either way: a
  // layout changes where bytes live, never what a weight computes. Errors name the problem
  // (a copy that does not fit in memory, a refused mlock).
  virtual Status prepare_weights(ModelWeights& weights, const io::Checkpoint& checkpoint,
                                 const WeightPreparation& how) {
    return Status::ok();
  }

  // Storage on this backend's device (weights, KV blocks, activations): contiguous,
  // 64-byte aligned, uninitialised.
  virtual Buffer allocate(DType dtype, Shape shape) = 0;
  // The KV cache element type `--kv-cache-dtype auto` means on this backend.
  virtual DType preferred_kv_cache_dtype() const = 0;

  // out[t] = table[tokens[t]] widened to F32. table: [V, D] F32/BF16/F16; out: [T, D].
  // Precondition: 0 <= tokens[t] < V (the caller validated the batch).
  virtual void embedding_gather(const TensorView& table, DevicePtr<const int32_t> tokens, int64_t num_tokens,
                                DevicePtr<float> out) = 0;
  // x: [R, dim] in place: x * rsqrt(mean(x^2) + eps) * weight[dim].
  virtual void rms_norm(DevicePtr<float> x, int64_t num_rows, int64_t dim, const float* weight, float eps) = 0;
  // y[R, N] = x[R, K] . W^T (+ bias[N] when not null), any weight format.
  virtual void linear(const quant::LinearWeight& weight, DevicePtr<const float> x, int64_t num_rows,
                      const float* bias, DevicePtr<float> y) = 0;
  // linear() of several weights over one x [R, K] (the q, k and v projections): y_i [R, N_i] =
  // x . W_i^T (+ bias_i), each with the bits linear() gives it; a backend may run them as one
  // step (the CPU: one wake-up of its threads instead of one per weight).
  struct LinearOfX {
    const quant::LinearWeight* weight = nullptr;
    const float* bias = nullptr;
    DevicePtr<float> y;
  };
  virtual void linears_of(DevicePtr<const float> x, int64_t num_rows, std::span<const LinearOfX> calls) {
    for (const LinearOfX& call : calls) linear(*call.weight, x, num_rows, call.bias, call.y);
  }
  // Rotates heads [T, num_heads, Dh] in place, token t at positions[t] (host data, or device
  // memory after prepare_device_positions).
  virtual void rope(const attention::RotaryEmbedding& rope, DevicePtr<float> heads, int64_t num_tokens, int num_heads,
                    DevicePtr<const int64_t> positions) = 0;
  // Writes K/V rows [T, KVH, Dh] into their paged slots [T] (-1: padding, skipped),
  // converted to the layer's element type (attention/paged_kv.h).
  virtual void write_kv(const attention::PagedKvLayer& layer, DevicePtr<const float> k, DevicePtr<const float> v,
                        DevicePtr<const int64_t> slots, int64_t num_tokens) = 0;
  // Causal paged attention (prefill and decode alike) over the plan's block tables (host
  // data, or a step graph's device arrays: plan.device says).
  // q, out: [T, H, Dh].
  virtual void paged_attention(DevicePtr<const float> q, const attention::PagedKvLayer& layer,
                               const attention::PagedAttentionPlan& plan, int num_heads, DevicePtr<float> out) = 0;
  // Causal attention of one sequence over a contiguous K/V history (the reference path),
  // under the layer's variant (window, sinks, scale, soft-cap):
  // query row t sits at position first_position + t and attends to history rows
  // 0 .. first_position + t. q, out: [T, H, Dh]; keys, values: [>= first_position + T, KVH, Dh].
  virtual void contiguous_attention(DevicePtr<const float> q, int64_t num_tokens, DevicePtr<const float> keys,
                                    DevicePtr<const float> values, int64_t first_position, int num_heads,
                                    int num_kv_heads, int head_dim, const attention::AttentionVariant& variant,
                                    DevicePtr<float> out) = 0;
  // Linear attention (docs/gated-deltanet.md). One sequence's rows in a gated_delta_net call and
  // the state it carries across steps, on this device: conv [W-1, C] and recurrent [NV, DK, DV]
  // (F32), updated in place. When the *_after arrays are set they receive the states after
  // each of the rows ([rows, W-1, C] and [rows, NV, DK, DV]: a speculative verify's candidates),
  // and copies_after the states after the rows they name.
  struct RecurrentSequence {
    int64_t first_row = 0, num_rows = 0;
    DevicePtr<float> conv_state;
    DevicePtr<float> recurrent_state;
    DevicePtr<float> conv_states_after;
    DevicePtr<float> recurrent_states_after;
    // The states after these rows are also written where each says (snapshots at block
    // boundaries inside the chunk; rows ascending; host array of pointers into the state
    // storage on this backend's device, as conv_state is).
    std::span<const attention::StateCopy> copies_after;
  };
  // The Gated DeltaNet token mixer after the projections, sequence by sequence:
  // attention::gated_delta_net_sequence over each sequence's rows of u [T, C], z [T, NV DV],
  // a, b [T, NV] into out [T, NV DV]. `sequences` is host data; rows outside them are not
  // written.
  virtual void gated_delta_net(const attention::GatedDeltaShape& shape, const attention::GatedDeltaParams& params,
                               DevicePtr<const float> u, DevicePtr<const float> z, DevicePtr<const float> a,
                               DevicePtr<const float> b, std::span<const RecurrentSequence> sequences,
                               DevicePtr<float> out) = 0;
  // x[i] *= sigmoid(gate[i]) (as 1 / (1 + exp(-g))) for i < count (gated attention's output).
  virtual void sigmoid_mul(DevicePtr<float> x, DevicePtr<const float> gate, int64_t count) = 0;
  // ---- DeepSeek Sparse Attention (docs/sparse-attention.md) over a latent layer whose rows
  // are [key (key_width) | kI (DI)] (attention/cpu/sparse_attention.h has the exact rules) ----
  // selected [T, K] (int32): per query row of the causal plan (host data), the min(K, visible)
  // positions of highest index score (ties to the lower position), ascending, then -1. kI is
  // read at channels [key_offset, key_offset + DI) of each row; index.queries / weights are
  // on index.device. The default is the host-side path (in backend.cpp); the CPU overrides it.
  virtual void sparse_index_select(const attention::SparseIndexQuery& index, const attention::PagedKvLayer& layer,
                                   int key_offset, const attention::PagedAttentionPlan& plan,
                                   DevicePtr<int32_t> selected);
  // Attention of each query row over its selected positions only (the first key_width channels
  // of the rows as keys and values). q, out: [T, H, key_width]. Default: the host-side path.
  virtual void sparse_paged_attention(DevicePtr<const float> q, const attention::PagedKvLayer& layer, int key_width,
                                      const attention::PagedAttentionPlan& plan, int num_heads,
                                      DevicePtr<const int32_t> selected, int top_k, DevicePtr<float> out);
  // x: [R, dim] in place: LayerNorm with bias, (x - mean) / sqrt(biased var + eps) * weight +
  // bias (weight, bias: [dim] host weights, place_host_weights). Default: the host-side path.
  virtual void layer_norm(DevicePtr<float> x, int64_t num_rows, int64_t dim, const float* weight, const float* bias,
                          float eps);

  // Copy-on-write of whole KV blocks, src[i] -> dst[i] in order (host block ids).
  virtual void copy_kv_blocks(const attention::PagedKvLayer& layer, const int32_t* src, const int32_t* dst,
                              int64_t num_copies) = 0;
  // SwiGLU MLP: out[R, D] = down(silu(gate x) * up x). x: [R, D].
  virtual void swiglu_ffn(DevicePtr<const float> x, int64_t num_rows, const quant::LinearWeight& gate,
                          const quant::LinearWeight& up, const quant::LinearWeight& down, DevicePtr<float> out) = 0;
  // Grouped expert FFN over a dispatch layout: contributions[N, D] (experts/grouped).
  // expert_weights(e) gives routed expert e's weights, biases and gated activation.
  struct ExpertWeights {
    const quant::LinearWeight* gate = nullptr;
    const quant::LinearWeight* up = nullptr;
    const quant::LinearWeight* down = nullptr;
    const float* gate_bias = nullptr;  // [I] or null, likewise up_bias [I], down_bias [D]
    const float* up_bias = nullptr;
    const float* down_bias = nullptr;
    experts::GluActivation activation;
  };
  // The layout is host data.
  virtual void grouped_expert_ffn(const experts::ExpertDispatchLayout& layout, DeviceSpan<const float> x,
                                  int hidden_size, const std::function<ExpertWeights(int expert)>& expert_weights,
                                  DeviceSpan<float> contributions) = 0;
  // The routed experts of one MoE layer on one rank from its own routing:
  // out[t] = sum over t's K entries in ascending expert id (ties: ascending k), from +0.0f,
  // of weights[t, k] * expert expert_ids[t, k] applied to h[t]: what
  // experts::layout_from_routing, grouped_expert_ffn and combine_rows compute together, with
  // the same bits. expert_ids, weights: [T, K] (on this device, a device may plan the layout
  // there, so the ids never reach the host; routing in host memory is planned on the host);
  // h, out: [T, D]; ids in [0, num_experts) (checked where the layout is planned on the host).
  // The default plans on the host; a backend with device planning takes at most
  // capabilities().max_device_layout_tokens tokens (callers: routed_experts_on).
  virtual void routed_experts(DevicePtr<const float> h, int64_t num_tokens, int hidden_size,
                              DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights, int top_k,
                              int num_experts, const std::function<ExpertWeights(int expert)>& expert_weights,
                              DevicePtr<float> out) {
    routed_experts_planned_on_host(h, num_tokens, hidden_size, expert_ids, weights, top_k, num_experts,
                                   expert_weights, out);
  }
  // routed_experts() with the layout planned on the host: the routing comes back first.
  void routed_experts_planned_on_host(DevicePtr<const float> h, int64_t num_tokens, int hidden_size,
                                      DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights, int top_k,
                                      int num_experts, const std::function<ExpertWeights(int expert)>& expert_weights,
                                      DevicePtr<float> out);
  // counts[e] += the number of entries of expert_ids [N] equal to e, for e < num_experts
  // (load statistics kept where the routing is; both arrays on this device).
  virtual void count_experts(DevicePtr<const int32_t> expert_ids, int64_t num_entries, int num_experts,
                             DevicePtr<int64_t> counts) = 0;
  // Router top-k: logits [T, E] -> expert_ids, weights [T, K] (experts/router.h rules), for a
  // config within capabilities() (callers: route_on). selection_bias: [E] host data (a placed
  // weight, or a per-step array the backend stages) or null.
  virtual void route(const experts::RouterConfig& config, DevicePtr<const float> logits, int64_t num_tokens,
                     const float* selection_bias, DevicePtr<int32_t> expert_ids,
                     DevicePtr<float> weights) = 0;
  // route() on the host (experts/router.h): the logits come back, the ids and weights go to
  // where they live. Any config.
  void route_on_host(const experts::RouterConfig& config, DevicePtr<const float> logits, int64_t num_tokens,
                     const float* selection_bias, DevicePtr<int32_t> expert_ids, DevicePtr<float> weights);
  // Combine of routed experts: out[t] = sum over j of rows[src_rows[t * K + j]], j ascending,
  // from +0.0f (experts/grouped/dispatch_layout.h). rows: [N, D]; src_rows: [T, K] (host
  // data); out: [T, D].
  virtual void combine_rows(std::span<const int64_t> src_rows, int top_k, DeviceSpan<const float> rows,
                            int hidden_size, DeviceSpan<float> out) = 0;
  // x[i] += y[i] for i < count.
  virtual void add(DevicePtr<float> x, DevicePtr<const float> y, int64_t count) = 0;
  // x[t, :] += g_t * y[t, :] for t < R with g_t = sigmoid(gate_logits[t]) (as 1 / (1 + exp(-l)))
  // or 1 when gate_logits is null (then x += 1 * y, exact). x, y: [R, dim].
  virtual void gated_add(DevicePtr<float> x, DevicePtr<const float> y, DevicePtr<const float> gate_logits,
                         int64_t num_rows, int64_t dim) = 0;
  // dst[i] = src[i] for i < count.
  virtual void copy(DevicePtr<float> dst, DevicePtr<const float> src, int64_t count) {
    copy_bytes(dst, src, count * static_cast<int64_t>(sizeof(float)));
  }
  // Byte copy where each side is on this backend's device or in host memory (uploads,
  // downloads, tests filling a KV pool). Completes before it returns unless both sides are
  // on the device.
  virtual void copy_bytes(DevicePtr<void> dst, DevicePtr<const void> src, int64_t bytes) = 0;
  // Places one more weight region (host memory that stays unchanged while this backend
  // lives) where the ops read it, now: what prepare_weights does for the model's regions, for
  // a routed expert the balancer moves to this rank later and for tests of single ops. A
  // device copies it into its memory; the CPU reads it in place and does nothing here.
  virtual void place_host_weights(const void* /*data*/, int64_t /*bytes*/) {}
  // Returns once every op issued so far has completed, so that another stream or library
  // (NCCL on its own stream) may read what they wrote. The CPU's ops complete as they return.
  virtual void synchronize() {}
  // Strided 2-D copy: dst[r * dst_stride + i] = src[r * src_stride + i] for r < R, i < width.
  virtual void copy_rows(DevicePtr<float> dst, int64_t dst_stride, DevicePtr<const float> src, int64_t src_stride,
                         int64_t num_rows, int64_t width) = 0;
  // One matrix per head (MLA's absorbed up-projections, docs/mla.md):
  // y[t, h, o] = sum over i < in of W[h, o, i] * x[t, h, i], for t < T, h < H, o < out.
  // weights: [H, out, in] F32, a host weight. Head h of token t is read at
  // x + (t * H + h) * x_head_stride (its first `in` values) and written at
  // y + (t * H + h) * y_head_stride (its first `out` values; the rest are left untouched).
  virtual void per_head_linear(const float* weights, int num_heads, int64_t out_features, int64_t in_features,
                               DevicePtr<const float> x, int64_t x_head_stride, int64_t num_tokens, DevicePtr<float> y,
                               int64_t y_head_stride) = 0;
  // host_dst[i] = src[i] for i < count: results leave the device (logits for sampling).
  void to_host(DevicePtr<const float> src, int64_t count, float* host_dst) { copy(host_ptr(host_dst), src, count); }
  // dst[r, :] = src[rows[r], :] for r < num_rows; rows is host data. src: [*, dim]; dst: [R, dim].
  virtual void gather_rows(DevicePtr<const float> src, int64_t dim, const int64_t* rows, int64_t num_rows,
                           DevicePtr<float> dst) = 0;
  // Sampling entry point for greedy rows: out[r] = argmax of logits[r, :V], lowest id on ties.
  virtual void argmax_rows(DevicePtr<const float> logits, int64_t num_rows, int64_t vocab, DevicePtr<int32_t> out) = 0;
  // One row's draw, as sampling::sample_token takes it (runtime/sampling/sampler.h):
  // temperature 0 is greedy; top_k 0 and top_p 1 are off; uniform in [0, 1).
  struct RowSampling {
    float temperature = 0.0f;
    int top_k = 0;
    float top_p = 1.0f;
    double uniform = 0.0;
  };
  // out[r] = the token drawn from logits[r, :V] under rows[r], so the logits need not leave
  // the device. out is host data. A backend's draw may differ from sample_token only where
  // the uniform falls within float64 rounding of a cumulative-mass boundary.
  virtual void sample_rows(DevicePtr<const float> logits, int64_t vocab, std::span<const RowSampling> rows,
                           int32_t* out) = 0;

  // ---- Step graphs (CUDA graphs; docs/cuda-backend.md, Step graphs) ----------------------
  // The ops of one step, recorded once and replayed as one launch.
  class StepGraph {
   public:
    virtual ~StepGraph() = default;
    // Runs the recorded ops again over what the device memory they read holds now.
    virtual void replay() = 0;
  };
  // Records the ops `record` issues instead of running them. The ops may read only device
  // memory (index arrays included) and must not bring anything to the host; every Buffer
  // allocated inside `record` must be released before it returns (its memory then belongs
  // to the graph). Returns the graph, or why none could be made (this backend records
  // nothing, an op needed host data or a synchronisation), having run nothing.
  virtual Result<std::unique_ptr<StepGraph>> capture(const std::function<void()>& record) {
    (void)record;
    return unsupported(std::string("the ") + name() + " backend has no step graphs");
  }
  // After this, rope() with `rope` accepts positions in device memory, each below
  // max_positions (a step graph's positions are device data). The CPU reads them in place.
  virtual void prepare_device_positions(const attention::RotaryEmbedding& rope, int64_t max_positions) {
    (void)rope;
    (void)max_positions;
  }
};

// The routing of `num_tokens` tokens: backend.route() when its capabilities take `config`,
// else backend.route_on_host() (the first such call of the process says so in the log). Same
// rules, same ids; weights within float rounding of each other.
void route_on(Backend& backend, const experts::RouterConfig& config, DevicePtr<const float> logits,
              int64_t num_tokens, const float* selection_bias, DevicePtr<int32_t> expert_ids,
              DevicePtr<float> weights);
// The routed experts of one MoE layer: backend.routed_experts() when the backend plans on its
// device and its capabilities take the batch, else planned on the host (the first fallback of
// the process says so in the log). The same bits either way.
void routed_experts_on(Backend& backend, DevicePtr<const float> h, int64_t num_tokens, int hidden_size,
                       DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights, int top_k,
                       int num_experts, const std::function<Backend::ExpertWeights(int expert)>& expert_weights,
                       DevicePtr<float> out);

}  // namespace moert::backend
