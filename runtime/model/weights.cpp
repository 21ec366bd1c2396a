#include "runtime/model/weights.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "quant/bf16.h"
#include "runtime/model/weight_regions.h"

namespace moert {

Result<std::vector<float>> widen_to_f32(const std::string& name, const TensorView& view) {
  std::vector<float> out(static_cast<size_t>(view.numel()));
  if (!quant::widen_into_f32(view, out.data())) {
    return unsupported("tensor '" + name + "' has dtype " + std::string(dtype_name(view.dtype)) +
                       " (expected F32, BF16 or F16)");
  }
  return out;
}

namespace {

class WeightBinder {
 public:
  WeightBinder(const io::Checkpoint& checkpoint) : checkpoint_(checkpoint) {}

  Result<TensorView> matrix(const std::string& name, int64_t rows, int64_t cols) const {
    MOERT_ASSIGN_OR_RETURN(TensorView view, checked(name, {rows, cols}));
    if (view.dtype != DType::kF32 && view.dtype != DType::kBF16 && view.dtype != DType::kF16) {
      return unsupported("tensor '" + name + "' has dtype " + std::string(dtype_name(view.dtype)) +
                         " (expected F32, BF16 or F16)");
    }
    return view;
  }

  Result<std::vector<float>> vector(const std::string& name, int64_t size) const {
    MOERT_ASSIGN_OR_RETURN(TensorView view, checked(name, {size}));
    return widen_to_f32(name, view);
  }

  // A norm module's scale: its ".weight" [size] widened to F32, as 1 + w when `plus_one`
  // (ModelConfig::norm_weights_offset_by_one: the F32 sum the modeling code computes).
  Result<std::vector<float>> norm(const std::string& module, int64_t size, bool plus_one) const {
    MOERT_ASSIGN_OR_RETURN(std::vector<float> scale, vector(module + ".weight", size));
    if (plus_one) {
      for (float& value : scale) value = 1.0f + value;
    }
    return scale;
  }

  // A linear layer's weight in whichever layout the checkpoint holds it (detected from the
  // tensors present): gpt-oss MXFP4 `P_blocks`/`P_scales`; ModelOpt NVFP4 (U8 weight +
  // F8_E4M3 weight_scale + weight_scale_2); DeepSeek FP8 (weight_scale_inv); FP8 with a
  // per-tensor weight_scale; else a dense matrix.
  Result<quant::LinearWeight> linear_weight(const std::string& prefix, int64_t out, int64_t in) const {
    quant::QuantizedWeightView q;
    q.rows = out;
    q.cols = in;
    const std::string w_name = prefix + ".weight";
    if (checkpoint_.find(prefix + ".weight_packed") != nullptr) {  // Kimi-K2.5's INT4 experts (docs/mla.md, Kimi-K2.5)
      return unsupported("'" + prefix + ".weight_packed': compressed-tensors pack-quantized INT4 weights are not "
                         "supported yet (BF16, FP8, NVFP4 and MXFP4 are)");
    }
    if (checkpoint_.find(prefix + "_blocks") != nullptr) {
      q.format = quant::WeightFormat::kMxfp4;
      if (in % 32 != 0) return invalid_argument("'" + prefix + "_blocks': K = " + std::to_string(in) + " is not a multiple of 32");
      MOERT_ASSIGN_OR_RETURN(TensorView blocks, typed(prefix + "_blocks", DType::kU8, {out, in / 32, 16}));
      MOERT_ASSIGN_OR_RETURN(TensorView scales, typed(prefix + "_scales", DType::kU8, {out, in / 32}));
      q.data = blocks.as<const uint8_t>();
      q.scales = scales.as<const uint8_t>();
    } else {
      MOERT_ASSIGN_OR_RETURN(TensorView weight, checkpoint_.get(w_name));
      if (weight.dtype == DType::kU8) {
        q.format = quant::WeightFormat::kNvfp4;
        if (in % 16 != 0) return invalid_argument("'" + w_name + "': K = " + std::to_string(in) + " is not a multiple of 16");
        MOERT_ASSIGN_OR_RETURN(TensorView packed, typed(w_name, DType::kU8, {out, in / 2}));
        MOERT_ASSIGN_OR_RETURN(TensorView scales, typed(prefix + ".weight_scale", DType::kF8E4M3, {out, in / 16}));
        MOERT_ASSIGN_OR_RETURN(q.global_scale, scalar(prefix + ".weight_scale_2"));
        q.data = packed.as<const uint8_t>();
        q.scales = scales.as<const uint8_t>();
      } else if (weight.dtype == DType::kF8E4M3) {
        MOERT_ASSIGN_OR_RETURN(TensorView data, typed(w_name, DType::kF8E4M3, {out, in}));
        q.data = data.as<const uint8_t>();
        if (checkpoint_.find(prefix + ".weight_scale_inv") != nullptr) {
          q.format = quant::WeightFormat::kFp8Block;
          MOERT_ASSIGN_OR_RETURN(TensorView scale_inv, typed(prefix + ".weight_scale_inv", DType::kF32,
                                                             {(out + 127) / 128, (in + 127) / 128}));
          q.block_scale_inv = scale_inv.as<const float>();
        } else {
          q.format = quant::WeightFormat::kFp8Tensor;
          MOERT_ASSIGN_OR_RETURN(q.global_scale, scalar(prefix + ".weight_scale"));
        }
      } else {
        MOERT_ASSIGN_OR_RETURN(TensorView dense, matrix(w_name, out, in));
        return quant::LinearWeight::from_dense(dense);
      }
    }
    MOERT_RETURN_IF_ERROR(quant::validate_quantized_weight(q).with_context("'" + prefix + "'"));
    const char* scale_name = q.format == quant::WeightFormat::kFp8Block ? ".weight_scale_inv" : ".weight_scale";
    MOERT_RETURN_IF_ERROR(quant::check_zero_block_scales(q).with_context("tensor '" + prefix + scale_name + "'"));
    return quant::LinearWeight::from_packed(q);
  }

