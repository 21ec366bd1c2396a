// What Qwen3-Next and Qwen3.5-MoE share (docs/gated-deltanet.md): Gated DeltaNet layers
// between gated full-attention layers, (1 + w) norms, partial rotary, a sigmoid-gated shared
// expert.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "runtime/model/arch/arch.h"

namespace moert::arch {

// layer_types (or full_attention_interval), linear_* widths, head_dim (required: nh * hd is
// not the hidden size), attn_output_gate, partial_rotary_factor, attention_bias,
// shared_expert_intermediate_size, mamba_ssm_dtype. The routing keys are the caller's.
Status parse_qwen_hybrid(const ConfigReader& r, ModelConfig* c);
void qwen_hybrid_to_json(const ModelConfig& c, nlohmann::json& j);
// make-model: three linear-attention layers then one full-attention layer, repeated (the last
// layer is always full); NK = KVH, NV = 2 NK, DK = Dh / 2, DV = 3 Dh / 8 (DK != DV, as in the
// shared tiny cases), conv width 4, gated attention, rotary on a quarter of each head.
void apply_qwen_hybrid_preset(ModelConfig* c);

}  // namespace moert::arch
