// libFuzzer target: any text as a config.json. Parsing, validation and the layer specs must
// end in a config or a Status (nesting, duplicate keys, out-of-range integers included).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/strict_json.h"
#include "runtime/model/config.h"
#include "runtime/model/kv_cache_groups.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  moert::Result<nlohmann::json> json = moert::parse_strict_json(text, "config.json");
  if (!json.is_ok()) return 0;
  moert::Result<moert::ModelConfig> config = moert::parse_model_config(*json);
  if (!config.is_ok()) return 0;
  (void)moert::kv_cache_groups(*config, moert::DType::kBF16);
  (void)moert::model_config_to_json(*config).dump();
  return 0;
}