  Result<Linear> linear(const std::string& prefix, int64_t out, int64_t in, bool has_bias) const {
    Linear linear;
    MOERT_ASSIGN_OR_RETURN(linear.weight, linear_weight(prefix, out, in));
    if (has_bias) {
      MOERT_ASSIGN_OR_RETURN(linear.bias, vector(prefix + ".bias", out));
    }
    return linear;
  }

  // projections: gate, up, down under `prefix` (TensorNames::Projection order).
  Result<GatedMlp> mlp(const std::string& prefix, const std::array<const char*, 3>& projections, int64_t hidden,
                       int64_t width) const {
    GatedMlp mlp;
    MOERT_ASSIGN_OR_RETURN(mlp.gate, linear(prefix + projections[TensorNames::kGate], width, hidden, false));
    MOERT_ASSIGN_OR_RETURN(mlp.up, linear(prefix + projections[TensorNames::kUp], width, hidden, false));
    MOERT_ASSIGN_OR_RETURN(mlp.down, linear(prefix + projections[TensorNames::kDown], hidden, width, false));
    return mlp;
  }

  // A dense (F32/BF16/F16) tensor of exactly `shape`.
  Result<TensorView> dense(const std::string& name, const Shape& shape) const {
    MOERT_ASSIGN_OR_RETURN(TensorView view, checked(name, shape));
    if (view.dtype != DType::kF32 && view.dtype != DType::kBF16 && view.dtype != DType::kF16) {
      return unsupported("tensor '" + name + "' has dtype " + std::string(dtype_name(view.dtype)) +
                         " (expected F32, BF16 or F16)");
    }
    return view;
  }

  // Any-rank tensor of `shape` widened to F32.
  Result<std::vector<float>> vector_shaped(const std::string& name, const Shape& shape) const {
    MOERT_ASSIGN_OR_RETURN(TensorView view, checked(name, shape));
    return widen_to_f32(name, view);
  }

  Result<TensorView> typed(const std::string& name, DType dtype, const Shape& expected) const {
    MOERT_ASSIGN_OR_RETURN(TensorView view, checked(name, expected));
    if (view.dtype != dtype) {
      return invalid_argument("tensor '" + name + "' has dtype " + std::string(dtype_name(view.dtype)) + ", expected " +
                              std::string(dtype_name(dtype)));
    }
    return view;
  }

  // An F32 scalar stored as shape [] or [1].
  Result<float> scalar(const std::string& name) const {
    MOERT_ASSIGN_OR_RETURN(TensorView view, checkpoint_.get(name));
    if (view.dtype != DType::kF32 || view.numel() != 1 || view.ndim() > 1) {
      return invalid_argument("tensor '" + name + "' must be one F32 value, got " + std::string(dtype_name(view.dtype)) +
                              " " + shape_to_string(view.shape));
    }
    return view.as<const float>()[0];
  }

 private:
  Result<TensorView> checked(const std::string& name, const Shape& expected) const {
    MOERT_ASSIGN_OR_RETURN(TensorView view, checkpoint_.get(name));
    if (view.shape != expected) {
      return invalid_argument("tensor '" + name + "' has shape " + shape_to_string(view.shape) + ", expected " +
                              shape_to_string(expected));
    }
    return view;
  }

