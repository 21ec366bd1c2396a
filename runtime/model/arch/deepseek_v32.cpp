// DeepSeek-V3.2 (DeepseekV32ForCausalLM, model_type deepseek_v32; docs/sparse-attention.md):
// DeepSeek-V3 (deepseek_v3.cpp: MLA, YaRN, noaux_tc router, dense first layers) with DeepSeek
// Sparse Attention in every layer. The indexer's RoPE is rotate-half (DeepSeek's fixed
// release; no config key names it, `indexer_rope_interleave` is honoured when present).
#include <nlohmann/json.hpp>

#include "runtime/model/arch/arch.h"
#include "runtime/model/arch/dsa_common.h"
#include "runtime/model/config.h"

namespace moert::arch {
extern const ArchSpec deepseek_v3;

namespace {

constexpr const char* kAliases[] = {"deepseek_v32", "deepseekv32"};

Status parse(const ConfigReader& r, ModelConfig* c) {
  MOERT_RETURN_IF_ERROR(deepseek_v3.parse(r, c));
  return parse_sparse_attention(r, /*default_interleaved=*/false, c);
}

void to_json(const ModelConfig& c, nlohmann::json& j) {
  deepseek_v3.to_json(c, j);
  sparse_attention_to_json(c, j);
}

// DeepSeek-V3's preset (YaRN x4 over 256 positions, 4 groups keep 2) plus a rotate-half
// indexer with index_topk 8.
void apply_preset(ModelConfig* c) {
  deepseek_v3.apply_preset(c);
  apply_sparse_attention_preset(c, /*interleaved=*/false);
}

}  // namespace

extern const ArchSpec deepseek_v32 = {
    .hf_class = "DeepseekV32ForCausalLM",
    .model_type = "deepseek_v32",
    .aliases = kAliases,
    .attention = AttentionKind::kMla,
    .router = RouterKind::kSigmoidGroupLimited,
    .parse = parse,
    .to_json = to_json,
    .apply_preset = apply_preset,
    .names = {},
};

}  // namespace moert::arch
