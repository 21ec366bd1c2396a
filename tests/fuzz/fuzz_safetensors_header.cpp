// libFuzzer target: any bytes as a safetensors file image. The header parser must return a
// Status for every input (no crash, no hang, no out-of-bounds read: ASan and UBSan watch).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "runtime/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> metadata;
  (void)moert::io::parse_safetensors_header(data, size, &metadata, "fuzz.safetensors");
  return 0;
}