  const io::Checkpoint& checkpoint_;
};

// Element (r, c) of a row-major [rows, cols] matrix of `bytes`-wide elements copied to
// (c, r) of `out` ([cols, rows]) for every r and the columns c = first, first + step, ...:
// out row i = input column first + i * step. Exact (bytes are copied, not converted).
void gather_columns_transposed(const uint8_t* in, int64_t rows, int64_t cols, int64_t bytes, int64_t first,
                               int64_t step, uint8_t* out) {
  const int64_t out_rows = (cols - first + step - 1) / step;
  for (int64_t i = 0; i < out_rows; ++i) {
    const int64_t c = first + i * step;
    for (int64_t r = 0; r < rows; ++r) std::memcpy(out + (i * rows + r) * bytes, in + (r * cols + c) * bytes, bytes);
  }
}

// Rows first, first + step, ... of a [rows, row_bytes] byte matrix, in order.
void gather_rows(const uint8_t* in, int64_t rows, int64_t row_bytes, int64_t first, int64_t step, uint8_t* out) {
  for (int64_t r = first, i = 0; r < rows; r += step, ++i) std::memcpy(out + i * row_bytes, in + r * row_bytes, row_bytes);
}

// Stacked experts (ModelConfig::stacked_experts, docs/gpt-oss.md): split per expert into
// gate [I, D], up [I, D] (de-interleaved: gate_up output 2j is gate j, 2j+1 is up j) and
// down [D, I], with their biases. MXFP4 blocks are [E, out, in/32, 16] and only need their
// rows split; dense ones are [E, in, out] and are transposed into owned [out, in] copies.
Status bind_stacked_experts(const ModelConfig& c, const io::Checkpoint& checkpoint, const WeightBinder& w, int layer,
                            MoeWeights& moe, std::vector<Buffer>& owned) {
  const int64_t num_experts = c.num_experts(), d = c.hidden_size, width = c.moe_intermediate_size;
  const TensorNames& n = c.arch->names;
  const std::string experts = n.experts_prefix(layer);
  const std::string gu = experts + n.stacked_experts[0], down = experts + n.stacked_experts[1];
  MOERT_ASSIGN_OR_RETURN(std::vector<float> gu_bias, w.vector_shaped(gu + "_bias", {num_experts, 2 * width}));
  MOERT_ASSIGN_OR_RETURN(std::vector<float> down_bias, w.vector_shaped(down + "_bias", {num_experts, d}));
  const bool mxfp4 = checkpoint.find(gu + "_blocks") != nullptr;
  TensorView gu_data, gu_scales, down_data, down_scales;
  if (mxfp4) {
    if (d % 32 != 0 || width % 32 != 0) return invalid_argument("'" + gu + "_blocks': MXFP4 needs D and I multiples of 32");
    MOERT_ASSIGN_OR_RETURN(gu_data, w.typed(gu + "_blocks", DType::kU8, {num_experts, 2 * width, d / 32, 16}));
    MOERT_ASSIGN_OR_RETURN(gu_scales, w.typed(gu + "_scales", DType::kU8, {num_experts, 2 * width, d / 32}));
    MOERT_ASSIGN_OR_RETURN(down_data, w.typed(down + "_blocks", DType::kU8, {num_experts, d, width / 32, 16}));
    MOERT_ASSIGN_OR_RETURN(down_scales, w.typed(down + "_scales", DType::kU8, {num_experts, d, width / 32}));
  } else {
    MOERT_ASSIGN_OR_RETURN(gu_data, w.dense(gu, {num_experts, d, 2 * width}));
    MOERT_ASSIGN_OR_RETURN(down_data, w.dense(down, {num_experts, width, d}));
  }
  moe.expert_activation = c.expert_activation;
  for (int64_t e = 0; e < num_experts; ++e) {
    GatedMlp mlp;
    for (int half = 0; half < 2; ++half) {  // 0: gate, 1: up
      Linear& linear = half == 0 ? mlp.gate : mlp.up;
      for (int64_t j = 0; j < width; ++j) linear.bias.push_back(gu_bias[static_cast<size_t>(e * 2 * width + 2 * j + half)]);
      if (mxfp4) {
        const int64_t row_bytes = d / 2, scale_row = d / 32;
        uint8_t* blocks = owned.emplace_back(DType::kU8, Shape{width, row_bytes}).data<uint8_t>();
        uint8_t* scales = owned.emplace_back(DType::kU8, Shape{width, scale_row}).data<uint8_t>();
        gather_rows(gu_data.as<const uint8_t>() + e * 2 * width * row_bytes, 2 * width, row_bytes, half, 2, blocks);
        gather_rows(gu_scales.as<const uint8_t>() + e * 2 * width * scale_row, 2 * width, scale_row, half, 2, scales);
        quant::QuantizedWeightView q;
        q.format = quant::WeightFormat::kMxfp4;
        q.rows = width;
        q.cols = d;
        q.data = blocks;
        q.scales = scales;
        linear.weight = quant::LinearWeight::from_packed(q);
      } else {
        const int64_t bytes = dtype_bits(gu_data.dtype) / 8;
        Buffer& matrix = owned.emplace_back(gu_data.dtype, Shape{width, d});
        gather_columns_transposed(gu_data.as<const uint8_t>() + e * d * 2 * width * bytes, d, 2 * width, bytes, half, 2,
                                  matrix.data<uint8_t>());
        linear.weight = quant::LinearWeight::from_dense(matrix.view());
      }
    }
    mlp.down.bias.assign(down_bias.begin() + e * d, down_bias.begin() + (e + 1) * d);
    if (mxfp4) {
      quant::QuantizedWeightView q;
      q.format = quant::WeightFormat::kMxfp4;
      q.rows = d;
      q.cols = width;
      q.data = down_data.as<const uint8_t>() + e * d * (width / 2);
      q.scales = down_scales.as<const uint8_t>() + e * d * (width / 32);
      mlp.down.weight = quant::LinearWeight::from_packed(q);
    } else {
      const int64_t bytes = dtype_bits(down_data.dtype) / 8;
      Buffer& matrix = owned.emplace_back(down_data.dtype, Shape{d, width});
      gather_columns_transposed(down_data.as<const uint8_t>() + e * width * d * bytes, width, d, bytes, 0, 1,
                                matrix.data<uint8_t>());
      mlp.down.weight = quant::LinearWeight::from_dense(matrix.view());
    }
    moe.experts.push_back(std::move(mlp));
  }
  return Status::ok();
}

// Qwen3.5's fused experts (ModelConfig::fused_gate_up_experts): gate_up_proj [E, 2I, D] (expert
// e's I gate rows, then its I up rows) and down_proj [E, D, I], dense; each expert's three
// matrices are views into them (already [out, in]: nothing is copied).
Status bind_fused_gate_up_experts(const ModelConfig& c, const WeightBinder& w, int layer, MoeWeights& moe) {
  const int64_t num_experts = c.num_experts(), d = c.hidden_size, width = c.moe_intermediate_size;
  const TensorNames& n = c.arch->names;
  const std::string experts = n.experts_prefix(layer);
  MOERT_ASSIGN_OR_RETURN(const TensorView gate_up, w.dense(experts + n.stacked_experts[0], {num_experts, 2 * width, d}));
  MOERT_ASSIGN_OR_RETURN(const TensorView down, w.dense(experts + n.stacked_experts[1], {num_experts, d, width}));
  const int64_t bytes = dtype_bits(gate_up.dtype) / 8;
  auto rows = [&](const TensorView& stacked, int64_t first_row, int64_t num_rows, int64_t cols) {
    return TensorView::contiguous(stacked.dtype, {num_rows, cols},
                                  static_cast<uint8_t*>(stacked.data) + first_row * cols * bytes);
  };
  for (int64_t e = 0; e < num_experts; ++e) {
    GatedMlp mlp;
    mlp.gate.weight = quant::LinearWeight::from_dense(rows(gate_up, e * 2 * width, width, d));
    mlp.up.weight = quant::LinearWeight::from_dense(rows(gate_up, e * 2 * width + width, width, d));
    mlp.down.weight = quant::LinearWeight::from_dense(rows(down, e * d, d, width));
    moe.experts.push_back(std::move(mlp));
  }
  return Status::ok();
}

// Qwen3-Next's fused input projections regrouped into the conv order (docs/gated-deltanet.md):
// in_proj_qkvz [2 NK DK + 2 NV DV, D] holds per key head g [q_g | k_g | v of its R value
// heads | z of its R value heads], in_proj_ba [2 NV, D] per key head [b of its R | a of its R].
// Rows are copied as bytes (exact) into owned dense matrices. Packed (FP8, FP4) fused
// projections are refused: their block scales span the groups.
Status bind_grouped_linear_projections(const ModelConfig& c, const WeightBinder& w, const std::string& p,
                                       LinearAttentionWeights& l, std::vector<Buffer>& owned) {
  const LinearAttentionDims& m = c.linear_attention;
  const TensorNames& n = c.arch->names;
  const int64_t d = c.hidden_size, nk = m.num_key_heads, dk = m.key_head_dim, dv = m.value_head_dim;
  const int64_t r = m.num_value_heads / m.num_key_heads, nv = m.num_value_heads;
  const int64_t group_rows = 2 * dk + 2 * r * dv;
  const std::string qkvz_name = p + n.in_proj_qkvz + ".weight", ba_name = p + n.in_proj_ba + ".weight";
  Result<TensorView> qkvz = w.dense(qkvz_name, {nk * group_rows, d});
  if (!qkvz.is_ok()) return qkvz.status().with_context("Qwen3-Next fused projections are read dense only");
  MOERT_ASSIGN_OR_RETURN(const TensorView ba, w.dense(ba_name, {2 * nv, d}));
  const int64_t row_bytes = d * (dtype_bits(qkvz->dtype) / 8);
  const auto* src = static_cast<const uint8_t*>(qkvz->data);
  auto owned_matrix = [&](DType dtype, int64_t rows) {
    return owned.emplace_back(dtype, Shape{rows, d}).view();
  };
  const TensorView qkv = owned_matrix(qkvz->dtype, m.conv_channels()), z = owned_matrix(qkvz->dtype, nv * dv);
  auto copy_rows = [&](const uint8_t* from, const TensorView& to, int64_t to_row, int64_t count) {
    std::memcpy(static_cast<uint8_t*>(to.data) + to_row * row_bytes, from, static_cast<size_t>(count * row_bytes));
  };
  for (int64_t g = 0; g < nk; ++g) {
    const uint8_t* group = src + g * group_rows * row_bytes;
    copy_rows(group, qkv, g * dk, dk);                                     // q_g
    copy_rows(group + dk * row_bytes, qkv, nk * dk + g * dk, dk);          // k_g
    copy_rows(group + 2 * dk * row_bytes, qkv, 2 * nk * dk + g * r * dv, r * dv);  // its value heads
    copy_rows(group + (2 * dk + r * dv) * row_bytes, z, g * r * dv, r * dv);
  }
  const int64_t ba_row_bytes = d * (dtype_bits(ba.dtype) / 8);
  const TensorView b = owned.emplace_back(ba.dtype, Shape{nv, d}).view();
  const TensorView a = owned.emplace_back(ba.dtype, Shape{nv, d}).view();
  for (int64_t g = 0; g < nk; ++g) {
    const auto* group = static_cast<const uint8_t*>(ba.data) + g * 2 * r * ba_row_bytes;
    std::memcpy(static_cast<uint8_t*>(b.data) + g * r * ba_row_bytes, group, static_cast<size_t>(r * ba_row_bytes));
    std::memcpy(static_cast<uint8_t*>(a.data) + g * r * ba_row_bytes, group + r * ba_row_bytes,
                static_cast<size_t>(r * ba_row_bytes));
  }
  l.qkv.weight = quant::LinearWeight::from_dense(qkv);
  l.z.weight = quant::LinearWeight::from_dense(z);
  l.b.weight = quant::LinearWeight::from_dense(b);
  l.a.weight = quant::LinearWeight::from_dense(a);
  return Status::ok();
}

Result<LinearAttentionWeights> bind_linear_attention(const ModelConfig& c, const WeightBinder& w, int layer,
                                                     std::vector<Buffer>& owned) {
  const LinearAttentionDims& m = c.linear_attention;
  const TensorNames& n = c.arch->names;
  const std::string p = n.linear_attention_prefix(layer);
  const int64_t d = c.hidden_size, nv = m.num_value_heads, channels = m.conv_channels();
  LinearAttentionWeights l;
  if (m.grouped_projections) {
    MOERT_RETURN_IF_ERROR(bind_grouped_linear_projections(c, w, p, l, owned));
  } else {
    MOERT_ASSIGN_OR_RETURN(l.qkv, w.linear(p + n.in_proj_qkv, channels, d, false));
    MOERT_ASSIGN_OR_RETURN(l.z, w.linear(p + n.in_proj_z, nv * m.value_head_dim, d, false));
    MOERT_ASSIGN_OR_RETURN(l.b, w.linear(p + n.in_proj_b, nv, d, false));
    MOERT_ASSIGN_OR_RETURN(l.a, w.linear(p + n.in_proj_a, nv, d, false));
  }
  MOERT_ASSIGN_OR_RETURN(l.conv, w.vector_shaped(p + n.conv1d + ".weight", {channels, 1, m.conv_width}));
  MOERT_ASSIGN_OR_RETURN(l.a_log, w.vector(p + n.a_log, nv));
  MOERT_ASSIGN_OR_RETURN(l.dt_bias, w.vector(p + n.dt_bias, nv));
  MOERT_ASSIGN_OR_RETURN(l.norm, w.norm(p + n.linear_norm, m.value_head_dim, /*plus_one=*/false));
  MOERT_ASSIGN_OR_RETURN(l.out, w.linear(p + n.out_proj, d, nv * m.value_head_dim, false));
  return l;
}

// kv_b_proj [H * (dn + dv), dc] (head-major, each head [k_nope rows | v rows]) split into
// key_absorb [H, dc, dn] (the k_nope rows transposed) and value_up [H, dv, dc], F32.
Status split_kv_b_proj(const ModelConfig& c, const quant::LinearWeight& kv_b, AttentionWeights& a,
                       std::vector<Buffer>& owned) {
  const LatentAttentionDims& m = c.mla;
  const int64_t heads = c.num_heads, dn = m.qk_nope_head_dim, dv = m.v_head_dim, dc = m.kv_lora_rank;
  std::vector<float> full(static_cast<size_t>(heads * (dn + dv) * dc));
  quant::dequantize_to_f32(kv_b, full.data());
  // Views taken right after each emplace_back: a later one may move the vector's elements
  // (the Buffers' storage itself never moves).
  a.key_absorb = owned.emplace_back(DType::kF32, Shape{heads, dc, dn}).view();
  a.value_up = owned.emplace_back(DType::kF32, Shape{heads, dv, dc}).view();
  for (int64_t h = 0; h < heads; ++h) {
    const float* head = full.data() + h * (dn + dv) * dc;  // [dn + dv, dc]
    float* absorb_head = a.key_absorb.as<float>() + h * dc * dn;
    for (int64_t n = 0; n < dn; ++n) {
      for (int64_t i = 0; i < dc; ++i) absorb_head[i * dn + n] = head[n * dc + i];
    }
    std::copy_n(head + dn * dc, dv * dc, a.value_up.as<float>() + h * dv * dc);
  }
  return Status::ok();
}

Result<AttentionWeights> bind_latent_attention(const ModelConfig& c, const WeightBinder& w, int layer,
                                               std::vector<Buffer>& owned) {
  const TensorNames& n = c.arch->names;
  const std::string p = n.attention_prefix(layer);
  const LatentAttentionDims& m = c.mla;
  const int64_t heads = c.num_heads, q_head = m.qk_nope_head_dim + m.qk_rope_head_dim;
  AttentionWeights a;
  if (m.q_lora_rank > 0) {
    MOERT_ASSIGN_OR_RETURN(a.q_a, w.linear(p + n.q_a_proj, m.q_lora_rank, c.hidden_size, c.qkv_bias));
    MOERT_ASSIGN_OR_RETURN(a.q_a_norm, w.vector(p + n.q_a_norm + ".weight", m.q_lora_rank));
    MOERT_ASSIGN_OR_RETURN(a.q, w.linear(p + n.q_b_proj, heads * q_head, m.q_lora_rank, false));
  } else {
    MOERT_ASSIGN_OR_RETURN(a.q, w.linear(p + n.q_proj, heads * q_head, c.hidden_size, false));
  }
  MOERT_ASSIGN_OR_RETURN(a.kv_a, w.linear(p + n.kv_a_proj, m.kv_lora_rank + m.qk_rope_head_dim,
                                          c.hidden_size, c.qkv_bias));
  MOERT_ASSIGN_OR_RETURN(a.kv_a_norm, w.vector(p + n.kv_a_norm + ".weight", m.kv_lora_rank));
  MOERT_ASSIGN_OR_RETURN(Linear kv_b, w.linear(p + n.kv_b_proj, heads * (m.qk_nope_head_dim + m.v_head_dim),
                                               m.kv_lora_rank, false));
  MOERT_RETURN_IF_ERROR(split_kv_b_proj(c, kv_b.weight, a, owned));
  MOERT_ASSIGN_OR_RETURN(a.o, w.linear(p + n.o_proj, c.hidden_size, heads * m.v_head_dim, c.o_bias));
  if (c.dsa.has_indexer(layer)) {  // the lightning indexer (docs/sparse-attention.md; not on GLM-5.2's shared layers)
    const std::string i = p + n.indexer + ".";
    const int64_t ni = c.dsa.index_n_heads, di = c.dsa.index_head_dim;
    IndexerWeights& x = a.indexer;
    MOERT_ASSIGN_OR_RETURN(x.wq_b, w.linear(i + n.indexer_wq_b, ni * di, m.q_lora_rank, false));
    MOERT_ASSIGN_OR_RETURN(x.wk, w.linear(i + n.indexer_wk, di, c.hidden_size, false));
    MOERT_ASSIGN_OR_RETURN(x.k_norm_weight, w.vector(i + n.indexer_k_norm + ".weight", di));
    MOERT_ASSIGN_OR_RETURN(x.k_norm_bias, w.vector(i + n.indexer_k_norm + ".bias", di));
    MOERT_ASSIGN_OR_RETURN(x.weights_proj, w.linear(i + n.indexer_weights_proj, ni, c.hidden_size, false));
  }
  return a;
}

Result<AttentionWeights> bind_attention(const ModelConfig& c, const WeightBinder& w, int layer) {
  const TensorNames& n = c.arch->names;
  const std::string p = n.attention_prefix(layer);
  const int64_t q_out = static_cast<int64_t>(c.num_heads) * c.head_dim;
  const int64_t kv_out = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  // Gated attention: per head [Dh query rows | Dh gate rows].
  const int64_t q_rows = c.attention_output_gate ? 2 * q_out : q_out;
  AttentionWeights a;
  MOERT_ASSIGN_OR_RETURN(a.q, w.linear(p + n.q_proj, q_rows, c.hidden_size, c.qkv_bias));
  MOERT_ASSIGN_OR_RETURN(a.k, w.linear(p + n.k_proj, kv_out, c.hidden_size, c.qkv_bias));
  MOERT_ASSIGN_OR_RETURN(a.v, w.linear(p + n.v_proj, kv_out, c.hidden_size, c.qkv_bias));
  MOERT_ASSIGN_OR_RETURN(a.o, w.linear(p + n.o_proj, c.hidden_size, q_out, c.o_bias));
  if (c.attention_sinks) {
    MOERT_ASSIGN_OR_RETURN(a.sinks, w.vector(p + n.sinks, c.num_heads));
  }
  if (c.qk_norm) {
    MOERT_ASSIGN_OR_RETURN(a.q_norm, w.norm(p + n.q_norm, c.head_dim, c.norm_weights_offset_by_one));
    MOERT_ASSIGN_OR_RETURN(a.k_norm, w.norm(p + n.k_norm, c.head_dim, c.norm_weights_offset_by_one));
  }
  return a;
}

Result<MoeWeights> bind_moe(const ModelConfig& c, const io::Checkpoint& checkpoint, const WeightBinder& w, int layer,
                            std::vector<Buffer>& owned) {
  MoeWeights moe;
  const TensorNames& n = c.arch->names;
  const std::string p = n.moe_prefix(layer);
  const std::string router = n.router_module(layer);
  MOERT_ASSIGN_OR_RETURN(moe.router, w.matrix(router + ".weight", c.num_experts(), c.hidden_size));
  if (c.router_bias) {
    MOERT_ASSIGN_OR_RETURN(moe.router_bias, w.vector(router + ".bias", c.num_experts()));
  }
  if (c.router_has_correction_bias) {
    MOERT_ASSIGN_OR_RETURN(moe.correction_bias, w.vector(router + "." + n.router_correction_bias, c.num_experts()));
  }
  moe.expert_activation = c.expert_activation;
  const bool fused = c.fused_gate_up_experts &&
                     checkpoint.find(n.experts_prefix(layer) + n.stacked_experts[0]) != nullptr;
  if (c.stacked_experts) {
    MOERT_RETURN_IF_ERROR(bind_stacked_experts(c, checkpoint, w, layer, moe, owned));
  } else if (fused) {
    MOERT_RETURN_IF_ERROR(bind_fused_gate_up_experts(c, w, layer, moe));
  }
  for (int e = 0; !c.stacked_experts && !fused && e < c.num_experts(); ++e) {
    MOERT_ASSIGN_OR_RETURN(GatedMlp expert, w.mlp(n.expert_prefix(layer, e), n.expert_projections, c.hidden_size,
                                                  c.moe_intermediate_size));
    moe.experts.push_back(std::move(expert));
  }
  if (c.shared_expert != SharedExpertKind::kNone) {
    MOERT_ASSIGN_OR_RETURN(GatedMlp shared, w.mlp(n.shared_expert_prefix(layer), n.mlp_projections, c.hidden_size,
                                                  c.shared_intermediate_size));
    moe.shared_expert = std::move(shared);
    if (c.shared_expert == SharedExpertKind::kSigmoidGated) {
      MOERT_ASSIGN_OR_RETURN(moe.shared_expert_gate,
                             w.matrix(p + n.shared_expert_gate + ".weight", 1, c.hidden_size));
    }
  }
  return moe;
}

Result<LayerWeights> bind_layer(const ModelConfig& c, const io::Checkpoint& checkpoint, const WeightBinder& w,
                                int layer, bool is_moe, std::vector<Buffer>& owned) {
  LayerWeights l;
  const TensorNames& n = c.arch->names;
  const std::string p = n.layer_prefix(layer);
  const bool plus_one = c.norm_weights_offset_by_one;
  MOERT_ASSIGN_OR_RETURN(l.input_norm, w.norm(p + n.input_norm, c.hidden_size, plus_one));
  MOERT_ASSIGN_OR_RETURN(l.post_attention_norm, w.norm(p + n.post_attention_norm, c.hidden_size, plus_one));
  l.is_linear_attention = static_cast<size_t>(layer) < c.layer_is_linear_attention.size() &&
                          c.layer_is_linear_attention[static_cast<size_t>(layer)];
  if (l.is_linear_attention) {
    MOERT_ASSIGN_OR_RETURN(l.linear_attention, bind_linear_attention(c, w, layer, owned));
  } else if (c.mla.enabled()) {
    MOERT_ASSIGN_OR_RETURN(l.attention, bind_latent_attention(c, w, layer, owned));
  } else {
    MOERT_ASSIGN_OR_RETURN(l.attention, bind_attention(c, w, layer));
  }
  l.is_moe = is_moe;
  if (l.is_moe) {
    MOERT_ASSIGN_OR_RETURN(l.moe, bind_moe(c, checkpoint, w, layer, owned));
  } else {
    MOERT_ASSIGN_OR_RETURN(l.dense_mlp,
                           w.mlp(n.mlp_prefix(layer), n.mlp_projections, c.hidden_size, c.dense_intermediate_size));
  }
  return l;
}

// Module k is layer num_layers + k (docs/mtp.md): enorm, hnorm, eh_proj (BF16 in every
// release, FP8 or block-scaled weights read as any linear), shared_head.norm, the module's own
// embed_tokens / shared_head.head when present, and a MoE decoder block (MoE whatever
// first_k_dense_replace says, as SGLang forces and vLLM's rule gives for every release).
Status bind_mtp(const ModelConfig& c, const io::Checkpoint& checkpoint, const WeightBinder& w, ModelWeights& m) {
  if (c.num_mtp_layers <= 0) {
    return invalid_argument("the model has no multi-token prediction layer (config.json num_nextn_predict_layers = " +
                            std::to_string(c.num_mtp_layers) + ")");
  }
  const int64_t d = c.hidden_size;
  const TensorNames& n = c.arch->names;
  for (int k = 0; k < c.num_mtp_layers; ++k) {
    const int layer = c.num_layers + k;
    const std::string p = n.layer_prefix(layer);
    const std::string eh_proj = p + n.mtp_eh_proj, embed = p + n.mtp_embed_tokens + ".weight";
    const std::string head = p + n.mtp_head;
    if (checkpoint.find(eh_proj + ".weight") == nullptr) {
      return invalid_argument("config.json num_nextn_predict_layers = " + std::to_string(c.num_mtp_layers) +
                              " but the checkpoint has no '" + eh_proj + ".weight' (its MTP layer was left out)");
    }
    MtpWeights t;
    MOERT_ASSIGN_OR_RETURN(t.enorm, w.vector(p + n.mtp_enorm + ".weight", d));
    MOERT_ASSIGN_OR_RETURN(t.hnorm, w.vector(p + n.mtp_hnorm + ".weight", d));
    MOERT_ASSIGN_OR_RETURN(t.eh_proj, w.linear(eh_proj, d, 2 * d, false));
    MOERT_ASSIGN_OR_RETURN(t.head_norm, w.vector(p + n.mtp_head_norm + ".weight", d));
    if (checkpoint.find(embed) != nullptr) {
      MOERT_ASSIGN_OR_RETURN(t.embed_tokens, w.matrix(embed, c.vocab_size, d));
    }
    if (checkpoint.find(head + ".weight") != nullptr) {
      MOERT_ASSIGN_OR_RETURN(t.head, w.linear_weight(head, c.vocab_size, d));
    }
    MOERT_ASSIGN_OR_RETURN(LayerWeights block, bind_layer(c, checkpoint, w, layer, /*is_moe=*/true, m.owned));
    m.layers.push_back(std::move(block));
    m.mtp.push_back(std::move(t));
  }
  return Status::ok();
}

}  // namespace

std::string model_digest(const ModelConfig& config, const io::Checkpoint& checkpoint) {
  Digest digest;
  digest.add(model_config_to_json(config).dump());
  std::vector<std::string> names = checkpoint.tensor_names();
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const Result<TensorView> view = checkpoint.get(name);
    digest.add(name).add("|");
    if (view.is_ok()) {
      // The first and last bytes of each tensor (one page each) tell same-shaped checkpoints apart.
      const int64_t bytes = view->numel() * dtype_bits(view->dtype) / 8;
      const auto* data = static_cast<const char*>(view->data);
      const int64_t sample = std::min<int64_t>(bytes, 64);
      digest.add(dtype_name(view->dtype)).add(shape_to_string(view->shape));
      if (data != nullptr && sample > 0) {
        digest.add(std::string_view(data, static_cast<size_t>(sample)));
        digest.add(std::string_view(data + bytes - sample, static_cast<size_t>(sample)));
      }
    }
    digest.add("\n");
  }
  return digest.hex();
}

