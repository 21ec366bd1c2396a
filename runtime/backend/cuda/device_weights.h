// The device views of a model's weights for the CUDA kernels (docs/cuda-backend.md): dense and
// block-scaled formats (FP8 blocks, NVFP4, MXFP4: the FP4 path), resident or staged, and the
// per-expert tables of the grouped expert kernels. Private to runtime/backend/cuda.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "quant/cuda/fp4_activations.h"
#include "quant/cuda/linear.h"
#include "quant/weight.h"
#include "runtime/backend/cuda/device_memory.h"

namespace moert::MOERT_CUDA_NS::backend_detail {

int64_t dtype_bytes(DType dtype);
// The device view of `weight` (its regions resident when placed, else staged in `staging`).
// The kernels read FP4 codes in checkpoint order (checked).
DeviceWeight device_weight(const quant::LinearWeight& weight, Staging& staging);
// The format a weight's activations are rounded to before its product (`--fp4-activations fp4`).
Fp4Activations fp4_activations_of(const quant::LinearWeight& weight);

// What the grouped kernels need to know of a set of routed experts besides their weights.
struct ExpertSet {
  int64_t intermediate_size = 0;       // I, the same for every expert
  experts::GluActivation activation;   // the same for every expert
  bool tensor_core_weights = true;     // every gate, up and down weight runs on the tensor cores
  Fp4Activations fp4_activations = Fp4Activations::kNone;  // the same for every weight
};
// table[id] = the device view of expert `id`'s weights (resident when placed, else staged
// in `s`), for each of `ids`.
ExpertSet fill_device_experts(std::span<const int32_t> ids,
                              const std::function<backend::Backend::ExpertWeights(int expert)>& expert_weights,
                              Staging& s, std::vector<DeviceExpert>& table);

}  // namespace moert::MOERT_CUDA_NS::backend_detail
