#include "attention/kv_cache_spec.h"

#include "attention/paged_kv.h"

namespace moert::attention {

const char* kv_cache_kind_name(KvCacheKind kind) {
  switch (kind) {
    case KvCacheKind::kFullAttention: return "full_attention";
    case KvCacheKind::kSlidingWindow: return "sliding_window";
    case KvCacheKind::kLatent: return "latent";
  }
  return "?";
}

int64_t KvCacheSpec::values_per_token() const {
  return kind == KvCacheKind::kLatent ? latent_width : 2LL * num_kv_heads * head_dim;
}

int64_t KvCacheSpec::bytes_per_token() const { return values_per_token() * kv_element_bytes(dtype); }

int64_t KvCacheSpec::bytes_per_block(int block_size) const {
  const int64_t scales_per_layer = dtype != DType::kF8E4M3 ? 0 : kind == KvCacheKind::kLatent ? 1 : 2LL * num_kv_heads;
  const int64_t per_layer = block_size * bytes_per_token() + scales_per_layer * static_cast<int64_t>(sizeof(float));
  return per_layer * static_cast<int64_t>(layers.size());
}

int64_t kv_cache_bytes_per_token(const std::vector<KvCacheSpec>& groups) {
  int64_t bytes = 0;
  for (const KvCacheSpec& group : groups) bytes += group.bytes_per_token() * static_cast<int64_t>(group.layers.size());
  return bytes;
}

bool kv_groups_share_storage(const std::vector<KvCacheSpec>& groups) {
  for (const KvCacheSpec& group : groups) {
    const KvCacheSpec& first = groups.front();
    if (group.layers.size() != first.layers.size() || group.num_kv_heads != first.num_kv_heads ||
        group.head_dim != first.head_dim || group.dtype != first.dtype || group.kind == KvCacheKind::kLatent) {
      return false;
    }
  }
  return true;
}

int64_t kv_cache_bytes_per_block(const std::vector<KvCacheSpec>& groups, int block_size) {
  if (!groups.empty() && kv_groups_share_storage(groups)) return groups.front().bytes_per_block(block_size);
  int64_t bytes = 0;
  for (const KvCacheSpec& group : groups) bytes += group.bytes_per_block(block_size);
  return bytes;
}

Result<DType> parse_kv_cache_dtype(std::string_view name, DType auto_dtype) {
  if (name == "auto") return auto_dtype;
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "fp8_e4m3" || name == "fp8") return DType::kF8E4M3;
  return invalid_argument("--kv-cache-dtype '" + std::string(name) + "' is not one of auto, f32, bf16, fp8_e4m3");
}

const char* kv_cache_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF8E4M3: return "fp8_e4m3";
    default: return "?";
  }
}

}  // namespace moert::attention