namespace {

bool ends_with_text(const std::string& text, const char* suffix) {
  const std::string s(suffix);
  return text.size() >= s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0;
}

// The first element of `view` that `problem` names, as "WHY at element I", or "". `problem`
// returns a static description, or nullptr for a good value; `bad(v)` is true exactly when
// problem(v) is not null, written without branches so that the scan over every weight of a
// checkpoint (a load-time pass) runs vectorised, 4096 elements at a time, and only a block
// with a bad element is looked at again element by element.
template <typename Element, typename Bad, typename Problem>
std::string first_problem(const TensorView& view, Bad bad, Problem problem) {
  const auto* data = view.as<const Element>();
  const int64_t count = view.numel();
  constexpr int64_t kBlock = 4096;
  int64_t begin = 0;
  auto find_in = [&](int64_t end) -> std::string {
    for (int64_t i = begin; i < end; ++i) {
      if (const char* why = problem(data[i])) return std::string(why) + " at element " + std::to_string(i);
    }
    return "";
  };
  for (; begin + kBlock <= count; begin += kBlock) {
    unsigned any = 0;  // a fixed trip count and no early exit: vectorised at -O2
    for (int64_t i = 0; i < kBlock; ++i) any |= bad(data[begin + i]) ? 1u : 0u;
    if (any != 0) return find_in(begin + kBlock);
  }
  return find_in(count);
}

template <typename Element, typename Problem>
std::string first_problem(const TensorView& view, Problem problem) {
  return first_problem<Element>(view, [&](Element v) { return problem(v) != nullptr; }, problem);
}

const char* float_problem(float value, bool scale, bool global_scale) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return "Inf";
  if (scale && value < 0.0f) return "a negative scale";
  if (global_scale && value == 0.0f) return "a zero global scale";
  return nullptr;
}

}  // namespace

