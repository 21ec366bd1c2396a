#include "runtime/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "experts/router.h"
#include "quant/formats/fp4.h"
#include "attention/cuda/attention.h"
#include "attention/cuda/gated_delta_net.h"
#include "quant/cuda/block_scaled_gemm.h"
#include "core/cuda/cuda_api.h"
#include "runtime/backend/cuda/device_memory.h"
#include "runtime/backend/cuda/device_weights.h"
#include "runtime/model/weights.h"
#include "core/cuda/elementwise.h"
#include "quant/cuda/linear.h"
#include "core/cuda/rms_norm.h"
#include "attention/cuda/rope.h"
#include "experts/cuda/router.h"
#include "runtime/sampling/cuda/sampling.h"

namespace moert::MOERT_CUDA_NS {
namespace {

using namespace backend_detail;

// Up to this many tokens a MoE layer's layout is planned on the device (routed_experts):
// no expert group can exceed the warp kernel's rows then.
constexpr int64_t kDeviceLayoutMaxTokens = 16;

class CudaBackend : public backend::Backend {
 public:
  // Compute capability 10 and later have block-scaled FP4 tensor cores (block_scaled_gemm.h).
  explicit CudaBackend(int device_index) : device_index_(device_index) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_index) != cudaSuccess) {
      cudaGetLastError();
      major = 0;
    }
    block_scaled_ = major >= 10;
    if (block_scaled_) block_scaled_workspace_ = allocate(DType::kU8, {kBlockScaledWorkspaceBytes});
  }

#if defined(MOERT_CUDA_EMULATION)
  const char* name() const override { return "cuda-emulated"; }
#else
  const char* name() const override { return "cuda"; }
