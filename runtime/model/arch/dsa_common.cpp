#include "runtime/model/arch/dsa_common.h"

#include <algorithm>
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
  // GLM-5.2 runs the indexer only on "full" layers; a "shared" one reuses the selection of the
  // last full layer (docs/sparse-attention.md). `indexer_types` names each layer; without it,
  // layer L is full iff max(L - offset + 1, 0) % freq == 0 (`index_topk_freq`,
  // `index_skip_topk_offset`); neither key: every layer full.
  s.shared_layers.clear();
  const int layers = c->num_layers;
  if (r.is_set("indexer_types")) {
    const nlohmann::json& types = r.raw("indexer_types");
    if (!types.is_array() || static_cast<int>(types.size()) != layers) {
      return invalid_argument("config.json 'indexer_types' must be a list of " + std::to_string(layers) +
                              " entries (one per layer)");
    }
    for (const nlohmann::json& type : types) {
      if (type != "full" && type != "shared") {
        return invalid_argument("config.json 'indexer_types' has " + type.dump() + " (only \"full\" or \"shared\")");
      }
      s.shared_layers.push_back(type == "shared");
    }
  } else if (r.is_set("index_topk_freq")) {
    MOERT_ASSIGN_OR_RETURN(int frequency, r.optional_int("index_topk_freq", 1));
    MOERT_ASSIGN_OR_RETURN(int offset, r.optional_int("index_skip_topk_offset", 0));
    MOERT_RETURN_IF_ERROR(check_positive("index_topk_freq", frequency));
    if (offset < 0) {
      return invalid_argument("config.json 'index_skip_topk_offset' = " + std::to_string(offset) + " must be >= 0");
    }
    for (int layer = 0; layer < layers; ++layer) s.shared_layers.push_back(std::max(layer - offset + 1, 0) % frequency != 0);
  }
  if (!s.shared_layers.empty() && s.shared_layers.front()) {
    return invalid_argument("config.json 'indexer_types' (or 'index_topk_freq' / 'index_skip_topk_offset') makes "
                            "layer 0 \"shared\": it has no earlier indexer to share");
  }
  if (std::find(s.shared_layers.begin(), s.shared_layers.end(), true) == s.shared_layers.end()) s.shared_layers.clear();
  return Status::ok();
}

void sparse_attention_to_json(const ModelConfig& c, nlohmann::json& j) {
  j["index_topk"] = c.dsa.index_topk;
  j["index_n_heads"] = c.dsa.index_n_heads;
  j["index_head_dim"] = c.dsa.index_head_dim;
  j["indexer_rope_interleave"] = c.dsa.rope_pairing == attention::RopePairing::kInterleaved;
  if (!c.dsa.shared_layers.empty()) {
    nlohmann::json types = nlohmann::json::array();
    for (bool shared : c.dsa.shared_layers) types.push_back(shared ? "shared" : "full");
    j["indexer_types"] = types;
  }
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
