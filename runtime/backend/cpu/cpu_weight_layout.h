// How the CPU backend lays a model's weights out for its kernels (CpuBackend::prepare_weights),
// from the model's plain views (runtime/model/weights.h) in the checkpoint's layout.
#pragma once

#include <cstdint>
#include <functional>

#include "core/status.h"
#include "runtime/backend/backend.h"
#include "runtime/model/weights.h"

namespace moert::backend::cpu_weights {

// In order: set_fp8_activations, set_bf16_activations, repack_fp4_codes (the routed experts
// of `how.routed_expert_here` only), then hold_weights_in_memory (runtime/model/weight_memory.h)
// as `how.memory` says, for the same experts. Errors as hold_weights_in_memory's, naming
// the checkpoint's folder.
Status lay_out_weights(ModelWeights& weights, const io::Checkpoint& checkpoint, const WeightPreparation& how);

// Rewrites the codes of every NVFP4 / MXFP4 weight whose format the CPU path of this machine
// computes faster in quant::Fp4CodeOrder::kCpuChunk32 (quant::preferred_fp4_code_order;
// docs/quant-formats.md "CPU code order") into storage the weights own; the checkpoint's
// mapping is left as it is. Same results: the kernels read either order.
// routed_expert_here(layer, expert), when given, limits the routed experts repacked to those
// this rank computes (an expert-parallel rank need not hold a second copy of the others; an
// expert EPLB moves here later runs in the checkpoint order, as fast or nearly).
void repack_fp4_codes(ModelWeights& weights, const std::function<bool(int layer, int expert)>& routed_expert_here = {});

// Marks every FP8 weight the bf16 mode admits (quant::bf16_activations_admitted: FP8 with its
// codes marked finite) to be computed with `precision` activations (kBf16:
// quant/cpu/bf16_linear.h, the explicit `--fp8-activations bf16` mode); other formats are left
// as they are.
void set_fp8_activations(ModelWeights& weights, quant::ActivationPrecision precision);

// With kBf16, marks every dense BF16 linear weight the bf16 mode admits (attention, experts,
// shared experts, dense MLPs, lm_head; quant::enable_bf16_activations scans each, and gives a
// weight with elements below the mode's 2^-56 floor a flushed copy) to be computed with BF16
// activations (the explicit `--bf16-activations bf16` mode); the routers and every other
// weight keep F32 activations. kF32 leaves them all.
void set_bf16_activations(ModelWeights& weights, quant::ActivationPrecision precision);

}  // namespace moert::backend::cpu_weights