Status check_checkpoint_values(const io::Checkpoint& checkpoint) {
  for (const std::string& name : checkpoint.tensor_names()) {
    MOERT_ASSIGN_OR_RETURN(const TensorView view, checkpoint.get(name));
    const bool global_scale = ends_with_text(name, ".weight_scale_2") ||
                              (view.dtype == DType::kF32 && ends_with_text(name, ".weight_scale"));
    const bool scale = global_scale || ends_with_text(name, "_scale_inv") || ends_with_text(name, ".weight_scale");
    std::string problem;
    // Outside scales (small tensors, checked element by element) the only problems are NaN and
    // Inf (E4M3: NaN), which `not_finite` finds by the exponent bits alone.
    auto scan = [&](auto element, auto not_finite, auto problem_of) {  // element: a value of the dtype's type
      using Element = decltype(element);
      if (scale) return first_problem<Element>(view, problem_of);
      return first_problem<Element>(view, not_finite, problem_of);
    };
    switch (view.dtype) {
      case DType::kF32:
        problem = scan(uint32_t{}, [](uint32_t v) { return (v & 0x7F800000u) == 0x7F800000u; },
                       [&](uint32_t v) { return float_problem(std::bit_cast<float>(v), scale, global_scale); });
        break;
      case DType::kBF16:
        problem = scan(uint16_t{}, [](uint16_t v) { return (v & 0x7F80) == 0x7F80; },
                       [&](uint16_t v) { return float_problem(quant::bf16_to_f32(v), scale, global_scale); });
        break;
      case DType::kF16:
        problem = first_problem<uint16_t>(view, [](uint16_t v) { return (v & 0x7C00) == 0x7C00; },
                                          [](uint16_t v) -> const char* {
                                            if ((v & 0x7C00) != 0x7C00) return nullptr;
                                            return (v & 0x3FF) ? "NaN" : "Inf";
                                          });
        break;
      case DType::kF8E4M3:  // e4m3fn: 0x7F / 0xFF are NaN, there is no Inf
        problem = scan(uint8_t{}, [](uint8_t v) { return (v & 0x7F) == 0x7F; }, [&](uint8_t v) -> const char* {
          if ((v & 0x7F) == 0x7F) return "NaN";
          if (scale && (v & 0x80) && (v & 0x7F)) return "a negative scale";
          return nullptr;
        });
        break;
      case DType::kU8:  // packed FP4 cannot be NaN; E8M0 scales (MXFP4 `_scales`) can
        if (ends_with_text(name, "_scales")) {
          problem = first_problem<uint8_t>(view, [](uint8_t v) { return v == 0xFF; }, [](uint8_t v) -> const char* {
            return v == 0xFF ? "the E8M0 NaN code" : nullptr;
          });
        }
        break;
      default:
        break;
    }
    if (!problem.empty()) return invalid_argument("tensor '" + name + "' holds " + problem);
  }
  return Status::ok();
}

