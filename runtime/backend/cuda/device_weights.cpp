#include "runtime/backend/cuda/device_weights.h"

#include "core/check.h"
#include "quant/formats/fp4.h"

namespace moert::MOERT_CUDA_NS::backend_detail {

int64_t dtype_bytes(DType dtype) { return dtype_bits(dtype) / 8; }

namespace {

DeviceWeight::Kind dense_kind(DType dtype) {
  switch (dtype) {
    case DType::kF32: return DeviceWeight::Kind::kF32;
    case DType::kBF16: return DeviceWeight::Kind::kBF16;
    case DType::kF16: return DeviceWeight::Kind::kF16;
    default: break;
  }
  MOERT_CHECK(false, "linear weight dtype " << dtype_name(dtype) << " (F32, BF16 or F16 expected)");
  return DeviceWeight::Kind::kF32;
}

}  // namespace

DeviceWeight device_weight(const quant::LinearWeight& weight, Staging& staging) {
  DeviceWeight w;
  w.rows = weight.out_features();
  w.cols = weight.in_features();
  if (!weight.packed.has_value()) {
    MOERT_CHECK(weight.dense.is_contiguous(), "linear weight must be contiguous");
    w.kind = dense_kind(weight.dense.dtype);
    w.data = staging.weight(weight.dense, weight.dense.numel() * dtype_bytes(weight.dense.dtype));
    return w;
  }
  const quant::QuantizedWeightView& q = *weight.packed;
  // The device kernels read FP4 codes in checkpoint order, as load_model binds them (only the
  // CPU backend's own layout repacks them).
  MOERT_CHECK(q.code_order == quant::Fp4CodeOrder::kCheckpoint,
              "the CUDA backend reads FP4 codes in checkpoint order, not the CPU order (weights laid out by the CPU "
              "backend cannot compute on a device)");
  const quant::QuantizedWeightSizes sizes = quant::quantized_weight_sizes(q);
  w.global_scale = q.global_scale;
  switch (q.format) {
    case quant::WeightFormat::kNvfp4: w.kind = DeviceWeight::Kind::kNvfp4; break;
    case quant::WeightFormat::kMxfp4: w.kind = DeviceWeight::Kind::kMxfp4; break;
    case quant::WeightFormat::kFp8Block: w.kind = DeviceWeight::Kind::kFp8Block; break;
    case quant::WeightFormat::kFp8Tensor: w.kind = DeviceWeight::Kind::kFp8Tensor; break;
  }
  w.data = staging.weight(q.data, sizes.data);
  if (sizes.scales > 0) w.scales = staging.weight(q.scales, sizes.scales);
  if (sizes.block_scales > 0) {
    w.block_scale_inv = staging.weight(q.block_scale_inv, sizes.block_scales / static_cast<int64_t>(sizeof(float)));
  }
  return w;
}

Fp4Activations fp4_activations_of(const quant::LinearWeight& weight) {
  if (!weight.packed.has_value() || weight.packed->activations != quant::ActivationPrecision::kFp4) {
    return Fp4Activations::kNone;
  }
  return weight.packed->format == quant::WeightFormat::kNvfp4 ? Fp4Activations::kNvfp4 : Fp4Activations::kMxfp4;
}

ExpertSet fill_device_experts(std::span<const int32_t> ids,
                              const std::function<backend::Backend::ExpertWeights(int expert)>& expert_weights,
                              Staging& s, std::vector<DeviceExpert>& table) {
  ExpertSet set;
  for (size_t a = 0; a < ids.size(); ++a) {
    const backend::Backend::ExpertWeights w = expert_weights(ids[a]);
    DeviceExpert& e = table[static_cast<size_t>(ids[a])];
    e.gate = device_weight(*w.gate, s);
    e.up = device_weight(*w.up, s);
    e.down = device_weight(*w.down, s);
    e.gate_bias = s.weight(w.gate_bias, e.gate.rows);
    e.up_bias = s.weight(w.up_bias, e.up.rows);
    e.down_bias = s.weight(w.down_bias, e.down.rows);
    const Fp4Activations fp4 = fp4_activations_of(*w.gate);
    MOERT_CHECK(fp4 == fp4_activations_of(*w.up) && fp4 == fp4_activations_of(*w.down),
                "an expert's gate, up and down differ in their FP4 activations");
    MOERT_CHECK(a == 0 || (e.gate.rows == set.intermediate_size && w.activation == set.activation &&
                           fp4 == set.fp4_activations),
                "grouped experts differ in width, activation or FP4 activations");
    set.intermediate_size = e.gate.rows;
    set.activation = w.activation;
    set.fp4_activations = fp4;
    set.tensor_core_weights = set.tensor_core_weights && tensor_core_weight(e.gate) && tensor_core_weight(e.up) &&
                              tensor_core_weight(e.down);
  }
  return set;
}

}  // namespace moert::MOERT_CUDA_NS::backend_detail
