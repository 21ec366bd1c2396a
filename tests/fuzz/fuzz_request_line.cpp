// libFuzzer target: any text as a `moert run` input line, and the output line of what parses.
#include <cstddef>
#include <cstdint>
#include <string>

#include "launch/serving/request_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  moert::Result<moert::engine::Request> request = moert::serving::parse_request_line(line);
  if (!request.is_ok()) return 0;
  moert::engine::RequestOutput output;
  output.id = request->id;
  output.id_json = request->id_json;
  output.outputs.push_back({request->prompt, "length"});
  (void)moert::serving::format_output_line(output);
  return 0;
}