std::string describe_weight_formats(const ModelWeights& m) {
  std::string attention = "?", experts = "none";
  for (const LayerWeights& l : m.layers) {
    if (l.is_linear_attention) continue;  // its projections are read the same way
    attention = l.attention.o.weight.format_name();
    break;
  }
  for (const LayerWeights& l : m.layers) {
    if (l.is_moe && !l.moe.experts.empty()) {
      experts = l.moe.experts.front().down.weight.format_name();
      break;
    }
  }
  return "attention " + attention + ", experts " + experts + ", lm_head " + m.lm_head.format_name();
}

Result<ModelWeights> bind_model_weights(const ModelConfig& c, const io::Checkpoint& checkpoint, bool mtp) {
  const TensorNames& n = c.arch->names;
  // A checkpoint with more layers than the config runs would be served truncated: refused.
  for (const std::string& name : checkpoint.tensor_names()) {
    const int layer = n.layer_of(name);
    if (layer >= 0 && static_cast<int64_t>(layer) >= static_cast<int64_t>(c.num_layers) + c.num_unused_extra_layers) {
      return invalid_argument("the checkpoint holds layer " + std::to_string(layer) + " ('" + name +
                              "') but config.json has num_hidden_layers = " + std::to_string(c.num_layers));
    }
  }
  WeightBinder w(checkpoint);
  ModelWeights m;
  MOERT_ASSIGN_OR_RETURN(m.embed_tokens, w.matrix(std::string(n.embed_tokens) + ".weight", c.vocab_size, c.hidden_size));
  for (int layer = 0; layer < c.num_layers; ++layer) {
    MOERT_ASSIGN_OR_RETURN(LayerWeights l, bind_layer(c, checkpoint, w, layer, c.layer_is_moe[static_cast<size_t>(layer)], m.owned));
    m.layers.push_back(std::move(l));
  }
  MOERT_ASSIGN_OR_RETURN(m.final_norm, w.norm(n.final_norm, c.hidden_size, c.norm_weights_offset_by_one));
  if (c.tie_word_embeddings && checkpoint.find(std::string(n.lm_head) + ".weight") == nullptr) {
    m.lm_head = quant::LinearWeight::from_dense(m.embed_tokens);
  } else {
    MOERT_ASSIGN_OR_RETURN(m.lm_head, w.linear_weight(n.lm_head, c.vocab_size, c.hidden_size));
  }
  if (mtp) MOERT_RETURN_IF_ERROR(bind_mtp(c, checkpoint, w, m));
  return m;
}

