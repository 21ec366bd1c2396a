// What DeepSeek-V3.2 and GLM-5 share on top of DeepSeek-V3's MLA (docs/sparse-attention.md):
// the lightning indexer's config.json keys and their checks, and the make-model choices.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "runtime/model/arch/arch.h"

namespace moert::arch {

// index_topk, index_n_heads, index_head_dim (required), the indexer RoPE pairing
// (`indexer_rope_interleave` when set, else `default_interleaved`), and GLM-5.2's indexer
// sharing (`indexer_types`, or `index_topk_freq` + `index_skip_topk_offset`) into
// SparseAttentionDims::shared_layers. Needs c->mla parsed first (q LoRA, rope width) and
// num_layers. Errors name the key.
Status parse_sparse_attention(const ConfigReader& r, bool default_interleaved, ModelConfig* c);
void sparse_attention_to_json(const ModelConfig& c, nlohmann::json& j);
// make-model: an indexer of 4 heads x (2 * rope width) with index_topk 8 (so that contexts of
// a few dozen tokens exercise the selection) and the given pairing.
void apply_sparse_attention_preset(ModelConfig* c, bool interleaved);

}  // namespace moert::arch
