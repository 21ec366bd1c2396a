#include "runtime/backend/cpu/cpu_weight_layout.h"

#include <vector>

#include "quant/cpu/bf16_linear.h"
#include "quant/cpu/quantized_linear.h"
#include "runtime/model/weight_memory.h"

namespace moert::backend::cpu_weights {

void repack_fp4_codes(ModelWeights& weights, const std::function<bool(int layer, int expert)>& routed_expert_here) {
  // Every weight to repack, then one buffer for all of their codes: large enough for huge
  // pages (core/tensor.h), so the first writes fault once per 2 MiB instead of per 4 KiB.
  std::vector<quant::QuantizedWeightView*> to_repack;
  for_each_linear_weight(weights, [&](quant::LinearWeight& weight, int layer, int expert) {
    if (expert >= 0 && routed_expert_here && !routed_expert_here(layer, expert)) return;
    if (!weight.packed.has_value()) return;
    quant::QuantizedWeightView& q = *weight.packed;
    const bool fp4 = q.format == quant::WeightFormat::kNvfp4 || q.format == quant::WeightFormat::kMxfp4;
    if (!fp4 || q.code_order != quant::Fp4CodeOrder::kCheckpoint || q.rows == 0 || q.cols < 32) return;
    if (quant::preferred_fp4_code_order(q.format) != quant::Fp4CodeOrder::kCpuChunk32) return;
    to_repack.push_back(&q);
  });
  auto padded_bytes = [](const quant::QuantizedWeightView& q) { return (quant::quantized_weight_sizes(q).data + 63) / 64 * 64; };
  int64_t total = 0;
  for (const quant::QuantizedWeightView* q : to_repack) total += padded_bytes(*q);
  if (total == 0) return;
  uint8_t* codes = weights.owned.emplace_back(Buffer::uninitialized(DType::kU8, Shape{total})).data<uint8_t>();
  for (quant::QuantizedWeightView* q : to_repack) {
    quant::reorder_fp4_codes(q->data, q->rows, q->cols, quant::Fp4CodeOrder::kCheckpoint,
                             quant::Fp4CodeOrder::kCpuChunk32, codes);
    q->data = codes;
    q->code_order = quant::Fp4CodeOrder::kCpuChunk32;
    codes += padded_bytes(*q);
  }
}

void set_fp8_activations(ModelWeights& weights, quant::ActivationPrecision precision) {
  for_each_linear_weight(weights, [&](quant::LinearWeight& weight, int, int) {
    if (weight.packed.has_value() && quant::bf16_activations_admitted(*weight.packed)) {
      weight.packed->activations = precision;
    }
  });
}

void set_bf16_activations(ModelWeights& weights, quant::ActivationPrecision precision) {
  if (precision != quant::ActivationPrecision::kBf16) return;
  const quant::Bf16WeightStorage storage = [&](int64_t numel) {
    return weights.owned.emplace_back(Buffer::uninitialized(DType::kBF16, Shape{numel})).data<uint16_t>();
  };
  for_each_linear_weight(weights, [&](quant::LinearWeight& weight, int, int) {
    quant::enable_bf16_activations(weight, storage);
  });
}

Status lay_out_weights(ModelWeights& weights, const io::Checkpoint& checkpoint, const WeightPreparation& how) {
  set_fp8_activations(weights, how.fp8_activations);
  set_bf16_activations(weights, how.bf16_activations);
  repack_fp4_codes(weights, how.routed_expert_here);
  const Result<int64_t> held = hold_weights_in_memory(weights, checkpoint, how.memory, how.routed_expert_here);
  return held.is_ok() ? Status::ok() : held.status().with_context(checkpoint.dir());
}

}  // namespace moert::backend::cpu_weights