void for_each_linear_weight(ModelWeights& weights,
                            const std::function<void(quant::LinearWeight& weight, int layer, int expert)>& visit) {
  visit(weights.lm_head, -1, -1);
  for (MtpWeights& module : weights.mtp) {
    visit(module.eh_proj.weight, -1, -1);
    if (module.head.has_value()) visit(*module.head, -1, -1);
  }
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    LayerWeights& layer = weights.layers[l];
    auto mlp = [&](GatedMlp& m, int expert) {
      for (Linear* linear : {&m.gate, &m.up, &m.down}) visit(linear->weight, expert < 0 ? -1 : static_cast<int>(l), expert);
    };
    AttentionWeights& a = layer.attention;
    for (Linear* linear : {&a.q, &a.k, &a.v, &a.o, &a.q_a, &a.kv_a, &a.indexer.wq_b, &a.indexer.wk,
                           &a.indexer.weights_proj}) {
      visit(linear->weight, -1, -1);
    }
    LinearAttentionWeights& la = layer.linear_attention;
    for (Linear* linear : {&la.qkv, &la.z, &la.b, &la.a, &la.out}) visit(linear->weight, -1, -1);
    if (layer.is_moe) {
      for (size_t e = 0; e < layer.moe.experts.size(); ++e) mlp(layer.moe.experts[e], static_cast<int>(e));
      if (layer.moe.shared_expert.has_value()) mlp(*layer.moe.shared_expert, -1);
    } else {
      mlp(layer.dense_mlp, -1);
    }
  }
}