#endif
  Device device() const override { return {DeviceKind::kCuda, device_index_}; }

  Buffer allocate(DType dtype, Shape shape) override {
    const int64_t bytes = shape_numel(shape) * dtype_bytes(dtype);
    TensorView view = TensorView::contiguous(dtype, std::move(shape), device_alloc(bytes));
    view.device = device();
    return Buffer(view, static_cast<uint64_t>(bytes), &release_device);
  }
  // BF16: half the bytes of F32 and what GPU serving stacks keep by default (docs/kv-cache.md).
  DType preferred_kv_cache_dtype() const override { return DType::kBF16; }

  // Places every weight region this rank computes with (docs/cuda-backend.md "Weights"): the
  // ops then find each weight's device copy by its host view, and nothing is uploaded on use.
  Status prepare_weights(ModelWeights& weights, const io::Checkpoint& /*checkpoint*/,
                         const backend::WeightPreparation& how) override {
    for_each_weight_region(weights, [this](const void* data, int64_t bytes) { weights_.place(data, bytes); },
                           how.routed_expert_here);
    return Status::ok();
  }
  void place_host_weights(const void* data, int64_t bytes) override { weights_.place(data, bytes); }

  void embedding_gather(const TensorView& table, DevicePtr<const int32_t> tokens, int64_t num_tokens,
                        DevicePtr<float> out) override {
    Staging s(weights_, device());
    const int64_t dim = table.dim(1);
    MOERT_CHECK(table.dtype == DType::kF32 || table.dtype == DType::kBF16 || table.dtype == DType::kF16,
                "embedding dtype " << dtype_name(table.dtype) << " (F32, BF16 or F16 expected)");
    const TableType type = table.dtype == DType::kF32    ? TableType::kF32
                           : table.dtype == DType::kBF16 ? TableType::kBF16
                                                         : TableType::kF16;
    const void* device_table = s.weight(table, table.numel() * dtype_bytes(table.dtype));
    s.finish(MOERT_CUDA_NS::embedding_gather(device_table, type, dim, s.in(tokens, num_tokens), num_tokens,
                                             s.out(out, num_tokens * dim), stream()),
             "embedding_gather");
  }

  void rms_norm(DevicePtr<float> x, int64_t num_rows, int64_t dim, const float* weight, float eps) override {
    Staging s(weights_, device());
    s.finish(rms_norm_rows(s.inout(x, num_rows * dim), num_rows, dim, s.weight(weight, dim), eps, stream()),
             "rms_norm");
  }

  void linear(const quant::LinearWeight& weight, DevicePtr<const float> x, int64_t num_rows, const float* bias,
              DevicePtr<float> y) override {
    Staging s(weights_, device());
    const DeviceWeight w = device_weight(weight, s);
    const bool resident = s.all_weights_resident();
    const Fp4Activations fp4 = fp4_activations_of(weight);
    const float* device_x = s.in(x, num_rows * w.cols);
    const float* device_bias = s.weight(bias, w.rows);
    float* device_y = s.out(y, num_rows * w.rows);
    if (!block_scaled_linear(fp4, w, resident, device_x, num_rows, device_bias, device_y, s)) {
      check(MOERT_CUDA_NS::linear(w, rounded_activations(fp4, device_x, num_rows, w.cols, s), num_rows, device_bias,
                                  device_y, stream()),
            "linear");
    }
    s.finish(0, "linear");
  }

  // y [R, N] = x [R, K] . W^T (+ bias) on the block-scaled FP4 tensor cores (compute
  // capability 10+), x quantized per row to W's format: what `--fp4-activations fp4` asks,
  // computed natively. False (nothing written) where they do not apply: the caller then
  // computes the same definition with x rounded (rounded_activations) on the other kernels.
  bool block_scaled_linear(Fp4Activations fp4, const DeviceWeight& w, bool resident, const float* x, int64_t num_rows,
                           const float* bias, float* y, Staging& s) {
    if (fp4 == Fp4Activations::kNone || !block_scaled_) return false;
    const uint8_t* weight_scales = tiled_weight_scales(fp4, w, resident, s);
    return weight_scales != nullptr && block_scaled_product(fp4, w, weight_scales, bias, x, num_rows, y, s);
  }

  // y [R, N] = x [R, K] . W^T (+ bias), x quantized here, W's scales already tiled. False
  // when the library has no kernel for it (warned once; y not written).
  bool block_scaled_product(Fp4Activations fp4, const DeviceWeight& w, const uint8_t* weight_scales, const float* bias,
                            const float* x, int64_t num_rows, float* y, Staging& s) {
    const int64_t scale_cols = w.cols / fp4_activation_block(fp4);
    auto* codes = s.temporary_array<uint8_t>(num_rows * w.cols / 2);
    auto* scales = s.temporary_array<uint8_t>(quant::scale_tiles_bytes(num_rows, scale_cols));
    float* row_scale = s.temporary_array<float>(num_rows);
    check(quantize_fp4_activations(fp4, x, num_rows, w.cols, codes, scales, row_scale, stream()),
          "quantize_fp4_activations");
    const bool nvfp4 = fp4 == Fp4Activations::kNvfp4;
    const int status = block_scaled_gemm(fp4, {w.data, weight_scales, w.rows}, {codes, scales, num_rows}, w.cols,
                                         nvfp4 ? w.global_scale : 1.0f, y, block_scaled_workspace_.data<uint8_t>(),
                                         stream());
    if (status == kBlockScaledUnsupported) {
      if (!warned_block_scaled_unsupported_) {
        MOERT_LOG(kWarn, "block-scaled FP4 GEMM unavailable for a " << w.rows << " x " << w.cols
                             << " weight (cuBLASLt has no kernel): FP4 activations computed on the other kernels");
        warned_block_scaled_unsupported_ = true;
      }
      return false;
    }
    check(status, "block_scaled_gemm");
    check(scale_rows_add_bias(y, nvfp4 ? row_scale : nullptr, bias, num_rows, w.rows, stream()), "scale_rows_add_bias");
    return true;
  }

  // grouped_expert_ffn on the block-scaled FP4 tensor cores (as block_scaled_linear): per
  // expert, its rows gathered, gate and up GEMMs, the activation, the down GEMM, each row
  // times its routing weight into its contribution row. False (nothing written) where they do
  // not apply.
  bool block_scaled_experts(const experts::ExpertDispatchLayout& layout, DeviceSpan<const float> x, int hidden_size,
                            const ExpertSet& set, const std::vector<DeviceExpert>& table, bool resident,
                            DeviceSpan<float> contributions, Staging& s) {
    const Fp4Activations fp4 = set.fp4_activations;
    if (fp4 == Fp4Activations::kNone || !block_scaled_) return false;
    const int64_t num_entries = layout.num_entries(), width = set.intermediate_size, dim = hidden_size;
    struct ExpertScales {
      const uint8_t *gate, *up, *down;
    };
    std::vector<ExpertScales> scales;
    for (const int32_t id : layout.experts) {
      const DeviceExpert& e = table[static_cast<size_t>(id)];
      scales.push_back({tiled_weight_scales(fp4, e.gate, resident, s), tiled_weight_scales(fp4, e.up, resident, s),
                        tiled_weight_scales(fp4, e.down, resident, s)});
      if (scales.back().gate == nullptr || scales.back().up == nullptr || scales.back().down == nullptr) return false;
    }
    // Grouped order: position j holds entry expert_entry_idx[j], reading row entry_row of x.
    std::vector<int64_t> source_rows(static_cast<size_t>(num_entries));
    for (int64_t j = 0; j < num_entries; ++j) {
      source_rows[static_cast<size_t>(j)] = layout.entry_row[static_cast<size_t>(layout.expert_entry_idx[static_cast<size_t>(j)])];
    }
    float* rows = s.temporary_array<float>(num_entries * dim);
    check(MOERT_CUDA_NS::gather_rows(s.in(x.data(), static_cast<int64_t>(x.size())), dim, s.in(source_rows, num_entries),
                      num_entries, rows, stream()),
          "gather_rows");
    float* gate = s.temporary_array<float>(num_entries * width);
    float* up = s.temporary_array<float>(num_entries * width);
    float* down = s.temporary_array<float>(num_entries * dim);
    for (size_t a = 0; a < layout.experts.size(); ++a) {
      const DeviceExpert& e = table[static_cast<size_t>(layout.experts[a])];
      const int64_t first = layout.cu_expert_entries[a], n = layout.cu_expert_entries[a + 1] - first;
      if (!block_scaled_product(fp4, e.gate, scales[a].gate, e.gate_bias, rows + first * dim, n, gate + first * width, s) ||
          !block_scaled_product(fp4, e.up, scales[a].up, e.up_bias, rows + first * dim, n, up + first * width, s)) {
        return false;
      }
    }
    check(glu(gate, up, num_entries * width, set.activation, stream()), "glu");
    for (size_t a = 0; a < layout.experts.size(); ++a) {
      const DeviceExpert& e = table[static_cast<size_t>(layout.experts[a])];
      const int64_t first = layout.cu_expert_entries[a], n = layout.cu_expert_entries[a + 1] - first;
      if (!block_scaled_product(fp4, e.down, scales[a].down, e.down_bias, gate + first * width, n, down + first * dim, s)) {
        return false;
      }
    }
    s.finish(scatter_weighted_rows(down, dim, s.in(layout.expert_entry_idx, num_entries), num_entries,
                                   s.in(layout.entry_weight, num_entries),
                                   s.out(contributions.data(), num_entries * dim), stream()),
             "scatter_weighted_rows");
    return true;
  }

  // W's block scales in the tiles block_scaled_gemm reads: made once for a resident weight
  // (kept by its device scales), for this call in `s` otherwise. Null inside a capture when
  // not made yet (the capture fails; the batch size runs eagerly).
  const uint8_t* tiled_weight_scales(Fp4Activations fp4, const DeviceWeight& w, bool resident, Staging& s) {
    if (resident) {
      if (auto found = tiled_weight_scales_.find(w.scales); found != tiled_weight_scales_.end()) {
        return found->second.data<uint8_t>();
      }
    }
    if (capturing()) {
      capture_fails("an FP4 weight's block scales are tiled at its first block-scaled use");
      return nullptr;
    }
    const int64_t scale_cols = w.cols / fp4_activation_block(fp4);
    const int64_t bytes = quant::scale_tiles_bytes(w.rows, scale_cols);
    uint8_t* tiled = nullptr;
    if (resident) {
      Buffer buffer = allocate(DType::kU8, {bytes});
      tiled = buffer.data<uint8_t>();
      tiled_weight_scales_.emplace(w.scales, std::move(buffer));
    } else {
      tiled = s.temporary_array<uint8_t>(bytes);
    }
    check(tile_block_scales(w.scales, w.rows, scale_cols, tiled, stream()), "tile_block_scales");
    return tiled;
  }

  // x [R, K] (device memory) as a product with an FP4 weight reads it: rounded into scratch of
  // `s` under `--fp4-activations fp4`, else x itself.
  const float* rounded_activations(Fp4Activations format, const float* x, int64_t num_rows, int64_t cols, Staging& s) {
    if (format == Fp4Activations::kNone) return x;
    float* rounded = s.temporary_array<float>(num_rows * cols);
    check(round_fp4_activations(format, x, num_rows, cols, rounded, stream()), "round_fp4_activations");
    return rounded;
  }

  // The cos / sin tables of a step serve every layer: kept on the device while the rotation
  // (its shape and its factors at position 1, which tell its frequencies and attention factor)
  // and the positions stay the same. Positions in device memory (a step graph's) index the
  // table of every position made by prepare_device_positions.
  void rope(const attention::RotaryEmbedding& rope, DevicePtr<float> heads, int64_t num_tokens, int num_heads,
            DevicePtr<const int64_t> positions_on) override {
    if (num_tokens == 0) return;
    const bool device_positions = !positions_on.on_host();
    const int64_t* positions = positions_on.on(device_positions ? device() : Device{}, "rope positions");
    RopeTables* found = device_positions ? position_table(rope) : &rope_tables_;
    MOERT_CHECK(found != nullptr, "rope with positions in device memory needs prepare_device_positions for this rotation");
    RopeTables& tables = *found;
    if (!device_positions && (!tables.same_rotation(rope) || !std::equal(positions, positions + num_tokens,
                                                                         tables.positions.begin(), tables.positions.end()))) {
      tables = make_rope_tables(rope, std::vector<int64_t>(positions, positions + num_tokens));
    }
    Staging s(weights_, device());
    s.finish(MOERT_CUDA_NS::rope(s.inout(heads, num_tokens * num_heads * rope.head_dim()), num_tokens, num_heads,
                                 rope.head_dim(), rope.rotary_dim(), rope.first_channel(),
                                 rope.pairing() == attention::RopePairing::kInterleaved, tables.cos.data<float>(),
                                 tables.sin.data<float>(), device_positions ? positions : nullptr, stream()),
             "rope");
  }

  // A table is kept while the backend lives: recorded graphs read it (a draft model with
  // another rotation adds its own).
  void prepare_device_positions(const attention::RotaryEmbedding& rope, int64_t max_positions) override {
    if (const RopeTables* table = position_table(rope);
        table != nullptr && static_cast<int64_t>(table->positions.size()) >= max_positions) {
      return;
    }
    std::vector<int64_t> every_position(static_cast<size_t>(max_positions));
    for (int64_t p = 0; p < max_positions; ++p) every_position[static_cast<size_t>(p)] = p;
    position_tables_.push_back(make_rope_tables(rope, std::move(every_position)));
  }

  void write_kv(const attention::PagedKvLayer& layer, DevicePtr<const float> k, DevicePtr<const float> v,
                DevicePtr<const int64_t> slots, int64_t num_tokens) override {
    check_device(device(), layer.device, "write_kv cache");
    Staging s(weights_, device());
    const int64_t width = static_cast<int64_t>(layer.num_kv_heads) * layer.head_dim;
    s.finish(MOERT_CUDA_NS::write_kv(layer, s.in(k, num_tokens * width), s.in(v, num_tokens * width),
                                     s.in(slots, num_tokens), num_tokens, stream()),
             "write_kv");
  }

  void paged_attention(DevicePtr<const float> q, const attention::PagedKvLayer& layer,
                       const attention::PagedAttentionPlan& plan, int num_heads, DevicePtr<float> out) override {
    const int num_seqs = plan.num_seqs;
    if (num_seqs == 0) return;
    check_device(device(), layer.device, "paged_attention cache");
    // The plan is host data (the scheduler's), whose sizes are read here, or a step graph's
    // device arrays with the row count beside them.
    const bool on_device = !(plan.device == Device{});
    if (on_device) check_device(device(), plan.device, "paged_attention plan");
    const int64_t num_rows = on_device ? plan.num_rows_when_on_device : plan.qo_indptr[num_seqs];
    const int64_t num_pages = on_device ? 0 : plan.kv_page_indptr[num_seqs];
    if (num_rows == 0) return;
    Staging s(weights_, device());
    attention::PagedAttentionPlan device_plan = plan;
    device_plan.qo_indptr = s.in(DevicePtr<const int32_t>(plan.qo_indptr, plan.device), num_seqs + 1);
    device_plan.kv_page_indptr = s.in(DevicePtr<const int32_t>(plan.kv_page_indptr, plan.device), num_seqs + 1);
    device_plan.kv_page_indices = s.in(DevicePtr<const int32_t>(plan.kv_page_indices, plan.device), num_pages);
    device_plan.kv_last_page_len = s.in(DevicePtr<const int32_t>(plan.kv_last_page_len, plan.device), num_seqs);
    device_plan.device = device();
    device_plan.variant.sinks = s.weight(plan.variant.sinks, num_heads);
    const int64_t width = static_cast<int64_t>(num_heads) * layer.head_dim;
    s.finish(MOERT_CUDA_NS::paged_attention(s.in(q, num_rows * width), layer, device_plan, num_rows, num_heads,
                                            s.out(out, num_rows * width), stream()),
             "paged_attention");
  }

  void contiguous_attention(DevicePtr<const float> q, int64_t num_tokens, DevicePtr<const float> keys,
                            DevicePtr<const float> values, int64_t first_position, int num_heads, int num_kv_heads,
                            int head_dim, const attention::AttentionVariant& variant, DevicePtr<float> out) override {
    if (num_tokens == 0) return;
    Staging s(weights_, device());
    const int64_t width = static_cast<int64_t>(num_heads) * head_dim;
    const int64_t history = (first_position + num_tokens) * num_kv_heads * head_dim;
    attention::AttentionVariant device_variant = variant;
    device_variant.sinks = s.weight(variant.sinks, num_heads);
    s.finish(MOERT_CUDA_NS::contiguous_attention(s.in(q, num_tokens * width), num_tokens, s.in(keys, history),
                                                 s.in(values, history), first_position, num_heads, num_kv_heads,
                                                 head_dim, device_variant, s.out(out, num_tokens * width), stream()),
             "contiguous_attention");
  }

  // The sequences' table and snapshot copies go to the device with the call; the states
  // are device memory the caller allocated here (docs/gated-deltanet.md).
  void gated_delta_net(const attention::GatedDeltaShape& shape, const attention::GatedDeltaParams& params,
                       DevicePtr<const float> u, DevicePtr<const float> z, DevicePtr<const float> a,
                       DevicePtr<const float> b, std::span<const RecurrentSequence> sequences,
                       DevicePtr<float> out) override {
    if (sequences.empty()) return;
    Staging s(weights_, device());
    std::vector<GatedDeltaSequence> table;
    std::vector<attention::StateCopy> copies;
    int64_t rows = 0;
    for (const RecurrentSequence& seq : sequences) {
      table.push_back({seq.first_row, seq.num_rows, seq.conv_state.on(device(), "conv_state"),
                       seq.recurrent_state.on(device(), "recurrent_state"),
                       seq.conv_states_after.on(device(), "conv_states_after"),
                       seq.recurrent_states_after.on(device(), "recurrent_states_after"), static_cast<int64_t>(copies.size()),
                       static_cast<int64_t>(seq.copies_after.size())});
      copies.insert(copies.end(), seq.copies_after.begin(), seq.copies_after.end());
      rows = std::max(rows, seq.first_row + seq.num_rows);
    }
    const int64_t channels = shape.conv_channels(), nv = shape.num_value_heads, width = nv * shape.value_head_dim;
    attention::GatedDeltaParams device = params;
    device.conv_weight = s.weight(params.conv_weight, channels * shape.conv_width);
    device.a_log = s.weight(params.a_log, nv);
    device.dt_bias = s.weight(params.dt_bias, nv);
    device.norm_weight = s.weight(params.norm_weight, shape.value_head_dim);
    float* conv_rows = s.temporary_array<float>(std::max<int64_t>(rows * channels, 1));
    s.finish(MOERT_CUDA_NS::gated_delta_net(shape, device, s.in(u, rows * channels), s.in(z, rows * width),
                                            s.in(a, rows * nv), s.in(b, rows * nv), s.in(table, static_cast<int64_t>(table.size())),
                                            static_cast<int64_t>(table.size()),
                                            s.in(copies, static_cast<int64_t>(copies.size())), rows, conv_rows,
                                            s.inout(out, rows * width), stream()),
             "gated_delta_net");
  }

  void sigmoid_mul(DevicePtr<float> x, DevicePtr<const float> gate, int64_t count) override {
    Staging s(weights_, device());
    s.finish(MOERT_CUDA_NS::sigmoid_mul(s.inout(x, count), s.in(gate, count), count, stream()), "sigmoid_mul");
  }

  void copy_kv_blocks(const attention::PagedKvLayer& layer, const int32_t* src, const int32_t* dst,
                      int64_t num_copies) override {
    if (num_copies == 0) return;
    check_device(device(), layer.device, "copy_kv_blocks cache");
    Staging s(weights_, device());
    s.finish(MOERT_CUDA_NS::copy_kv_blocks(layer, s.in(host_ptr(src), num_copies), s.in(host_ptr(dst), num_copies),
                                           num_copies, stream()),
             "copy_kv_blocks");
  }

  void swiglu_ffn(DevicePtr<const float> x, int64_t num_rows, const quant::LinearWeight& gate,
                  const quant::LinearWeight& up, const quant::LinearWeight& down, DevicePtr<float> out) override {
    if (num_rows == 0) return;
    const int64_t width = gate.out_features();
    Buffer gate_out = allocate(DType::kF32, {num_rows, width});
    Buffer up_out = allocate(DType::kF32, {num_rows, width});
    linear(gate, x, num_rows, nullptr, gate_out.ptr<float>());
    linear(up, x, num_rows, nullptr, up_out.ptr<float>());
    check(glu(gate_out.data<float>(), up_out.data<float>(), num_rows * width, experts::GluActivation{}, stream()), "glu");
    linear(down, gate_out.ptr<float>(), num_rows, nullptr, out);
  }

  void grouped_expert_ffn(const experts::ExpertDispatchLayout& layout, DeviceSpan<const float> x, int hidden_size,
                          const std::function<ExpertWeights(int expert)>& expert_weights,
                          DeviceSpan<float> contributions) override {
    const int64_t num_entries = layout.num_entries();
    if (num_entries == 0) return;
    Staging s(weights_, device());
    // The expert table, indexed by expert id, holds the experts with work (others stay empty).
    const int32_t max_expert = layout.experts.empty() ? 0 : layout.experts.back();
    std::vector<DeviceExpert> table(static_cast<size_t>(max_expert) + 1);
    const ExpertSet set = fill_device_experts(layout.experts, expert_weights, s, table);
    if (block_scaled_experts(layout, x, hidden_size, set, table, s.all_weights_resident(), contributions, s)) return;
    int64_t max_entries = 0;
    for (size_t a = 0; a < layout.experts.size(); ++a) {
      max_entries = std::max(max_entries, layout.cu_expert_entries[a + 1] - layout.cu_expert_entries[a]);
    }
    GroupedExpertArgs args;
    args.x = rounded_activations(set.fp4_activations, s.in(x.data(), static_cast<int64_t>(x.size())),
                                 static_cast<int64_t>(x.size()) / hidden_size, hidden_size, s);
    args.hidden_size = hidden_size;
    args.intermediate_size = set.intermediate_size;
    args.fp4_activations = set.fp4_activations;
    args.num_entries = num_entries;
    args.entry_row = s.in(layout.entry_row, num_entries);
    args.entry_weight = s.in(layout.entry_weight, num_entries);
    args.num_active = static_cast<int32_t>(layout.experts.size());
    args.active_experts = s.in(layout.experts, args.num_active);
    args.cu_expert_entries = s.in(layout.cu_expert_entries, args.num_active + 1);
    args.expert_entry_idx = s.in(layout.expert_entry_idx, num_entries);
    args.experts = s.in(table, static_cast<int64_t>(table.size()));
    args.activation = set.activation;
    args.tensor_core_weights = set.tensor_core_weights;
    args.workspace =
        s.temporary_array<float>(grouped_expert_workspace_floats(num_entries, hidden_size, set.intermediate_size));
    args.contributions = s.out(contributions.data(), num_entries * hidden_size);
    s.finish(MOERT_CUDA_NS::grouped_expert_ffn(args, max_entries, stream()), "grouped_expert_ffn");
  }

  // The router of experts/cuda/router.h and the device planning of routed_experts: their
  // bounds, so that callers pick the host's path beyond them (backend::route_on,
  // backend::routed_experts_on).
  Capabilities capabilities() const override {
    return {kMaxRouterExperts, kMaxRouterGroups, kDeviceLayoutMaxTokens, kMaxDeviceLayoutEntries};
  }

  // On the device (experts/cuda/router.h), within capabilities().
  void route(const experts::RouterConfig& config, DevicePtr<const float> logits, int64_t num_tokens,
             const float* selection_bias, DevicePtr<int32_t> expert_ids, DevicePtr<float> weights) override {
    if (num_tokens == 0) return;
    const Status valid = experts::validate_router_config(config);
    MOERT_CHECK(valid.is_ok(), "route with an invalid RouterConfig: " << valid.message());
    MOERT_CHECK(config.num_experts <= kMaxRouterExperts && config.n_group <= kMaxRouterGroups,
                "route of " << config.num_experts << " experts in " << config.n_group
                            << " groups: beyond this backend's capabilities (backend::route_on routes on the host)");
    const int64_t count = num_tokens * config.top_k;
    const DeviceRouterConfig device_config{config.num_experts,      config.top_k,
                                           config.score_func == experts::ScoreFunc::kSigmoid,
                                           config.norm_topk_prob,   config.routed_scaling_factor,
                                           config.n_group,          config.topk_group};
    Staging s(weights_, device());
    s.finish(MOERT_CUDA_NS::route_tokens(device_config, s.in(logits, num_tokens * config.num_experts), num_tokens,
                                         s.weight(selection_bias, config.num_experts), s.out(expert_ids, count),
                                         s.out(weights, count), stream()),
             "route");
  }

  // Routing in device memory, within capabilities() (at most kDeviceLayoutMaxTokens tokens):
  // the layout is planned on the device (plan_routed_layout), so the MoE layer never waits for
  // the host. Every group then has at most that many rows, so the grouped FFN runs the warp
  // kernel, as the host-planned path does for the same groups: the same bits. Routing in host
  // memory (the ids are already there) is planned on the host.
  void routed_experts(DevicePtr<const float> h, int64_t num_tokens, int hidden_size,
                      DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights, int top_k, int num_experts,
                      const std::function<ExpertWeights(int expert)>& expert_weights, DevicePtr<float> out) override {
    const int64_t num_entries = num_tokens * top_k;
    if (num_tokens == 0) return;
    MOERT_CHECK(num_tokens <= kDeviceLayoutMaxTokens && num_entries <= kMaxDeviceLayoutEntries,
                "routed_experts of " << num_tokens << " tokens x " << top_k << ": beyond this backend's device "
                                     << "planning (backend::routed_experts_on plans on the host)");
    if (expert_ids.on_host() || weights.on_host()) {
      routed_experts_planned_on_host(h, num_tokens, hidden_size, expert_ids, weights, top_k, num_experts,
                                     expert_weights, out);
      return;
    }
    Staging s(weights_, device());
    const ExpertTable& table = expert_table(expert_weights, num_experts, s);
    const int64_t num_groups = std::min<int64_t>(num_entries, num_experts);
    DeviceLayoutArrays layout;
    layout.expert_entry_idx = s.temporary_array<int64_t>(num_entries);
    layout.active_experts = s.temporary_array<int32_t>(num_groups);
    layout.cu_expert_entries = s.temporary_array<int64_t>(num_groups + 1);
    layout.entry_row = s.temporary_array<int64_t>(num_entries);
    layout.src_rows = s.temporary_array<int64_t>(num_entries);
    check(plan_routed_layout(expert_ids.on(device(), "routed_experts expert_ids"), num_tokens, top_k, num_experts, layout, stream()), "plan_routed_layout");
    GroupedExpertArgs args;
    args.x = rounded_activations(table.set.fp4_activations, s.in(h, num_tokens * hidden_size), num_tokens, hidden_size, s);
    args.hidden_size = hidden_size;
    args.intermediate_size = table.set.intermediate_size;
    args.fp4_activations = table.set.fp4_activations;
    args.num_entries = num_entries;
    args.entry_row = layout.entry_row;
    args.entry_weight = weights.on(device(), "routed_experts weights");
    args.num_active = static_cast<int32_t>(num_groups);  // empty slots past the experts with work
    args.active_experts = layout.active_experts;
    args.cu_expert_entries = layout.cu_expert_entries;
    args.expert_entry_idx = layout.expert_entry_idx;
    args.experts = table.experts;
    args.activation = table.set.activation;
    args.tensor_core_weights = table.set.tensor_core_weights;
    args.workspace =
        s.temporary_array<float>(grouped_expert_workspace_floats(num_entries, hidden_size, table.set.intermediate_size));
    float* contributions = s.temporary_array<float>(num_entries * hidden_size);
    args.contributions = contributions;
    check(MOERT_CUDA_NS::grouped_expert_ffn(args, num_tokens, stream()), "grouped_expert_ffn");
    s.finish(MOERT_CUDA_NS::combine_rows(layout.src_rows, num_tokens, top_k, contributions, hidden_size,
                                         s.out(out, num_tokens * hidden_size), stream()),
             "combine_rows");
  }

  void count_experts(DevicePtr<const int32_t> expert_ids, int64_t num_entries, int num_experts,
                     DevicePtr<int64_t> counts) override {
    if (num_entries == 0) return;
    Staging s(weights_, device());
    s.finish(count_expert_ids(s.in(expert_ids, num_entries), num_entries, num_experts, s.inout(counts, num_experts),
                              stream()),
             "count_experts");
  }

  Result<std::unique_ptr<StepGraph>> capture(const std::function<void()>& record) override {
    return capture_step_graph(record);
  }

  void combine_rows(std::span<const int64_t> src_rows, int top_k, DeviceSpan<const float> rows, int hidden_size,
                    DeviceSpan<float> out) override {
    const auto num_tokens = static_cast<int64_t>(src_rows.size()) / top_k;
    if (num_tokens == 0) return;
    Staging s(weights_, device());
    s.finish(MOERT_CUDA_NS::combine_rows(s.in(host_ptr(src_rows.data()), static_cast<int64_t>(src_rows.size())), num_tokens,
                                         top_k, s.in(rows.data(), static_cast<int64_t>(rows.size())), hidden_size,
                                         s.out(out.data(), num_tokens * hidden_size), stream()),
             "combine_rows");
  }

  void add(DevicePtr<float> x, DevicePtr<const float> y, int64_t count) override {
    Staging s(weights_, device());
    s.finish(MOERT_CUDA_NS::add(s.inout(x, count), s.in(y, count), count, stream()), "add");
  }

  void gated_add(DevicePtr<float> x, DevicePtr<const float> y, DevicePtr<const float> gate_logits, int64_t num_rows,
                 int64_t dim) override {
    Staging s(weights_, device());
    s.finish(MOERT_CUDA_NS::gated_add(s.inout(x, num_rows * dim), s.in(y, num_rows * dim), s.in(gate_logits, num_rows),
                                      num_rows, dim, stream()),
             "gated_add");
  }

  // Each side is this device's memory or host memory (checked).
  void copy_bytes(DevicePtr<void> dst, DevicePtr<const void> src, int64_t bytes) override {
    if (bytes <= 0) return;
    if (!dst.on_host()) check_device(device(), dst.device(), "copy_bytes dst");
    if (!src.on_host()) check_device(device(), src.device(), "copy_bytes src");
    const bool device_only = !dst.on_host() && !src.on_host();
    if (capturing() && !device_only) return capture_fails("a copy has a host side");
    MOERT_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), static_cast<size_t>(bytes), cudaMemcpyDefault, stream()));
    if (!device_only) MOERT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }

  void synchronize() override {
    if (capturing()) return capture_fails("an op synchronises");
    MOERT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }

  void copy_rows(DevicePtr<float> dst, int64_t dst_stride, DevicePtr<const float> src, int64_t src_stride,
                 int64_t num_rows, int64_t width) override {
    if (num_rows == 0 || width == 0) return;
    Staging s(weights_, device());
    s.finish(MOERT_CUDA_NS::copy_rows(s.inout(dst, (num_rows - 1) * dst_stride + width), dst_stride,
                                      s.in(src, (num_rows - 1) * src_stride + width), src_stride, num_rows, width,
                                      stream()),
             "copy_rows");
  }

  void per_head_linear(const float* weights, int num_heads, int64_t out_features, int64_t in_features,
                       DevicePtr<const float> x, int64_t x_head_stride, int64_t num_tokens, DevicePtr<float> y,
                       int64_t y_head_stride) override {
    if (num_tokens == 0) return;
    Staging s(weights_, device());
    const int64_t heads = num_tokens * num_heads;
    s.finish(MOERT_CUDA_NS::per_head_linear(s.weight(weights, num_heads * out_features * in_features), num_heads,
                                            out_features, in_features, s.in(x, (heads - 1) * x_head_stride + in_features),
                                            x_head_stride, num_tokens,
                                            s.inout(y, (heads - 1) * y_head_stride + out_features), y_head_stride,
                                            stream()),
             "per_head_linear");
  }

  void gather_rows(DevicePtr<const float> src, int64_t dim, const int64_t* rows, int64_t num_rows,
                   DevicePtr<float> dst) override {
    if (num_rows == 0) return;
    Staging s(weights_, device());
    const int64_t src_rows = *std::max_element(rows, rows + num_rows) + 1;  // rows is host data
    s.finish(MOERT_CUDA_NS::gather_rows(s.in(src, src_rows * dim), dim, s.in(host_ptr(rows), num_rows), num_rows,
                                        s.out(dst, num_rows * dim), stream()),
             "gather_rows");
  }

  void argmax_rows(DevicePtr<const float> logits, int64_t num_rows, int64_t vocab, DevicePtr<int32_t> out) override {
    if (num_rows == 0) return;
    Staging s(weights_, device());
    s.finish(MOERT_CUDA_NS::argmax_rows(s.in(logits, num_rows * vocab), num_rows, vocab, s.out(out, num_rows), stream()),
             "argmax_rows");
  }

  void sample_rows(DevicePtr<const float> logits, int64_t vocab, std::span<const RowSampling> rows,
                   int32_t* out) override {
    const auto num_rows = static_cast<int64_t>(rows.size());
    if (num_rows == 0) return;
    std::vector<SampleRowParams> params(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      params[r] = {rows[r].temperature, rows[r].top_k, rows[r].top_p, rows[r].uniform};
    }
    Staging s(weights_, device());
    double* workspace = s.temporary_array<double>(num_rows * vocab);
    s.finish(MOERT_CUDA_NS::sample_rows(s.in(logits, num_rows * vocab), num_rows, vocab, s.in(params, num_rows),
                                        workspace, s.out(host_ptr(out), num_rows), stream()),
             "sample_rows");
  }

 private:
  static cudaStream_t stream() { return process_stream(); }
  static void check(int status, const char* op) {
    MOERT_CHECK(status == 0, "CUDA op " << op << ": " << cudaGetErrorString(static_cast<cudaError_t>(status)));
  }

  struct RopeTables {
    int head_dim = 0, rotary_dim = 0, first_channel = 0;
    attention::RopePairing pairing = attention::RopePairing::kRotateHalf;
    std::vector<float> probe_cos, probe_sin;  // the factors at position 1
    std::vector<int64_t> positions;           // of the rows
    Buffer cos, sin;  // [rows, rotary_dim / 2] on the device

    bool same_rotation(const attention::RotaryEmbedding& rope) const {
      if (head_dim != rope.head_dim() || rotary_dim != rope.rotary_dim() || first_channel != rope.first_channel() ||
          pairing != rope.pairing()) {
        return false;
      }
      std::vector<float> cos_1(static_cast<size_t>(rotary_dim / 2)), sin_1(cos_1.size());
      rope.cos_sin(1, cos_1.data(), sin_1.data());
      return cos_1 == probe_cos && sin_1 == probe_sin;
    }
  };
  // The rows of `positions`, computed on the host (RotaryEmbedding::cos_sin) and uploaded.
  RopeTables make_rope_tables(const attention::RotaryEmbedding& rope, std::vector<int64_t> positions) {
    const int half = rope.rotary_dim() / 2;
    const auto rows = static_cast<int64_t>(positions.size());
    std::vector<float> probe_cos(static_cast<size_t>(half)), probe_sin(probe_cos.size());
    rope.cos_sin(1, probe_cos.data(), probe_sin.data());
    std::vector<float> cos(static_cast<size_t>(rows * half)), sin(cos.size());
    for (int64_t r = 0; r < rows; ++r) {
      rope.cos_sin(positions[static_cast<size_t>(r)], cos.data() + r * half, sin.data() + r * half);
    }
    RopeTables tables{rope.head_dim(), rope.rotary_dim(), rope.first_channel(), rope.pairing(),
                      std::move(probe_cos), std::move(probe_sin), std::move(positions),
                      allocate(DType::kF32, {rows, half}), allocate(DType::kF32, {rows, half})};
    copy(tables.cos.ptr<float>(), cos, rows * half);
    copy(tables.sin.ptr<float>(), sin, rows * half);
    return tables;
  }

  // Every routed expert of one MoE layer as the kernels read them, resident on the device:
  // made once per layer (the experts' weights are placed, so their copies stay).
  struct ExpertTable {
    Buffer storage;                   // DeviceExpert [E]
    const DeviceExpert* experts = nullptr;
    ExpertSet set;
  };
  // The layer is told by its first expert's gate weight (the model's weights outlive the
  // backend's use of them). A table with a weight that is not placed (prepare_weights) lives
  // in `s` for this call only.
  const ExpertTable& expert_table(const std::function<ExpertWeights(int expert)>& expert_weights, int num_experts,
                                  Staging& s) {
    const ExpertWeights first = expert_weights(0);
    const std::pair<const void*, int> key{first.gate, num_experts};
    if (auto cached = expert_tables_.find(key); cached != expert_tables_.end()) return cached->second;
    std::vector<DeviceExpert> host(static_cast<size_t>(num_experts));
    std::vector<int32_t> every_expert(static_cast<size_t>(num_experts));
    for (int e = 0; e < num_experts; ++e) every_expert[static_cast<size_t>(e)] = e;
    ExpertTable table;
    table.set = fill_device_experts(every_expert, expert_weights, s, host);
    const auto bytes = static_cast<int64_t>(host.size() * sizeof(DeviceExpert));
    if (!s.all_weights_resident()) {
      call_table_ = std::move(table);
      call_table_.experts = s.in(host, num_experts);
      return call_table_;
    }
    table.storage = allocate(DType::kU8, {bytes});
    copy_bytes(table.storage.ptr<void>(), host, bytes);
    table.experts = reinterpret_cast<const DeviceExpert*>(table.storage.data<uint8_t>());
    return expert_tables_.emplace(key, std::move(table)).first->second;
  }

  int device_index_;
  ResidentWeights weights_;
  bool block_scaled_ = false;      // the device has block-scaled FP4 tensor cores
  Buffer block_scaled_workspace_;  // then: block_scaled_gemm's scratch
  std::map<const void*, Buffer> tiled_weight_scales_;  // by the resident weight scales
  bool warned_block_scaled_unsupported_ = false;
  std::map<std::pair<const void*, int>, ExpertTable> expert_tables_;
  ExpertTable call_table_;  // the last table that could not be kept
  // The latest table of every position made for `rope`'s rotation, or null.
  RopeTables* position_table(const attention::RotaryEmbedding& rope) {
    for (auto it = position_tables_.rbegin(); it != position_tables_.rend(); ++it) {
      if (it->same_rotation(rope)) return &*it;
    }
    return nullptr;
  }

  RopeTables rope_tables_;                    // this step's positions
  std::deque<RopeTables> position_tables_;    // every position (prepare_device_positions)
};

}  // namespace

