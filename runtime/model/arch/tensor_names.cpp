#include "runtime/model/arch/tensor_names.h"

#include <charconv>
#include <limits>

namespace moert {

std::string TensorNames::layer_prefix(int layer) const {
  std::string prefix(layers);
  prefix += '.';
  prefix += std::to_string(layer);
  prefix += '.';
  return prefix;
}

std::string TensorNames::attention_prefix(int layer) const { return layer_prefix(layer) + attention + "."; }

std::string TensorNames::linear_attention_prefix(int layer) const {
  return layer_prefix(layer) + linear_attention + ".";
}

std::string TensorNames::mlp_prefix(int layer) const { return layer_prefix(layer) + mlp + "."; }

std::string TensorNames::moe_prefix(int layer) const { return layer_prefix(layer) + moe_block + "."; }

std::string TensorNames::router_module(int layer) const { return moe_prefix(layer) + router; }

std::string TensorNames::experts_prefix(int layer) const { return moe_prefix(layer) + experts + "."; }

std::string TensorNames::expert_prefix(int layer, int expert) const {
  return experts_prefix(layer) + std::to_string(expert) + ".";
}

std::string TensorNames::shared_expert_prefix(int layer) const { return moe_prefix(layer) + shared_expert + "."; }

std::string TensorNames::every_layer(std::initializer_list<const char*> module) const {
  std::string glob(layers);
  glob += ".*";
  for (const char* piece : module) {
    glob += '.';
    glob += piece;
  }
  return glob;
}

int TensorNames::layer_of(std::string_view name) const {
  const std::string prefix = std::string(layers) + ".";
  if (!name.starts_with(prefix)) return -1;
  int layer = -1;
  const char* begin = name.data() + prefix.size();
  const auto [end, error] = std::from_chars(begin, name.data() + name.size(), layer);
  if (error == std::errc::result_out_of_range) return std::numeric_limits<int>::max();
  return error == std::errc() && end != begin && layer >= 0 ? layer : -1;
}

}  // namespace moert
