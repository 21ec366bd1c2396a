#include "runtime/model/arch/dsa_common.h"

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/model/config.h"

namespace moert::arch {

Status parse_sparse_attention(const ConfigReader& r, bool default_interleaved, ModelConfig* c) {
  SparseAttentionDims& s = c->dsa;
  MOERT_ASSIGN_OR_RETURN(s.index_topk, r.required_int("index_topk"));
  MOERT_ASSIGN_OR_RETURN(s.index_n_heads, r.required_int("index_n_heads"));
  MOERT_ASSIGN_OR_RETURN(s.index_head_dim, r.required_int("index_head_dim"));
  for (auto [key, value] : {std::pair{"index_topk", s.index_topk}, {"index_n_heads", s.index_n_heads},
                            {"index_head_dim", s.index_head_dim}}) {
    MOERT_RETURN_IF_ERROR(check_positive(key, value));
  }
  const int rope = c->mla.qk_rope_head_dim;
  if (s.index_head_dim < rope) {
    return invalid_argument("config.json 'index_head_dim' = " + std::to_string(s.index_head_dim) +
                            " must be >= 'qk_rope_head_dim' = " + std::to_string(rope) +
                            " (the indexer head starts with the rope part)");
  }
  if (c->mla.q_lora_rank <= 0) {
    return invalid_argument("config.json 'q_lora_rank' must be > 0 with a lightning indexer (its query reads the q "
                            "LoRA latent)");
  }
  MOERT_ASSIGN_OR_RETURN(bool interleaved, r.optional_bool("indexer_rope_interleave", default_interleaved));
  s.rope_pairing = interleaved ? attention::RopePairing::kInterleaved : attention::RopePairing::kRotateHalf;
  s.key_norm_eps = 1e-6f;
  // GLM-5.2 runs the indexer only on "full" layers and reuses its selection on "shared" ones
  // (docs/sparse-attention.md). Not built: refuse instead of running shared layers without one.
  if (r.is_set("indexer_types")) {
    const nlohmann::json& types = r.raw("indexer_types");
    if (!types.is_array()) return invalid_argument("config.json 'indexer_types' must be a list");
    for (const nlohmann::json& type : types) {
      if (type != "full") {
        return unsupported("config.json 'indexer_types' has " + type.dump() +
                           " layers (GLM-5.2 indexer sharing is not supported; only \"full\")");
      }
    }
  }
  MOERT_ASSIGN_OR_RETURN(int frequency, r.optional_int("index_topk_freq", 1));
  if (frequency != 1) {
    return unsupported("config.json 'index_topk_freq' = " + std::to_string(frequency) +
                       " (GLM-5.2 indexer sharing is not supported; only 1)");
  }
  return Status::ok();
}

void sparse_attention_to_json(const ModelConfig& c, nlohmann::json& j) {
  j["index_topk"] = c.dsa.index_topk;
  j["index_n_heads"] = c.dsa.index_n_heads;
  j["index_head_dim"] = c.dsa.index_head_dim;
  j["indexer_rope_interleave"] = c.dsa.rope_pairing == attention::RopePairing::kInterleaved;
}

void apply_sparse_attention_preset(ModelConfig* c, bool interleaved) {
  SparseAttentionDims& s = c->dsa;
  s.index_topk = 8;
  s.index_n_heads = 4;
  s.index_head_dim = 2 * c->mla.qk_rope_head_dim;
  s.rope_pairing = interleaved ? attention::RopePairing::kInterleaved : attention::RopePairing::kRotateHalf;
  s.key_norm_eps = 1e-6f;
}

}  // namespace moert::arch