int visible_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

namespace {

// /dev/nvidia0, /dev/nvidia1, ...: the GPUs of this machine or container, counted without CUDA.
int nvidia_device_nodes() {
  std::error_code error;
  int nodes = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.compare(0, 6, "nvidia") == 0 &&
        std::all_of(name.begin() + 6, name.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
      ++nodes;
    }
  }
  return nodes;
}

}  // namespace

Result<int> probe_visible_devices() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess) return count;
  cudaGetLastError();
  if (status == cudaErrorNoDevice) return 0;
  const int nodes = nvidia_device_nodes();
  if (nodes == 0) return 0;
  return internal_error("CUDA failed to start with " + std::to_string(nodes) +
                        " /dev/nvidiaN node(s) present: cudaGetDeviceCount returned " +
                        std::to_string(static_cast<int>(status)) + " (" + cudaGetErrorString(status) + ")");
}

Result<std::unique_ptr<backend::Backend>> make_cuda_backend(int device_index) {
  const int count = visible_device_count();
  if (count == 0) {
    return unsupported("--device cuda: no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them)");
  }
  const int device = device_index % count;
  if (const cudaError_t status = cudaSetDevice(device); status != cudaSuccess) {
    return unsupported("--device cuda: cannot use GPU " + std::to_string(device) + ": " + cudaGetErrorString(status));
  }
#if !defined(MOERT_CUDA_EMULATION)
  // Keep freed pool memory for reuse instead of returning it at every synchronisation.
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
    uint64_t keep_all = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all);
  }
#endif
  return std::unique_ptr<backend::Backend>(new CudaBackend(device));
}

}  // namespace moert::MOERT_CUDA_NS