namespace {

void for_each_packed_weight(ModelWeights& weights, const std::function<void(quant::QuantizedWeightView&)>& visit) {
  for_each_linear_weight(weights, [&](quant::LinearWeight& weight, int /*layer*/, int /*expert*/) {
    if (weight.packed.has_value()) visit(*weight.packed);
  });
}

void mark_fp8_codes_finite(ModelWeights& weights) {
  for_each_packed_weight(weights, [](quant::QuantizedWeightView& w) {
    if (w.format == quant::WeightFormat::kFp8Block || w.format == quant::WeightFormat::kFp8Tensor) {
      w.fp8_codes_finite = true;
    }
  });
}

}  // namespace

void set_fp4_activations(ModelWeights& weights, quant::ActivationPrecision precision) {
  for_each_packed_weight(weights, [&](quant::QuantizedWeightView& w) {
    if (w.format == quant::WeightFormat::kNvfp4 || w.format == quant::WeightFormat::kMxfp4) w.activations = precision;
  });
}

Result<std::unique_ptr<LoadedModel>> load_model(const std::string& model_dir, const LoadOptions& options) {
  auto model = std::make_unique<LoadedModel>();
  MOERT_ASSIGN_OR_RETURN(model->config, load_model_config(model_dir));
  MOERT_ASSIGN_OR_RETURN(io::Checkpoint checkpoint, io::Checkpoint::open(model_dir));
  MOERT_RETURN_IF_ERROR(check_checkpoint_values(checkpoint).with_context(model_dir));
  model->checkpoint = std::make_unique<io::Checkpoint>(std::move(checkpoint));
  Result<ModelWeights> weights = bind_model_weights(model->config, *model->checkpoint, options.mtp);
  if (!weights.is_ok()) return weights.status().with_context(model_dir);
  model->weights = std::move(weights).value();
  mark_fp8_codes_finite(model->weights);  // check_checkpoint_values rejected every E4M3 NaN code
  set_fp4_activations(model->weights, options.fp4_activations);
  return model;
}

void for_each_weight_region(const ModelWeights& weights,
                            const std::function<void(const void* data, int64_t bytes)>& visit,
                            const std::function<bool(int layer, int expert)>& routed_expert_here) {
  weight_regions::walk(
      weights, [&](const auto& pointer, int64_t bytes) { visit(pointer, bytes); },
      [&](int layer, int expert) { return routed_expert_here && !routed_expert_here(layer, expert); });
}

void for_each_weight_region(const GatedMlp& mlp, const std::function<void(const void* data, int64_t bytes)>& visit) {
  weight_regions::walk_mlp(mlp, [&](const auto& pointer, int64_t bytes) { visit(pointer, bytes); });
}

}  // namespace moert
